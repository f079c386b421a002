// An attention layer's input in one launch: the contract of Ops::QkvPrep (backend/ops.h) on
// device pointers. A decode step split a fused q|gate|k|v projection (Qwen3.5; Qwen3's q|k|v)
// into four (three) arrays, normed q and k per head and rotated them: eight (seven) launches of a
// few microseconds each, and at prefill seven passes over the rows.
// Here one warp per (token, head) does its head's share of all of it — the norm with RmsNorm's
// arithmetic (row_norm.cuh: the same squares, tree and rounding), the rotation with Rope's
// (device_math.cuh: RopePair) — so every output has the bits of the separate launches.
//
// Needs head_dim <= 256 (eight columns a lane: the norm block's 256), rot_dim even and <= head_dim.
#pragma once

#include <cstdint>

#include "util/status.h"

namespace graft::cuda {

inline constexpr int kQkvPrepMaxHeadDim = 256;  // the norm block's columns (row_norm.cuh)

struct QkvPrepDevArgs {
  const float* qkv;          // [n, qkv_w]: gated, per query head q_h | gate_h, then k [nkv * hd], then v;
                             // ungated (gate == nullptr), q [nh * hd] | k | v
  int n, nh, nkv, hd, rot_dim;
  const float* q_norm;       // [hd] fp32
  const float* k_norm;       // [hd]
  int norm_kind;             // row_norm.cuh's Normed: 0 plain w, 1 one-plus-w
  float eps;
  const int32_t* pos;        // [n] device
  const float* inv_freq;     // [rot_dim / 2] device
  float attn_scale;
  float *q, *gate;           // [n, nh * hd]; gate nullptr: the ungated layout
  float *k, *v;              // [n, nkv * hd]
};

Status QkvPrep(const QkvPrepDevArgs& a, bool bf16, void* stream);

}  // namespace graft::cuda

#include "backend/cuda/attention_prep.h"

#include <cuda_runtime.h>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/launched.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/row_norm.cuh"

namespace graft::cuda {
namespace {

static_assert(kQkvPrepMaxHeadDim == kNormThreads, "a head's columns are the norm block's threads");

constexpr int kWarps = kNormThreads / 32;  // (token, head) items a block
constexpr int kPer = kQkvPrepMaxHeadDim / 32;  // columns a lane

// Warp w of block b: item b * kWarps + w = token t's query head h (h < nh: q normed and rotated,
// gate copied when gated) or key-value head h - nh (k normed and rotated, v copied). Lane l owns
// columns l + 32 j of the head: RmsNorm's squares and tree (row_norm.cuh: WarpInvRms, the block
// form's pairs in its order), Rope's pairs through the warp's row of shared memory. A block a
// (token, head) with a thread a column left half its threads idle at 128 columns and made a 4K
// prefill's launch 300,000 blocks.
__global__ void __launch_bounds__(kNormThreads) QkvPrepKernel(QkvPrepDevArgs a, bool bf16) {
  __shared__ float normed[kWarps][kQkvPrepMaxHeadDim];
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, hd = a.hd, heads = a.nh + a.nkv;
  const int64_t item = int64_t{blockIdx.x} * kWarps + warp;
  if (item >= int64_t{a.n} * heads) return;
  const int64_t t = item / heads;
  const int hh = static_cast<int>(item % heads);
  const bool query = hh < a.nh, gated = a.gate != nullptr;
  const int h = query ? hh : hh - a.nh;
  const int64_t q_w = int64_t{a.nh} * hd, kv_w = int64_t{a.nkv} * hd, q_span = gated ? 2 * q_w : q_w;
  const float* row = a.qkv + t * (q_span + 2 * kv_w);
  const float* src = query ? row + int64_t{h} * (gated ? 2 : 1) * hd : row + q_span + int64_t{h} * hd;
  const float* copy_src = query ? (gated ? src + hd : nullptr) : row + q_span + kv_w + int64_t{h} * hd;  // gate_h, v_h
  const float* w = query ? a.q_norm : a.k_norm;
  float x[kPer], sq[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int c = lane + 32 * j;
    x[j] = c < hd ? src[c] : 0.0f;
    sq[j] = c < hd ? __fadd_rn(0.0f, __fmul_rn(x[j], x[j])) : 0.0f;  // RmsNorm's sum from zero: 0 + x² is x²
  }
  const float inv = WarpInvRms(sq, hd, a.eps);
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int c = lane + 32 * j;
    if (c < hd) normed[warp][c] = Normed(x[j], inv, w[c], a.norm_kind, bf16);
  }
  __syncwarp();
  float* out = query ? a.q + t * q_w + int64_t{h} * hd : a.k + t * kv_w + int64_t{h} * hd;
  float* copy_dst = query ? (gated ? a.gate + t * q_w + int64_t{h} * hd : nullptr) : a.v + t * kv_w + int64_t{h} * hd;
  const int half = a.rot_dim / 2;
  const int32_t p = a.pos[t];
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int c = lane + 32 * j;
    if (c >= hd) break;
    float o = normed[warp][c];
    if (c < a.rot_dim) {
      const int d = c < half ? c : c - half;
      float y0, y1;
      RopePair(normed[warp][d], normed[warp][d + half], p, a.inv_freq[d], a.attn_scale, bf16, y0, y1);
      o = c < half ? y0 : y1;
    }
    out[c] = o;
    if (copy_dst != nullptr) copy_dst[c] = copy_src[c];
  }
}

}  // namespace

Status QkvPrep(const QkvPrepDevArgs& a, bool bf16, void* stream) {
  if (a.n < 0 || a.n > 0x7fffffff || a.nh <= 0 || a.nkv <= 0 || a.nh + a.nkv > 65535 || a.hd <= 0 ||
      a.hd > kQkvPrepMaxHeadDim || a.rot_dim < 0 || a.rot_dim % 2 != 0 || a.rot_dim > a.hd ||
      (a.norm_kind != 0 && a.norm_kind != 1)) {
    return InvalidArgument(
        "cuda QkvPrep: needs head_dim 1..256, an even rot_dim <= head_dim, nh + nkv <= 65535, norm kind 0 or 1");
  }
  if (a.n == 0) return Status::Ok();
  const int64_t blocks = (int64_t{a.n} * (a.nh + a.nkv) + kWarps - 1) / kWarps;
  if (blocks > 0x7fffffff) return InvalidArgument("cuda QkvPrep: more than 2^31 blocks of (token, head) items");
  LaunchPdl(QkvPrepKernel, static_cast<unsigned>(blocks), kNormThreads, 0, static_cast<cudaStream_t>(stream), a, bf16);
  return Launched("QkvPrep");
}

}  // namespace graft::cuda

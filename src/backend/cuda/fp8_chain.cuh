// FP8's product chain (gemm_fp8.h's bits), the one both FP8 tensor-core kernels run — the first
// (gemm_fp8.cu: up to 256 rows) and the persistent prefill kernel (gemm_fp8_prefill.cu) — so that
// a row's outputs are the same whichever computes them. A thread's accumulators are wgmma's m64nN
// layout (wgmma_ptx.cuh): total[4j + e] is activation row lo (e < 2) or hi, output 8j + 2t + e % 2.
//
// A group's dot product `part` is its 32-column wgmma chunks in ascending order from zero (the
// first chunk with the accumulator off); at the group's end total += part · (sx · sw): fp8-block
// multiplies the two rows' activation scales by the block's weight scale once, per channel each
// output's own weight scale. The kernels supply, as callables:
//   issue(part, i, starts)   stage i's chunks into part (starting it when `starts`), not waited for;
//   release(i)               stage i's products are in: its slot may be refilled;
//   finish(part, i, lo, hi, ws)  (one-stage groups) stage i's group is done: promote it.
#pragma once

#include <cuda_runtime.h>

#include "backend/cuda/wgmma_ptx.cuh"

namespace graft::cuda::fp8 {

// total += part · (xs · ws) with fp8-block's one weight scale.
template <int kN>
__device__ __forceinline__ void PromoteBlock(float (&total)[kN], const float (&part)[kN], float xs_lo, float xs_hi,
                                             float ws) {
  const float s_lo = __fmul_rn(xs_lo, ws), s_hi = __fmul_rn(xs_hi, ws);
#pragma unroll
  for (int j = 0; j < kN / 4; ++j) {
    total[4 * j + 0] = __fadd_rn(total[4 * j + 0], __fmul_rn(part[4 * j + 0], s_lo));
    total[4 * j + 1] = __fadd_rn(total[4 * j + 1], __fmul_rn(part[4 * j + 1], s_lo));
    total[4 * j + 2] = __fadd_rn(total[4 * j + 2], __fmul_rn(part[4 * j + 2], s_hi));
    total[4 * j + 3] = __fadd_rn(total[4 * j + 3], __fmul_rn(part[4 * j + 3], s_hi));
  }
}

// total += part · (xs · w[o]) per channel; wc(j) is the float2 of outputs 8j + 2t and + 1's scales.
template <int kN, class ChannelScales>
__device__ __forceinline__ void PromoteChannel(float (&total)[kN], const float (&part)[kN], float xs_lo, float xs_hi,
                                               ChannelScales&& wc) {
#pragma unroll
  for (int j = 0; j < kN / 4; ++j) {
    const float2 w = wc(j);
    total[4 * j + 0] = __fadd_rn(total[4 * j + 0], __fmul_rn(part[4 * j + 0], __fmul_rn(xs_lo, w.x)));
    total[4 * j + 1] = __fadd_rn(total[4 * j + 1], __fmul_rn(part[4 * j + 1], __fmul_rn(xs_lo, w.y)));
    total[4 * j + 2] = __fadd_rn(total[4 * j + 2], __fmul_rn(part[4 * j + 2], __fmul_rn(xs_hi, w.x)));
    total[4 * j + 3] = __fadd_rn(total[4 * j + 3], __fmul_rn(part[4 * j + 3], __fmul_rn(xs_hi, w.y)));
  }
}

// A 128-column stage's four 32-column chunks into part (the first chunk starting it when
// `starts`): 64 activation rows at a_tile and 2 kN weight rows at b_tile, K-major in the
// 128-byte swizzle (wgmma_ptx.cuh); committed, not waited for. Columns past K are zeros in both
// tiles (TMA's fill): they add 0.
template <int kN>
__device__ __forceinline__ void StageChunks(float (&part)[kN], const void* a_tile, const void* b_tile, bool starts) {
  const uint64_t da = SwizzledTileDesc(a_tile), db = SwizzledTileDesc(b_tile);
  WgmmaFence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) WgmmaE4m3<2 * kN>(part, da + 2 * kk, db + 2 * kk, starts && kk == 0 ? 0 : 1);
  WgmmaCommit();
}

// Every stage a whole group (fp8-block's 128-column groups): two part sets, so that stage i + 1's
// products run on the tensor cores while stage i's are promoted. sx_lo / sx_hi / ws_row: the
// scales of the caller's first stage's group on. (Keep this loop's shape: ptxas serialized the
// wgmma of a version with the tail inside the loop.)
template <int kN, class Issue, class Finish>
__device__ __forceinline__ void OneStageGroups(int slices, const float* sx_lo, const float* sx_hi,
                                               const float* ws_row, Issue&& issue, Finish&& finish) {
  float pa[kN], pb[kN];
  float a_lo = sx_lo[0], a_hi = sx_hi[0], a_ws = ws_row[0], b_lo = 0.0f, b_hi = 0.0f, b_ws = 0.0f;
  issue(pa, 0, true);
  int i = 1;
  for (; i + 1 < slices; i += 2) {
    b_lo = sx_lo[i], b_hi = sx_hi[i], b_ws = ws_row[i];
    issue(pb, i, true);
    WgmmaWait<1>();
    finish(pa, i - 1, a_lo, a_hi, a_ws);
    a_lo = sx_lo[i + 1], a_hi = sx_hi[i + 1], a_ws = ws_row[i + 1];
    issue(pa, i + 1, true);
    WgmmaWait<1>();
    finish(pb, i, b_lo, b_hi, b_ws);
  }
  if (i < slices) {  // an even count: the last stage into pb
    b_lo = sx_lo[i], b_hi = sx_hi[i], b_ws = ws_row[i];
    issue(pb, i, true);
    WgmmaWait<1>();
    finish(pa, i - 1, a_lo, a_hi, a_ws);
    WgmmaWait<0>();
    finish(pb, i, b_lo, b_hi, b_ws);
  } else {
    WgmmaWait<0>();
    finish(pa, i - 1, a_lo, a_hi, a_ws);
  }
}

// Groups of several stages (per channel: the whole row): one chain through `part`. Inside a group
// stage i's products queue behind stage i - 1's (the tensor cores keep a chain's order) and only
// stage i - 1 is waited for, to free its slot; a group's end waits for all and promotes:
// promote(part, lo, hi, ws) with the group's scales (ws: 0 per channel, which takes its own).
template <int kN, class Issue, class Release, class Promote>
__device__ __forceinline__ void MultiStageGroups(int slices, int per_group, bool channel, const float* sx_lo,
                                                 const float* sx_hi, const float* ws_row, Issue&& issue,
                                                 Release&& release, Promote&& promote) {
  float part[kN];
  int left = per_group, gi = 0;
  bool prev_open = false;  // stage i - 1 issued, its slot not yet released
  for (int i = 0; i < slices; ++i) {
    const bool starts = left == per_group, ends = left == 1 || i + 1 == slices;
    // The scales this group ends with, loaded early: their latency hides behind the wait.
    float xs_lo = 0.0f, xs_hi = 0.0f, ws = 0.0f;
    if (ends) {
      xs_lo = sx_lo[gi];
      xs_hi = sx_hi[gi];
      if (!channel) ws = ws_row[gi];
    }
    issue(part, i, starts);
    if (ends) {
      WgmmaWait<0>();
      FenceAccumulators(part);
      if (prev_open) release(i - 1);
      release(i);
      promote(part, xs_lo, xs_hi, ws);
      prev_open = false;
      left = per_group;
      ++gi;
    } else {
      WgmmaWait<1>();
      if (prev_open) release(i - 1);
      prev_open = true;
      --left;
    }
  }
}

}  // namespace graft::cuda::fp8

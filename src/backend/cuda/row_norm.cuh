// The arithmetic of a row's RMS norm on the device, shared by RmsNorm / AddRmsNorm (rmsnorm.cu)
// and the kernels that fuse a norm into something else (attention_prep.cu), so that a fused norm
// has the bits of the plain one: the same order of squares, the same tree, the same rounding.
#pragma once

#include "backend/cuda/device_math.cuh"

namespace graft::cuda {

inline constexpr int kNormThreads = 256;  // a row's block

// kind 0: r(w · r(x · inv)); kind 1 (one-plus-w): r(x · inv · (1 + w)).
__device__ __forceinline__ float Normed(float x, float inv, float w, int kind, bool round_bf16) {
  const float n = __fmul_rn(x, inv);
  return kind == 0 ? RoundAct(__fmul_rn(w, RoundAct(n, round_bf16)), round_bf16)
                   : RoundAct(__fmul_rn(n, __fadd_rn(1.0f, w)), round_bf16);
}

// Σ over the block of each thread's partial sum of squares `acc` (kNormThreads threads, all of
// them calling): a fixed tree — shared memory halving down to 32 sums, then warp 0's shuffles.
// Returns 1 / sqrt(Σ / dim + eps), the same value in every thread.
__device__ __forceinline__ float InvRms(float acc, int dim, float eps, float* partial /* [kNormThreads] shared */) {
  const int tid = threadIdx.x;
  partial[tid] = acc;
  __syncthreads();
  for (int s = kNormThreads / 2; s >= 32; s >>= 1) {
    if (tid < s) partial[tid] = __fadd_rn(partial[tid], partial[tid + s]);
    __syncthreads();
  }
  if (tid < 32) {
    float p = partial[tid];
    for (int o = 16; o > 0; o >>= 1) p = __fadd_rn(p, __shfl_down_sync(0xffffffffu, p, o));
    if (tid == 0) partial[0] = p;
  }
  __syncthreads();
  return 1.0f / sqrtf(__fadd_rn(__fdiv_rn(partial[0], static_cast<float>(dim)), eps));
}

// InvRms's value for a row of up to kNormThreads columns held by one warp: lane l's sq[j] is
// column l + 32 j's square (0 + x²; 0 past the row), what thread l + 32 j holds in the block
// form. The same pairs are added in the same order — 256 -> 128 -> 64 -> 32 partial sums, then
// warp 0's shuffles — so the same bits. Every lane of the warp calls; every lane gets the value.
__device__ __forceinline__ float WarpInvRms(const float (&sq)[kNormThreads / 32], int dim, float eps) {
  static_assert(kNormThreads == 256, "the tree below is the 256-thread block's");
  float a[4], b[2];
#pragma unroll
  for (int j = 0; j < 4; ++j) a[j] = __fadd_rn(sq[j], sq[j + 4]);  // partial[i] += partial[i + 128]
#pragma unroll
  for (int j = 0; j < 2; ++j) b[j] = __fadd_rn(a[j], a[j + 2]);    // += partial[i + 64]
  float p = __fadd_rn(b[0], b[1]);                                  // += partial[i + 32]
  for (int o = 16; o > 0; o >>= 1) p = __fadd_rn(p, __shfl_down_sync(0xffffffffu, p, o));
  p = __shfl_sync(0xffffffffu, p, 0);
  return 1.0f / sqrtf(__fadd_rn(__fdiv_rn(p, static_cast<float>(dim)), eps));
}

}  // namespace graft::cuda

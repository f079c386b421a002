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

}  // namespace graft::cuda

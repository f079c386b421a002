#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "backend/cuda/launched.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/rmsnorm.h"
#include "backend/cuda/row_norm.cuh"

namespace graft::cuda {
namespace {

constexpr int kThreads = kNormThreads;
constexpr int kCached = 24;  // values a thread keeps in registers: rows up to 6144 wide in one read

// Thread t owns the row's columns t, t + 256, ...: its sum of squares runs over them in
// ascending order, then a fixed tree over the block (shared memory down to 32 partial sums,
// then warp 0's shuffles: the same pairs). The first kCached columns of each thread are read
// once, all loads issued before any store (a single block on the critical path at batch 1 was
// latency-bound on one load at a time), their weights with them (read after the sum they were a
// second round trip to memory: 10 -> 4 us a call at batch 1 on the H200).
// kAdd: the row is first h = r(h + y), written back.
template <bool kAdd>
__global__ void __launch_bounds__(kThreads) RmsNormKernel(const float* x, float* h, const float* __restrict__ y,
                                                          const float* __restrict__ w, int dim, float eps, int kind,
                                                          bool round_bf16, float* out) {
  __shared__ float partial[kThreads];
  const int64_t row = blockIdx.x;
  const int tid = threadIdx.x;
  const float* xr = kAdd ? h + row * dim : x + row * dim;
  float v[kCached], wv[kCached];  // the weights read with the row: their latency off the path after the sum
  // The norm's weights are uploaded by copies at load time, never written by a kernel: read them
  // before waiting for the kernel that wrote the row (pdl.cuh).
#pragma unroll
  for (int j = 0; j < kCached; ++j) wv[j] = tid + j * kThreads < dim ? w[tid + j * kThreads] : 0.0f;
  PdlBegin();
#pragma unroll
  for (int j = 0; j < kCached; ++j) v[j] = tid + j * kThreads < dim ? xr[tid + j * kThreads] : 0.0f;
  if constexpr (kAdd) {
    float yv[kCached];
#pragma unroll
    for (int j = 0; j < kCached; ++j) yv[j] = tid + j * kThreads < dim ? y[row * dim + tid + j * kThreads] : 0.0f;
#pragma unroll
    for (int j = 0; j < kCached; ++j) {
      if (tid + j * kThreads < dim) {
        v[j] = RoundAct(__fadd_rn(v[j], yv[j]), round_bf16);
        h[row * dim + tid + j * kThreads] = v[j];
      }
    }
  }
  float acc = 0.0f;
#pragma unroll
  for (int j = 0; j < kCached; ++j) {
    if (tid + j * kThreads < dim) acc = __fadd_rn(acc, __fmul_rn(v[j], v[j]));
  }
  for (int i = tid + kCached * kThreads; i < dim; i += kThreads) {  // wider rows: the rest, one at a time
    float u = xr[i];
    if constexpr (kAdd) {
      u = RoundAct(__fadd_rn(u, y[row * dim + i]), round_bf16);
      h[row * dim + i] = u;
    }
    acc = __fadd_rn(acc, __fmul_rn(u, u));
  }
  const float inv = InvRms(acc, dim, eps, partial);
  float* o = out + row * dim;
#pragma unroll
  for (int j = 0; j < kCached; ++j) {
    const int i = tid + j * kThreads;
    if (i < dim) o[i] = Normed(v[j], inv, wv[j], kind, round_bf16);
  }
  for (int i = tid + kCached * kThreads; i < dim; i += kThreads) o[i] = Normed(xr[i], inv, w[i], kind, round_bf16);
}

}  // namespace

Status RmsNorm(const float* x, const float* w, int64_t rows, int dim, float eps, NormKind kind, bool round_bf16,
               float* out, void* stream) {
  if (rows < 0 || dim <= 0) return InvalidArgument("cuda RmsNorm: bad shape");
  if (rows == 0) return Status::Ok();
  if (rows > 0x7fffffff) return InvalidArgument("cuda RmsNorm: more than 2^31 rows");
  LaunchPdl(RmsNormKernel<false>, static_cast<unsigned>(rows), kThreads, 0, static_cast<cudaStream_t>(stream), x,
            nullptr, nullptr, w, dim, eps, static_cast<int>(kind), round_bf16, out);
  return Launched("RmsNorm");
}

Status AddRmsNorm(float* h, const float* y, const float* w, int64_t rows, int dim, float eps, NormKind kind,
                  bool round_bf16, float* out, void* stream) {
  if (rows < 0 || dim <= 0) return InvalidArgument("cuda AddRmsNorm: bad shape");
  if (rows == 0) return Status::Ok();
  if (rows > 0x7fffffff) return InvalidArgument("cuda AddRmsNorm: more than 2^31 rows");
  if (out == h || out == y) return InvalidArgument("cuda AddRmsNorm: out aliases h or y");
  LaunchPdl(RmsNormKernel<true>, static_cast<unsigned>(rows), kThreads, 0, static_cast<cudaStream_t>(stream), nullptr,
            h, y, w, dim, eps, static_cast<int>(kind), round_bf16, out);
  return Launched("AddRmsNorm");
}

}  // namespace graft::cuda

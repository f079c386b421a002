#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <string>

#include "backend/cuda/rmsnorm.h"

namespace graft::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float RoundBf16(float v, bool on) {
  return on ? __bfloat162float(__float2bfloat16_rn(v)) : v;
}

// kAdd: the row is first h = r(h + y) (written back), each element by the thread that then
// squares and normalizes it.
template <bool kAdd>
__global__ void RmsNormKernel(const float* x, float* h, const float* __restrict__ y, const float* __restrict__ w,
                              int dim, float eps, int kind, bool round_bf16, float* out) {
  __shared__ float partial[kThreads];
  const int64_t row = blockIdx.x;
  const float* xr = kAdd ? h + row * dim : x + row * dim;
  float acc = 0.0f;
  for (int i = threadIdx.x; i < dim; i += kThreads) {
    float v = xr[i];
    if constexpr (kAdd) {
      v = RoundBf16(__fadd_rn(v, y[row * dim + i]), round_bf16);
      h[row * dim + i] = v;
    }
    acc = __fadd_rn(acc, __fmul_rn(v, v));
  }
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] = __fadd_rn(partial[threadIdx.x], partial[threadIdx.x + s]);
    __syncthreads();
  }
  const float inv = 1.0f / sqrtf(__fadd_rn(__fdiv_rn(partial[0], static_cast<float>(dim)), eps));
  float* o = out + row * dim;
  for (int i = threadIdx.x; i < dim; i += kThreads) {
    const float n = __fmul_rn(xr[i], inv);
    o[i] = kind == 0 ? RoundBf16(__fmul_rn(w[i], RoundBf16(n, round_bf16)), round_bf16)
                     : RoundBf16(__fmul_rn(n, __fadd_rn(1.0f, w[i])), round_bf16);
  }
}

Status Launched(const char* op) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return Internal(std::string("cuda ") + op + " launch: " + cudaGetErrorString(err));
  return Status::Ok();
}

}  // namespace

Status RmsNorm(const float* x, const float* w, int64_t rows, int dim, float eps, NormKind kind, bool round_bf16,
               float* out, void* stream) {
  if (rows < 0 || dim <= 0) return InvalidArgument("cuda RmsNorm: bad shape");
  if (rows == 0) return Status::Ok();
  if (rows > 0x7fffffff) return InvalidArgument("cuda RmsNorm: more than 2^31 rows");
  RmsNormKernel<false><<<static_cast<unsigned>(rows), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      x, nullptr, nullptr, w, dim, eps, static_cast<int>(kind), round_bf16, out);
  return Launched("RmsNorm");
}

Status AddRmsNorm(float* h, const float* y, const float* w, int64_t rows, int dim, float eps, NormKind kind,
                  bool round_bf16, float* out, void* stream) {
  if (rows < 0 || dim <= 0) return InvalidArgument("cuda AddRmsNorm: bad shape");
  if (rows == 0) return Status::Ok();
  if (rows > 0x7fffffff) return InvalidArgument("cuda AddRmsNorm: more than 2^31 rows");
  if (out == h || out == y) return InvalidArgument("cuda AddRmsNorm: out aliases h or y");
  RmsNormKernel<true><<<static_cast<unsigned>(rows), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      nullptr, h, y, w, dim, eps, static_cast<int>(kind), round_bf16, out);
  return Launched("AddRmsNorm");
}

}  // namespace graft::cuda

#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/lora.h"

namespace graft::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void LoraKernel(LoraArgs a) {
  __shared__ float t[kMaxLoraRank];
  const int64_t r = blockIdx.x;
  const int slot = a.row_slot[r];
  if (slot <= 0 || slot >= a.num_slots) return;
  const float* x = a.x + r * a.k;
  float* y = a.y + r * a.y_stride;
  for (int mi = a.slot_begin[slot]; mi < a.slot_begin[slot + 1]; ++mi) {
    const DevLoraModule m = a.modules[mi];
    for (int j = threadIdx.x; j < m.rank; j += blockDim.x) t[j] = RoundAct(DotWeight16(x, m.a, int64_t{j} * a.k, a.k), a.bf16);
    __syncthreads();
    for (int64_t n = threadIdx.x; n < m.b.rows; n += blockDim.x) {
      const float u = RoundAct(DotWeight16(t, m.b, n * m.rank, m.rank), a.bf16);
      float* yn = y + m.row_offset + n;
      *yn = RoundAct(__fadd_rn(*yn, RoundAct(__fmul_rn(u, m.scale), a.bf16)), a.bf16);
    }
    __syncthreads();
  }
}

__global__ void LoraScatterAddKernel(const float* u, int64_t m, int64_t cols, const int32_t* rows, float scale,
                                     int64_t row_offset, float* y, int64_t y_stride, bool bf16) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < m * cols; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = e / cols, n = e % cols;
    float* yn = y + int64_t{rows[t]} * y_stride + row_offset + n;
    *yn = RoundAct(__fadd_rn(*yn, RoundAct(__fmul_rn(u[e], scale), bf16)), bf16);
  }
}

}  // namespace

Status LoraScatterAdd(const float* u, int64_t m, int64_t cols, const int32_t* rows, float scale, int64_t row_offset,
                      float* y, int64_t y_stride, bool bf16, void* stream) {
  if (m < 0 || cols < 0) return InvalidArgument("cuda LoraScatterAdd: bad shape");
  if (m == 0 || cols == 0) return Status::Ok();
  const int64_t blocks = std::min<int64_t>((m * cols + kThreads - 1) / kThreads, 65535);
  LoraScatterAddKernel<<<static_cast<unsigned>(blocks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      u, m, cols, rows, scale, row_offset, y, y_stride, bf16);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return Internal(std::string("cuda LoraScatterAdd: ") + cudaGetErrorString(err));
  return Status::Ok();
}

Status LoraAdd(const LoraArgs& a, void* stream) {
  if (a.m < 0 || a.k <= 0 || a.num_slots <= 0) return InvalidArgument("cuda LoraAdd: bad shape");
  if (a.max_rank < 1 || a.max_rank > kMaxLoraRank) {
    return InvalidArgument("cuda LoraAdd: rank " + std::to_string(a.max_rank) + " outside 1.." + std::to_string(kMaxLoraRank));
  }
  if (a.m == 0) return Status::Ok();
  if (a.m > 0x7fffffff) return InvalidArgument("cuda LoraAdd: too many rows");
  LoraKernel<<<static_cast<unsigned>(a.m), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(a);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return Internal(std::string("cuda LoraAdd launch: ") + cudaGetErrorString(err));
  return Status::Ok();
}

}  // namespace graft::cuda

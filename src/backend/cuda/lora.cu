#include <cuda_runtime.h>

#include <string>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/lora.h"

namespace graft::cuda {
namespace {

constexpr int kThreads = 256;

// Σ a[i] · w(base + i) over i < k in the 16-lane order (one thread).
__device__ float DotWeight16(const float* a, const DevWeight& w, int64_t base, int64_t k) {
  float acc[16];
  for (int l = 0; l < 16; ++l) acc[l] = 0.0f;
  int64_t i = 0;
  for (; i + 16 <= k; i += 16)
    for (int l = 0; l < 16; ++l) acc[l] = __fadd_rn(acc[l], __fmul_rn(a[i + l], WeightAt(w, base + i + l)));
  for (int l = 0; i < k; ++i, ++l) acc[l] = __fadd_rn(acc[l], __fmul_rn(a[i], WeightAt(w, base + i)));
  for (int s = 8; s > 0; s >>= 1)
    for (int l = 0; l < s; ++l) acc[l] = __fadd_rn(acc[l], acc[l + s]);
  return acc[0];
}

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

}  // namespace

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

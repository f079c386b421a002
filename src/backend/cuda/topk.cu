#include <cuda_runtime.h>

#include "backend/cuda/launched.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/topk.h"

namespace graft::cuda {
namespace {

constexpr int kThreads = 256;

struct Cand {
  float v;
  int32_t id;
};

// a before b in the total order (value descending, id ascending); id -1 is "none".
__device__ bool Before(const Cand& a, const Cand& b) {
  if (a.id < 0) return false;
  if (b.id < 0) return true;
  return a.v != b.v ? a.v > b.v : a.id < b.id;
}

__global__ void TopKKernel(const float* x, int vocab, const float* temperature, int k, float* values, int32_t* ids) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  __shared__ Cand best[kThreads];
  const int64_t r = blockIdx.x;
  const float* row = x + r * vocab;
  const float t = temperature[r];
  Cand prev{0.0f, -1};
  for (int j = 0; j < k; ++j) {
    Cand mine{0.0f, -1};
    for (int i = threadIdx.x; i < vocab; i += kThreads) {
      const Cand c{t == 0.0f ? row[i] : __fdiv_rn(row[i], t), i};
      if ((prev.id < 0 || Before(prev, c)) && Before(c, mine)) mine = c;
    }
    best[threadIdx.x] = mine;
    __syncthreads();
    for (int s = kThreads / 2; s > 0; s >>= 1) {
      if (threadIdx.x < s && Before(best[threadIdx.x + s], best[threadIdx.x])) best[threadIdx.x] = best[threadIdx.x + s];
      __syncthreads();
    }
    prev = best[0];
    if (threadIdx.x == 0) {
      values[r * k + j] = prev.v;
      ids[r * k + j] = prev.id;
    }
    __syncthreads();
  }
}

}  // namespace

Status TopK(const float* x, int64_t rows, int vocab, const float* temperature, int k, float* values, int32_t* ids,
            void* stream) {
  if (rows < 0 || vocab <= 0 || k < 1 || k > 64 || k > vocab) {
    return InvalidArgument("cuda TopK: bad shape (1 <= k <= min(vocab, 64))");
  }
  if (rows == 0) return Status::Ok();
  LaunchPdl(TopKKernel, static_cast<unsigned>(rows), kThreads, 0, static_cast<cudaStream_t>(stream), x, vocab,
            temperature, k, values, ids);
  return Launched("TopK");
}

}  // namespace graft::cuda

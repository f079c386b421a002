// Not compiled: scripts/check-pdl-contract.py's test input (tests/CMakeLists.txt), one kernel a
// violation of the contract in src/backend/cuda/pdl.cuh, and one kernel that keeps it.
#include "backend/cuda/pdl.cuh"

__global__ void NeverWaits(float* y) { y[threadIdx.x] = 1.0f; }

__global__ void __launch_bounds__(128) ReturnsFirst(const float* x, float* y, int n) {
  if (threadIdx.x >= n) return;
  graft::cuda::PdlBegin();
  y[threadIdx.x] = x[threadIdx.x];
}

// A comment naming PdlBegin() does not count: __global__ void InComment() { return; }
__global__ void Keeps(const float* x, float* y, int n) {
  graft::cuda::PdlBegin();  // "return" in a string or comment is ignored
  if (threadIdx.x >= n) return;
  y[threadIdx.x] = x[threadIdx.x];
}

void Host(float* y, cudaStream_t s) { NeverWaits<<<1, 32, 0, s>>>(y); }

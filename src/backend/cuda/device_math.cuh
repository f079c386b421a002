// Device helpers shared by the CUDA kernels: rounding to bf16 where the CPU reference rounds
// (backend/ops.h), and the fp32 activation functions with PyTorch's definitions. Every
// arithmetic step uses the explicit round-to-nearest intrinsics so that nvcc never fuses a
// multiply and an add the CPU reference keeps apart.
#pragma once

#include <cuda_bf16.h>

#include "backend/cuda/device_weight.h"

namespace graft::cuda {

__device__ __forceinline__ float RoundAct(float v, bool bf16) {
  return bf16 ? __bfloat162float(__float2bfloat16_rn(v)) : v;
}
__device__ __forceinline__ float SiluF(float u) { return __fdiv_rn(u, __fadd_rn(1.0f, expf(-u))); }
__device__ __forceinline__ float SigmoidF(float u) { return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-u))); }
__device__ __forceinline__ float SoftplusF(float u) { return u > 20.0f ? u : log1pf(expf(u)); }

__device__ __forceinline__ float WeightAt(const DevWeight& w, int64_t i) {
  return w.bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(w.data)[i]) : static_cast<const float*>(w.data)[i];
}

}  // namespace graft::cuda

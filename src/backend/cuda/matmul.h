// CUDA projection y[m, N] = x[m, K] · Wᵀ (W [N, K]), the contract of Ops::MatMul.
//
// bf16 weights with bf16 activations run on the tensor cores (WMMA 16x16x16 bf16 → fp32):
// 64 x 64 block tiles for small batches, 128 x 128 tiles with the next K slice fetched during
// the current one for batches over 64 rows (k % 8 == 0, aligned pointers). In both, every
// output gains its products as the same sequence of 16-wide K chunks, ascending, through the
// same instruction: the order depends only on K — never on m, the kernel chosen, a row's place
// in the batch or its neighbours' values — and there is no split-K, so a row's bits never
// depend on the other rows (DESIGN.md §3.2; tested across the two kernels). fp32
// weights, or fp32 activations (which bf16 tensor cores would round), run a SIMT kernel that
// sums in the CPU reference's 16-lane order. The result is rounded to bf16 once at the end
// when round_output and bf16 (logits pass round_output = false and stay fp32).
#pragma once

#include <cstdint>

#include "backend/cuda/device_weight.h"
#include "util/status.h"

namespace graft::cuda {

Status MatMul(const float* x, int64_t m, const DevWeight& w, float* y, bool round_output, bool bf16, void* stream);

}  // namespace graft::cuda

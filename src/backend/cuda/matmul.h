// CUDA projection y[m, N] = x[m, K] · Wᵀ (W [N, K]), the contract of Ops::MatMul.
//
// bf16 weights with bf16 activations run on the tensor cores (WMMA bf16 → fp32): the block
// tile (64 x 64), the K step (32) and so the order in which each output's products are summed
// depend only on K — never on m, a row's place in the batch or its neighbours' values — and
// there is no split-K: a row's bits never depend on the other rows (DESIGN.md §3.2). fp32
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

// Which LoRA A factors CudaOps multiplies as one stacked weight (CudaOps::LoraTs): a pure function
// of where each factor lies in device memory, so that its rule is tested without a device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace graft::cuda {

// One A factor as it lies in device memory: data, rows (its rank) and columns (K), bf16 or not.
struct FactorSpan {
  const void* data = nullptr;
  int64_t rows = 0, cols = 0;
  bool bf16 = false;
};

// The runs [first, last) of `factors`, in order and covering them all: a run of two or more is a
// stretch of bf16 factors with `k` columns and ranks that are multiples of 8 each lying right after
// the one before it (CudaOps::UploadStackedA's block), at most max_run long; every other factor is a
// run of its own.
std::vector<std::pair<size_t, size_t>> StackedRuns(const std::vector<FactorSpan>& factors, int64_t k, int max_run);

}  // namespace graft::cuda

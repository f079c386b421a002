// DevWeight: a weight as the CUDA kernels see it, row-major [rows, cols], bf16 or fp32, in
// device memory (who owns the memory is the caller's business). Plain C++: host code that
// launches kernels includes it without any CUDA header.
#pragma once

#include <cstdint>

namespace graft::cuda {

struct DevWeight {
  const void* data = nullptr;
  int64_t rows = 0, cols = 0;
  bool bf16 = false;
};

}  // namespace graft::cuda

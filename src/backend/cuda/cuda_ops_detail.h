// Small helpers the CudaOps implementation files share (cuda_ops.cpp, cuda_ops_memory.cpp,
// cuda_ops_weights.cpp, cuda_ops_graphs.cpp); internal to backend/cuda/.
#pragma once

#include <cuda_runtime_api.h>
#include <fmt/core.h>

#include <algorithm>
#include <cstdint>
#include <string>

namespace graft::cuda_ops_detail {

inline cudaStream_t S(void* s) { return static_cast<cudaStream_t>(s); }
constexpr int64_t kAlignFloats = 64;  // 256-byte aligned scratch blocks
// The floats a scratch block of n floats takes (at least one, whole 256-byte blocks).
inline int64_t BlockFloats(int64_t n) { return (std::max<int64_t>(n, 1) + kAlignFloats - 1) / kAlignFloats * kAlignFloats; }
inline std::string Mb(int64_t b) { return fmt::format("{:.1f} MB", b / 1e6); }

}  // namespace graft::cuda_ops_detail

#include "backend/pool_memory.h"

#include <algorithm>
#include <cstring>

namespace graft {

float* HostPoolMemory::Allocate(int64_t n) {
  blocks_.push_back(std::make_unique<float[]>(static_cast<size_t>(n > 0 ? n : 1)));
  return blocks_.back().get();
}

void HostPoolMemory::Free(float* block) {
  auto it = std::find_if(blocks_.begin(), blocks_.end(), [block](const auto& b) { return b.get() == block; });
  if (it != blocks_.end()) blocks_.erase(it);
}

void HostPoolMemory::Copy(const float* src, float* dst, int64_t n) {
  if (n > 0) std::memmove(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void HostPoolMemory::Zero(float* dst, int64_t n) {
  if (n > 0) std::memset(dst, 0, static_cast<size_t>(n) * sizeof(float));
}

}  // namespace graft

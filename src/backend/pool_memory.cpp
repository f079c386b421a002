#include "backend/pool_memory.h"

#include <algorithm>
#include <cstring>
#include <new>

#include <unistd.h>

namespace graft {

HostPoolMemory::HostPoolMemory(int64_t limit_bytes) : limit_(limit_bytes) {}

int64_t HostPoolMemory::MachineBytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? int64_t{pages} * page : INT64_MAX;
}

float* HostPoolMemory::Allocate(int64_t n) {
  const int64_t count = n > 0 ? n : 1;
  if (count > (limit_ - used_) / static_cast<int64_t>(sizeof(float))) return nullptr;
  std::unique_ptr<float[]> block(new (std::nothrow) float[static_cast<size_t>(count)]());
  if (!block) return nullptr;
  blocks_.push_back(std::move(block));
  sizes_.push_back(count * static_cast<int64_t>(sizeof(float)));
  used_ += sizes_.back();
  return blocks_.back().get();
}

void HostPoolMemory::Free(float* block) {
  auto it = std::find_if(blocks_.begin(), blocks_.end(), [block](const auto& b) { return b.get() == block; });
  if (it == blocks_.end()) return;
  const size_t i = static_cast<size_t>(it - blocks_.begin());
  used_ -= sizes_[i];
  blocks_.erase(it);
  sizes_.erase(sizes_.begin() + static_cast<std::ptrdiff_t>(i));
}

void HostPoolMemory::Copy(const float* src, float* dst, int64_t n) {
  if (n > 0) std::memmove(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void HostPoolMemory::Zero(float* dst, int64_t n) {
  if (n > 0) std::memset(dst, 0, static_cast<size_t>(n) * sizeof(float));
}

}  // namespace graft

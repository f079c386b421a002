// Copying a run of bytes whose length comes from a file or a request.
#pragma once

#include <cstddef>
#include <cstring>

namespace graft {

// std::memcpy for ranges that may be empty: an empty std::vector's data() may be null, and
// memcpy with a null pointer is undefined even for zero bytes (UBSan reports it). n == 0
// copies nothing and touches neither pointer.
inline void CopyBytes(void* dst, const void* src, size_t n) {
  if (n != 0) std::memcpy(dst, src, n);
}

}  // namespace graft

// MappedFile: a read-only memory mapping of a whole file (RAII).
//
// Not copyable; movable. The bytes stay valid for the object's lifetime. An empty file maps to
// data() == nullptr, size() == 0.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "util/status.h"

namespace graft {

class MappedFile {
 public:
  static Result<MappedFile> Open(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Tells the kernel the bytes [p, p + n) of this mapping are not needed for now, so streaming
  // readers keep their resident memory near one tensor (the bytes can still be read again).
  void Release(const uint8_t* p, size_t n) const;

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace graft

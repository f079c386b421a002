// Bounded safetensors reader.
//
// File layout: u64 little-endian header length N, N bytes of UTF-8 JSON, then the byte buffer.
// ParseSafetensorsHeader validates everything before any tensor is used:
//   - N <= kMaxHeaderBytes and 8 + N <= file size;
//   - the header is one JSON object without duplicate keys; `__metadata__`, when present, maps
//     strings to strings;
//   - every tensor has a known dtype, a shape of non-negative integers, and data_offsets
//     [begin, end] with begin <= end and end - begin == elements * dtype bits / 8 (no overflow);
//   - sorted by offset, tensors neither overlap nor leave holes, and the last end equals the
//     buffer size (file size - 8 - N).
// Errors name the file (the `source` argument) and the tensor.
//
// Thread-safety: a SafetensorsFile is immutable after Open and may be read from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "io/dtype.h"
#include "util/mapped_file.h"
#include "util/status.h"

namespace graft {

inline constexpr uint64_t kMaxHeaderBytes = 100ull * 1000 * 1000;  // as the reference parser

struct TensorInfo {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // offsets into the byte buffer (after the header)
  uint64_t end = 0;
  uint64_t num_elements() const;
  uint64_t num_bytes() const { return end - begin; }
};

struct SafetensorsHeader {
  uint64_t header_bytes = 0;  // N
  std::vector<TensorInfo> tensors;  // in file order of their data (sorted by begin)
  std::map<std::string, std::string> metadata;
};

// bytes: the whole file (or at least its first 8 + N bytes when file_size says more).
// file_size: the size of the whole file. source: the file name used in error messages.
Result<SafetensorsHeader> ParseSafetensorsHeader(const uint8_t* bytes, size_t available,
                                                 uint64_t file_size, const std::string& source);

class SafetensorsFile {
 public:
  static Result<SafetensorsFile> Open(const std::string& path);

  const std::string& path() const { return file_.path(); }
  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  // nullptr if absent.
  const TensorInfo* Find(std::string_view name) const;
  // The tensor's bytes inside the mapping (not necessarily aligned to the element size).
  const uint8_t* Data(const TensorInfo& t) const { return buffer_ + t.begin; }
  // Drops the tensor's pages from memory (see MappedFile::Release).
  void Release(const TensorInfo& t) const { file_.Release(Data(t), t.num_bytes()); }

 private:
  MappedFile file_;
  SafetensorsHeader header_;
  const uint8_t* buffer_ = nullptr;
  std::map<std::string, size_t, std::less<>> index_;
};

}  // namespace graft

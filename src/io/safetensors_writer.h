// Writes a safetensors file: header padded with spaces so the buffer starts 8-byte aligned,
// tensors laid out in name order. Written to PATH.tmp and renamed, so a failed write never
// leaves a half file under PATH.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/dtype.h"
#include "util/status.h"

namespace graft {

struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;  // elements * dtype size
};

Status WriteSafetensors(const std::string& path, std::vector<TensorToWrite> tensors);

}  // namespace graft

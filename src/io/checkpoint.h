// Checkpoint: the safetensors files of one model directory, single-file or sharded.
//
// Single file: DIR/model.safetensors. Sharded: DIR/model.safetensors.index.json
// {"metadata": {"total_size": bytes}, "weight_map": {tensor: shard file}}. Open() checks that
// every shard named exists and parses, that the union of the shards' tensors equals the
// weight_map keys, that each tensor lives in exactly the shard the map names, and that
// total_size (when given) equals the sum of the tensors' byte sizes. Shard names must be plain
// file names inside DIR.
//
// Thread-safety: immutable after Open.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "io/safetensors.h"
#include "util/status.h"

namespace graft {

struct TensorRef {
  const SafetensorsFile* file = nullptr;
  const TensorInfo* info = nullptr;
  const uint8_t* data() const { return file->Data(*info); }
};

class Checkpoint {
 public:
  static Result<Checkpoint> Open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  // nullptr-file TensorRef if absent.
  TensorRef Find(std::string_view name) const;
  bool Has(std::string_view name) const { return Find(name).file != nullptr; }
  // Every tensor, sorted by name.
  std::vector<TensorRef> All() const;
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  uint64_t total_bytes() const;

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, TensorRef, std::less<>> tensors_;
};

// Copies a tensor's elements out as float32 (from BF16, F16 or F32); other dtypes are an error
// naming the tensor.
Result<std::vector<float>> ReadAsFloat(const TensorRef& t);

}  // namespace graft

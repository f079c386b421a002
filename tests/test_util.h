// Helpers for tests: temporary directories, writing small safetensors files byte by byte, and
// reading fixture tensors.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "io/safetensors_writer.h"

namespace graft::test {

std::string FixturesDir();
std::string Fixture(const std::string& name);

// A fresh empty directory under the system temp dir, removed by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Raw file: 8-byte little-endian length + header text + buffer.
void WriteRaw(const std::string& path, const std::string& header, const std::vector<uint8_t>& buffer);
void WriteText(const std::string& path, const std::string& text);
std::string ReadText(const std::string& path);

// Tensors of a safetensors file as float (BF16, F16, F32), by name.
std::map<std::string, std::vector<float>> ReadFloatTensors(const std::string& path);
std::map<std::string, std::vector<int32_t>> ReadIntTensors(const std::string& path);

// A float32 tensor for WriteSafetensors.
TensorToWrite F32Tensor(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v);
TensorToWrite Bf16Tensor(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v);

}  // namespace graft::test

#include "backend/ops.h"
#include "model/model.h"

namespace graft::test {

// Loads a fixture model (fails the test on error).
std::unique_ptr<Model> LoadFixtureModel(const std::string& name);
// Runs `ids` as one sequence from an empty state, in chunks of the given sizes (the rest in one
// last chunk); returns [n, vocab] logits.
std::vector<float> RunChunks(const Model& m, Ops& ops, const std::vector<int32_t>& ids,
                             const std::vector<int>& chunks);

}  // namespace graft::test

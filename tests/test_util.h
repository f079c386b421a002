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

#include <functional>
#include <random>

#include "weights/lora.h"
#include "backend/ops.h"
#include "model/model.h"

namespace graft::test {

// Loads a fixture model (fails the test on error).
std::unique_ptr<Model> LoadFixtureModel(const std::string& name);

// A [rows, cols] weight of normal values (sd `scale`), bf16 (rounded) or f32, named "random".
Weight RandomWeight(int64_t rows, int64_t cols, bool bf16, float scale, std::mt19937& rng);
// Runs `ids` as one sequence from an empty state, in chunks of the given sizes (the rest in one
// last chunk); returns [n, vocab] logits.
std::vector<float> RunChunks(const Model& m, Ops& ops, const std::vector<int32_t>& ids,
                             const std::vector<int>& chunks);

// The bf16 merges of the PEFT fixture adapters, with their bases and the rank extraction uses.
struct MergedFixture {
  std::string merged, base;  // fixture names
  int rank;
};
const std::vector<MergedFixture>& Bf16MergedFixtures();
// A test-name suffix for a parameterised test over them ("qwen3_tiny_lora_mixed_merged").
std::string MergedFixtureName(const MergedFixture& f);

// `graft adapter extract --exact` of `merged` against `base` (directories) at `rank` into `out`,
// without the quality report; fails the test on error.
void ExtractExactAdapter(const std::string& merged, const std::string& base, int rank, const std::string& out);

// Fixture `name` (a single-file checkpoint) rewritten into `dir` with every tensor stored as
// float32: a base that is not stored in bf16.
void WriteFloat32Copy(const std::string& name, const std::string& dir);

// For every row of every module of adapter `a`: the release's error there,
// e = merged − (served + scale · B·A) over the row's K inputs, handed to f(layer, slot, e).
void ForEachAdapterRowError(const Model& served, const Model& merged, const LoraAdapter& a,
                            const std::function<void(int layer, LoraTarget slot, const std::vector<double>& e)>& f);

}  // namespace graft::test

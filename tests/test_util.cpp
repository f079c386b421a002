#include "test_util.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "model/projections.h"
#include "tools/adapter_extract.h"
#include "util/bf16.h"
#include "util/bytes.h"

namespace graft::test {

// The build's fixtures folder; GRAFT_FIXTURES_DIR overrides it where a test binary runs away
// from its source tree (the GPU machine).
std::string FixturesDir() {
  const char* env = std::getenv("GRAFT_FIXTURES_DIR");
  return env && *env ? env : GRAFT_FIXTURES_DIR;
}
std::string Fixture(const std::string& name) { return FixturesDir() + "/" + name; }

TempDir::TempDir() {
  std::random_device rd;
  path_ = (std::filesystem::temp_directory_path() /
           ("graft-test-" + std::to_string(::getpid()) + "-" + std::to_string(rd())))
              .string();
  std::filesystem::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void WriteRaw(const std::string& path, const std::string& header, const std::vector<uint8_t>& buffer) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>(n >> (8 * i)));
  out << header;
  out.write(reinterpret_cast<const char*>(buffer.data()), static_cast<std::streamsize>(buffer.size()));
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::map<std::string, std::vector<float>> ReadFloatTensors(const std::string& path) {
  auto f = SafetensorsFile::Open(path);
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  std::map<std::string, std::vector<float>> out;
  if (!f.ok()) return out;
  for (const auto& t : f->tensors()) {
    auto v = ReadAsFloat(TensorRef{&*f, &t});
    EXPECT_TRUE(v.ok()) << v.status().ToString();
    if (v.ok()) out[t.name] = std::move(v).value();
  }
  return out;
}

std::map<std::string, std::vector<int32_t>> ReadIntTensors(const std::string& path) {
  auto f = SafetensorsFile::Open(path);
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  std::map<std::string, std::vector<int32_t>> out;
  if (!f.ok()) return out;
  for (const auto& t : f->tensors()) {
    std::vector<int32_t> v(t.num_elements());
    std::memcpy(v.data(), f->Data(t), v.size() * 4);
    out[t.name] = std::move(v);
  }
  return out;
}

TensorToWrite F32Tensor(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
  TensorToWrite t{name, DType::kF32, std::move(shape), {}};
  t.bytes.resize(v.size() * 4);
  CopyBytes(t.bytes.data(), v.data(), t.bytes.size());
  return t;
}

TensorToWrite Bf16Tensor(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
  TensorToWrite t{name, DType::kBF16, std::move(shape), {}};
  t.bytes.resize(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t h = FloatToBf16(v[i]);
    std::memcpy(t.bytes.data() + 2 * i, &h, 2);
  }
  return t;
}

}  // namespace graft::test

namespace graft::test {

std::unique_ptr<Model> LoadFixtureModel(const std::string& name) {
  auto m = LoadModel(Fixture(name));
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(m).value() : nullptr;
}

std::vector<float> RunChunks(const Model& m, Ops& ops, const std::vector<int32_t>& ids,
                             const std::vector<int>& chunks) {
  const int vocab = m.config().vocab_size;
  std::vector<float> out(ids.size() * static_cast<size_t>(vocab));
  auto made = m.NewState(ops);
  EXPECT_TRUE(made.ok());
  if (!made.ok()) return {};
  SequenceState st = std::move(made).value();
  size_t at = 0;
  size_t ci = 0;
  while (at < ids.size()) {
    const size_t n = ci < chunks.size() ? std::min<size_t>(static_cast<size_t>(chunks[ci]), ids.size() - at)
                                        : ids.size() - at;
    ++ci;
    Status s = m.Forward(ops, ids.data() + at, static_cast<int>(n), st, out.data() + at * vocab);
    EXPECT_TRUE(s.ok()) << s.ToString();
    at += n;
  }
  return out;
}

const std::vector<MergedFixture>& Bf16MergedFixtures() {
  static const std::vector<MergedFixture> kAll = {
      {"adapters/qwen3-tiny-lora-mixed-merged", "qwen3-tiny", 16},
      {"adapters/qwen3-tiny-lora-alllinear-merged", "qwen3-tiny", 3},
      {"adapters/qwen3-odd-sharded-lora-rslora-merged", "qwen3-odd-sharded", 12},
      {"adapters/qwen3_5-wrapper-lora-gdn-merged", "qwen3_5-wrapper", 16},
      {"adapters/qwen3_5-text-odd-lora-subset-merged", "qwen3_5-text-odd", 4}};
  return kAll;
}

std::string MergedFixtureName(const MergedFixture& f) {
  std::string s = f.merged.substr(f.merged.find('/') + 1);
  for (char& c : s) if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

void ExtractExactAdapter(const std::string& merged, const std::string& base, int rank, const std::string& out) {
  ExtractJob j;
  j.merged = merged;
  j.base = base;
  j.out = out;
  j.rank.rank = rank;
  j.exact = true;
  j.eval_sequences = 0;
  auto rep = RunExtract(j);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
}

void WriteFloat32Copy(const std::string& name, const std::string& dir) {
  std::filesystem::copy_file(Fixture(name + "/config.json"), dir + "/config.json");
  auto in = SafetensorsFile::Open(Fixture(name + "/model.safetensors"));
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  std::vector<TensorToWrite> out;
  for (const auto& t : in->tensors()) {
    auto v = ReadAsFloat(TensorRef{&in.value(), &t});
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    out.push_back(F32Tensor(t.name, t.shape, v.value()));
  }
  ASSERT_TRUE(WriteSafetensors(dir + "/model.safetensors", std::move(out)).ok());
}

void ForEachAdapterRowError(const Model& served, const Model& merged, const LoraAdapter& a,
                            const std::function<void(int layer, LoraTarget slot, const std::vector<double>& e)>& f) {
  for (size_t l = 0; l < a.layers.size(); ++l) {
    for (int t = 0; t < static_cast<int>(LoraTarget::kCount); ++t) {
      const auto slot = static_cast<LoraTarget>(t);
      for (const LoraModule& m : a.layers[l].targets[static_cast<size_t>(t)]) {
        const Weight& s = FusedWeight(served.weights().layers[l], slot);
        const Weight& r = FusedWeight(merged.weights().layers[l], slot);
        const int64_t n = m.b.rows, k = s.cols;
        std::vector<float> sv(static_cast<size_t>(n * k)), rv(sv.size());
        WeightRows(s, m.row_offset, m.row_offset + n, sv.data());
        WeightRows(r, m.row_offset, m.row_offset + n, rv.data());
        std::vector<double> e(static_cast<size_t>(k));
        for (int64_t i = 0; i < n; ++i) {
          for (int64_t c = 0; c < k; ++c) {
            double ba = 0;
            for (int j = 0; j < m.rank; ++j) ba += double{m.b.at(i * m.rank + j)} * m.a.at(j * k + c);
            e[static_cast<size_t>(c)] = rv[static_cast<size_t>(i * k + c)] - (sv[static_cast<size_t>(i * k + c)] + m.scale * ba);
          }
          f(static_cast<int>(l), slot, e);
        }
      }
    }
  }
}

Weight RandomWeight(int64_t rows, int64_t cols, bool bf16, float scale, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, scale);
  Weight w;
  w.name = "random";
  w.rows = rows;
  w.cols = cols;
  w.is_bf16 = bf16;
  for (int64_t i = 0; i < rows * cols; ++i) {
    if (bf16) w.bf16.push_back(FloatToBf16(nd(rng)));
    else w.f32.push_back(nd(rng));
  }
  return w;
}

}  // namespace graft::test

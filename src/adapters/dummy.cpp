#include "adapters/dummy.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>

#include "model/projections.h"
#include "util/splitmix.h"

namespace graft {
namespace {

Weight RandomWeight(const std::string& name, int64_t rows, int64_t cols, bool bf16, uint64_t seed) {
  Weight w;
  w.name = name;
  w.rows = rows;
  w.cols = cols;
  w.is_bf16 = bf16;
  const float a = 1.0f / std::sqrt(static_cast<float>(cols));
  const auto n = static_cast<size_t>(rows * cols);
  if (bf16) w.bf16.resize(n);
  else w.f32.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const float v = SymmetricUniform(seed + i * 0x9E3779B97F4A7C15ULL) * a;
    if (bf16) w.bf16[i] = FloatToBf16(v);
    else w.f32[i] = v;
  }
  return w;
}

}  // namespace

LoraAdapter DummyAdapter(const ModelConfig& c, int rank, int upper_layers, bool bf16, uint64_t seed) {
  LoraAdapter ad;
  ad.name = fmt::format("dummy-r{}-upper{}", rank, upper_layers);
  ad.dir = "(dummy)";
  ad.layers.resize(static_cast<size_t>(c.num_layers));
  const int first = std::max(0, c.num_layers - upper_layers);
  uint64_t k = 0;
  for (int l = first; l < c.num_layers; ++l) {
    for (const Projection& p : LayerProjections(c, c.layer_kinds[static_cast<size_t>(l)])) {
      LoraModule m;
      m.name = fmt::format("layers.{}.{}", l, p.path);
      m.row_offset = p.row_offset;
      m.rank = rank;
      m.scale = 1.0f;
      m.a = RandomWeight(m.name + ".lora_A", rank, p.cols, bf16, seed * 1000003 + ++k);
      m.b = RandomWeight(m.name + ".lora_B", p.rows, rank, bf16, seed * 1000003 + ++k);
      ad.layers[static_cast<size_t>(l)].targets[static_cast<size_t>(p.target)].push_back(std::move(m));
    }
  }
  return ad;
}

void AddDummyExact(LoraAdapter& a, double fraction, uint64_t seed) {
  const uint64_t span = std::max<uint64_t>(1, static_cast<uint64_t>(2.0 / std::max(fraction, 1e-9)));
  uint64_t k = seed * 7919;
  for (auto& layer : a.layers) {
    for (auto& target : layer.targets) {
      for (LoraModule& m : target) {
        const int64_t count = m.b.rows * m.a.cols;
        ExactResidual res;
        int64_t at = -1;
        while (true) {
          const uint64_t gap = SplitMix64(++k) % span;  // mean gap about 1 / fraction
          if (at + 1 + static_cast<int64_t>(gap) >= count) break;
          at += 1 + static_cast<int64_t>(gap);
          AppendVarint(res.index_stream, gap);
          res.values.push_back(FloatToBf16(SymmetricUniform(SplitMix64(++k)) * 0.05f));
        }
        m.exact = std::make_shared<const IndexedResidual>(IndexResidual(std::move(res), count).value());
      }
    }
  }
  a.has_exact = true;
}

}  // namespace graft

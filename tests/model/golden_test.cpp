// graft's CPU forward passes against transformers' reference logits (scripts/make-fixtures.py).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "backend/cpu/cpu_ops.h"
#include "test_util.h"

namespace graft {
namespace {

struct Agreement {
  int positions = 0, top1_same = 0;
  double max_abs_diff = 0, max_abs_ref = 0;
};

int Argmax(const float* v, int n) {
  int best = 0;
  for (int i = 1; i < n; ++i) if (v[i] > v[best]) best = i;
  return best;
}

Agreement Compare(const std::string& fixture, ActDtype act, const std::string& ref_file) {
  auto model = test::LoadFixtureModel(fixture);
  if (!model) return {};
  CpuOps ops(act, 2);
  const int vocab = model->config().vocab_size;
  auto inputs = test::ReadIntTensors(test::Fixture(fixture) + "/inputs.safetensors");
  auto refs = test::ReadFloatTensors(test::Fixture(fixture) + "/" + ref_file);
  Agreement a;
  for (const auto& [name, ids] : inputs) {
    const auto got = test::RunChunks(*model, ops, ids, {});
    const auto& ref = refs.at(name);
    EXPECT_EQ(ref.size(), got.size());
    for (size_t t = 0; t < ids.size(); ++t) {
      const float* g = got.data() + t * vocab;
      const float* r = ref.data() + t * vocab;
      a.positions++;
      a.top1_same += Argmax(g, vocab) == Argmax(r, vocab);
      for (int v = 0; v < vocab; ++v) {
        EXPECT_TRUE(std::isfinite(g[v]));
        a.max_abs_diff = std::max(a.max_abs_diff, static_cast<double>(std::fabs(g[v] - r[v])));
        a.max_abs_ref = std::max(a.max_abs_ref, static_cast<double>(std::fabs(r[v])));
      }
    }
  }
  return a;
}

class Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(Golden, Float32MatchesTransformersFloat32) {
  const Agreement a = Compare(GetParam(), ActDtype::kF32, "ref_f32.safetensors");
  ASSERT_GT(a.positions, 0);
  EXPECT_EQ(a.top1_same, a.positions) << "top-1 differs at " << a.positions - a.top1_same << " positions";
  EXPECT_LE(a.max_abs_diff, 1e-3 * a.max_abs_ref) << "max |Δlogit| " << a.max_abs_diff << ", max |logit| " << a.max_abs_ref;
  RecordProperty("max_rel_diff", std::to_string(a.max_abs_diff / a.max_abs_ref));
  std::printf("%s f32: top-1 %d/%d, max |dlogit| / max |logit| = %.2e\n", GetParam().c_str(), a.top1_same,
              a.positions, a.max_abs_diff / a.max_abs_ref);
}

TEST_P(Golden, Bfloat16AgreesOnTop1WithFloat32Reference) {
  const Agreement a = Compare(GetParam(), ActDtype::kBF16, "ref_f32.safetensors");
  ASSERT_GT(a.positions, 0);
  EXPECT_GE(a.top1_same, 0.99 * a.positions) << a.top1_same << " of " << a.positions;
  std::printf("%s bf16 vs f32 reference: top-1 %d/%d\n", GetParam().c_str(), a.top1_same, a.positions);
}

TEST_P(Golden, Bfloat16TracksTransformersBfloat16) {
  // transformers' own bf16 run rounds at the same points; graft's bf16 logits must stay as
  // close to it as that run is to float32 (a few bf16 ulps of the largest logit).
  const Agreement a = Compare(GetParam(), ActDtype::kBF16, "ref_bf16.safetensors");
  ASSERT_GT(a.positions, 0);
  EXPECT_GE(a.top1_same, 0.98 * a.positions);
  EXPECT_LE(a.max_abs_diff, 0.1 * a.max_abs_ref) << "max |Δlogit| " << a.max_abs_diff;
  std::printf("%s bf16 vs transformers bf16: top-1 %d/%d, max |dlogit| / max |logit| = %.2e\n", GetParam().c_str(),
              a.top1_same, a.positions, a.max_abs_diff / a.max_abs_ref);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Golden,
                         ::testing::Values("qwen3-tiny", "qwen3-odd-sharded", "qwen3_5-wrapper", "qwen3_5-text-odd", "qwen3-yarn"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& c : s) if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return s;
                         });

}  // namespace
}  // namespace graft

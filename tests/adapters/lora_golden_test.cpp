// Base + PEFT adapter against PEFT's float32 logits, the merged checkpoints against theirs,
// and per-row adapter selection inside one step (scripts/make-adapter-fixtures.py).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "adapters/lora_loader.h"
#include "backend/cpu/cpu_ops.h"
#include "test_util.h"

namespace graft {
namespace {

struct Case {
  std::string base, adapter;
};

LoraAdapter LoadAdapter(const Model& m, const std::string& name) {
  auto a = LoadLoraAdapter(test::Fixture("adapters/" + name), m.config(), {name, false, nullptr});
  EXPECT_TRUE(a.ok()) << a.status().ToString();
  return a.ok() ? std::move(a).value() : LoraAdapter{};
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& ref, int vocab, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size());
  double max_diff = 0, max_ref = 0;
  int top_same = 0, rows = static_cast<int>(ref.size() / vocab);
  for (int t = 0; t < rows; ++t) {
    const float* g = got.data() + t * vocab;
    const float* r = ref.data() + t * vocab;
    top_same += std::max_element(g, g + vocab) - g == std::max_element(r, r + vocab) - r;
    for (int v = 0; v < vocab; ++v) {
      max_diff = std::max(max_diff, static_cast<double>(std::fabs(g[v] - r[v])));
      max_ref = std::max(max_ref, static_cast<double>(std::fabs(r[v])));
    }
  }
  EXPECT_EQ(top_same, rows) << what;
  EXPECT_LE(max_diff, 1e-3 * max_ref) << what << ": max |dlogit| " << max_diff << " of max |logit| " << max_ref;
}

class LoraGolden : public ::testing::TestWithParam<Case> {};

TEST_P(LoraGolden, Float32MatchesPeftAndTheMergedCheckpointMatchesItsReference) {
  const Case& c = GetParam();
  auto model = test::LoadFixtureModel(c.base);
  ASSERT_NE(model, nullptr);
  LoraAdapter ad = LoadAdapter(*model, c.adapter);
  ASSERT_GT(ad.num_modules(), 0);
  AdapterSet set;
  set.slots.push_back(&ad);
  CpuOps ops(ActDtype::kF32, 2);
  const int vocab = model->config().vocab_size;
  auto inputs = test::ReadIntTensors(test::Fixture(c.base) + "/inputs.safetensors");
  auto refs = test::ReadFloatTensors(test::Fixture("adapters/" + c.adapter) + "/ref_f32.safetensors");
  for (const auto& [name, ids] : inputs) {
    std::vector<float> logits(ids.size() * vocab);
    SequenceState st = model->NewState();
    ASSERT_TRUE(model->Forward(ops, ids.data(), static_cast<int>(ids.size()), st, logits.data(), 1, &set).ok());
    ExpectClose(logits, refs.at(name), vocab, c.adapter + "/" + name);
  }
  auto merged = LoadModel(test::Fixture("adapters/" + c.adapter + "-merged"));
  ASSERT_TRUE(merged.ok()) << merged.status().ToString();
  auto mrefs = test::ReadFloatTensors(test::Fixture("adapters/" + c.adapter + "-merged") + "/ref_f32.safetensors");
  for (const auto& [name, ids] : inputs) {
    ExpectClose(test::RunChunks(**merged, ops, ids, {}), mrefs.at(name), vocab, c.adapter + "-merged/" + name);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, LoraGolden,
                         ::testing::Values(Case{"qwen3-tiny", "qwen3-tiny-lora-mixed"},
                                           Case{"qwen3-tiny", "qwen3-tiny-lora-alllinear"},
                                           Case{"qwen3-odd-sharded", "qwen3-odd-sharded-lora-rslora"},
                                           Case{"qwen3_5-wrapper", "qwen3_5-wrapper-lora-gdn"},
                                           Case{"qwen3_5-text-odd", "qwen3_5-text-odd-lora-subset"}),
                         [](const auto& info) {
                           std::string s = info.param.adapter;
                           for (char& ch : s) if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });

// One step mixing base rows and rows of two adapters: every row equals its run alone, and a
// base row equals a run with no adapters loaded at all.
TEST(LoraRuntime, MixedStepRowsEqualTheirRunsAlone) {
  for (ActDtype act : {ActDtype::kBF16, ActDtype::kF32}) {
    auto model = test::LoadFixtureModel("qwen3-tiny");
    ASSERT_NE(model, nullptr);
    LoraAdapter a = LoadAdapter(*model, "qwen3-tiny-lora-mixed");
    LoraAdapter b = LoadAdapter(*model, "qwen3-tiny-lora-alllinear");
    AdapterSet set;
    set.slots = {nullptr, &a, &b};
    CpuOps ops(act, 3);
    const int vocab = model->config().vocab_size;
    auto seqs = test::ReadIntTensors(test::Fixture("qwen3-tiny/inputs.safetensors"));
    const std::vector<int32_t>& s0 = seqs.at("seq3");  // 64 tokens
    const std::vector<int32_t>& s1 = seqs.at("seq2");  // 17 tokens
    const std::vector<int32_t>& s2 = seqs.at("seq1");  // 5 tokens
    // Alone: each sequence in its own step with its adapter; the base one also with no set.
    auto alone = [&](const std::vector<int32_t>& ids, int32_t slot, const AdapterSet* s) {
      std::vector<float> l(ids.size() * vocab);
      SequenceState st = model->NewState();
      EXPECT_TRUE(model->Forward(ops, ids.data(), static_cast<int>(ids.size()), st, l.data(), slot, s).ok());
      return l;
    };
    const auto base_alone = alone(s0, 0, nullptr);
    const auto a_alone = alone(s1, 1, &set);
    const auto b_alone = alone(s2, 2, &set);
    EXPECT_NE(alone(s1, 0, nullptr), a_alone) << "the adapter must change its rows";
    // Together, in an order that puts adapter rows before and after the base rows.
    SequenceState st0 = model->NewState(), st1 = model->NewState(), st2 = model->NewState();
    StepBatch batch;
    batch.Add(&st1, s1.data(), static_cast<int>(s1.size()), 1);
    batch.Add(&st0, s0.data(), static_cast<int>(s0.size()), 0);
    batch.Add(&st2, s2.data(), static_cast<int>(s2.size()), 2);
    std::vector<float> all(static_cast<size_t>(batch.rows()) * vocab);
    ASSERT_TRUE(model->Forward(ops, batch, set, all.data()).ok());
    const float* p = all.data();
    EXPECT_EQ(std::memcmp(p, a_alone.data(), a_alone.size() * 4), 0);
    p += a_alone.size();
    EXPECT_EQ(std::memcmp(p, base_alone.data(), base_alone.size() * 4), 0);
    p += base_alone.size();
    EXPECT_EQ(std::memcmp(p, b_alone.data(), b_alone.size() * 4), 0);
    // Decode steps: one token each for the three sequences, still equal to their lone runs.
    std::vector<float> step(3 * vocab);
    StepBatch d;
    const int32_t t0 = 5, t1 = 6, t2 = 7;
    d.Add(&st0, &t0, 1, 0);
    d.Add(&st1, &t1, 1, 1);
    d.Add(&st2, &t2, 1, 2);
    ASSERT_TRUE(model->Forward(ops, d, set, step.data()).ok());
    auto extended = [&](std::vector<int32_t> ids, int32_t tok, int32_t slot) {
      ids.push_back(tok);
      auto l = alone(ids, slot, &set);
      return std::vector<float>(l.end() - vocab, l.end());
    };
    EXPECT_EQ(std::memcmp(step.data(), extended(s0, t0, 0).data(), vocab * 4), 0);
    EXPECT_EQ(std::memcmp(step.data() + vocab, extended(s1, t1, 1).data(), vocab * 4), 0);
    EXPECT_EQ(std::memcmp(step.data() + 2 * vocab, extended(s2, t2, 2).data(), vocab * 4), 0);
  }
}

TEST(LoraRuntime, BadSlotsAndDuplicateStatesAreRefused) {
  auto model = test::LoadFixtureModel("qwen3-tiny");
  ASSERT_NE(model, nullptr);
  CpuOps ops(ActDtype::kF32, 1);
  std::vector<float> logits(2 * 512);
  SequenceState st = model->NewState();
  const int32_t ids[2] = {1, 2};
  Status s = model->Forward(ops, ids, 1, st, logits.data(), 1, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("selects adapter slot 1, which is not loaded"), std::string::npos);
  StepBatch b;
  b.Add(&st, ids, 1, 0);
  b.Add(&st, ids + 1, 1, 0);
  EXPECT_NE(model->Forward(ops, b, AdapterSet{}, logits.data()).message().find("appears twice"), std::string::npos);
  EXPECT_EQ(st.pos, 0);
}

}  // namespace
}  // namespace graft

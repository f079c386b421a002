// Prefill and decode compute the same bits: a position's logits do not depend on how its
// sequence is split into forward calls (whole, token by token, or chunks across the GDN chunk
// boundary of 64).
#include <gtest/gtest.h>

#include <cstring>

#include "backend/cpu/cpu_ops.h"
#include "test_util.h"

namespace graft {
namespace {

struct Case {
  std::string fixture;
  ActDtype act;
};

class DecodeInvariance : public ::testing::TestWithParam<Case> {};

TEST_P(DecodeInvariance, EverySplitGivesIdenticalBits) {
  const auto& c = GetParam();
  auto model = test::LoadFixtureModel(c.fixture);
  ASSERT_NE(model, nullptr);
  auto ids = test::ReadIntTensors(test::Fixture(c.fixture) + "/inputs.safetensors").at("seq4");
  ASSERT_GT(ids.size(), 128u);
  CpuOps ops(c.act, 2);
  const auto whole = test::RunChunks(*model, ops, ids, {});
  const std::vector<std::vector<int>> splits = {
      std::vector<int>(ids.size(), 1),  // prefill of one token, then decode every other token
      {63, 1, 1, 70},                   // crosses the chunk boundary inside a decode run
      {64, 64},
      {5, 100},
      {65, 1, 62},
  };
  for (const auto& split : splits) {
    const auto got = test::RunChunks(*model, ops, ids, split);
    ASSERT_EQ(got.size(), whole.size());
    EXPECT_EQ(std::memcmp(got.data(), whole.data(), got.size() * sizeof(float)), 0)
        << "split starting " << split[0] << "," << (split.size() > 1 ? split[1] : -1);
  }
}

TEST_P(DecodeInvariance, ThreadCountDoesNotChangeBits) {
  const auto& c = GetParam();
  auto model = test::LoadFixtureModel(c.fixture);
  ASSERT_NE(model, nullptr);
  auto ids = test::ReadIntTensors(test::Fixture(c.fixture) + "/inputs.safetensors").at("seq3");
  CpuOps one(c.act, 1), three(c.act, 3);
  const auto a = test::RunChunks(*model, one, ids, {});
  const auto b = test::RunChunks(*model, three, ids, {});
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

TEST(Forward, RejectsTokensOutsideTheVocabularyAndLeavesStateAlone) {
  auto model = test::LoadFixtureModel("qwen3-tiny");
  ASSERT_NE(model, nullptr);
  CpuOps ops(ActDtype::kF32, 1);
  SequenceState st = model->NewState();
  std::vector<int32_t> ids = {1, 512};
  std::vector<float> logits(2 * 512);
  Status s = model->Forward(ops, ids.data(), 2, st, logits.data());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("token 512 at index 1 is outside the vocabulary [0, 512)"), std::string::npos);
  EXPECT_EQ(st.pos, 0);
  ids = {-1};
  EXPECT_FALSE(model->Forward(ops, ids.data(), 1, st, logits.data()).ok());
}

// Selecting logit rows changes which rows are written, never their bits; a prefill that
// selects none still advances the cache exactly as a full one does.
TEST(Forward, SelectedLogitRowsAreTheSameBitsAsAllRows) {
  for (const char* fixture : {"qwen3-tiny", "qwen3_5-wrapper"}) {
    auto model = test::LoadFixtureModel(fixture);
    ASSERT_NE(model, nullptr);
    auto ids = test::ReadIntTensors(test::Fixture(fixture) + "/inputs.safetensors").at("seq4");
    const int n = static_cast<int>(ids.size()), vocab = model->config().vocab_size;
    CpuOps ops(ActDtype::kBF16, 2);
    SequenceState all_st = model->NewState(), some_st = model->NewState(), none_st = model->NewState();
    std::vector<float> all(static_cast<size_t>(n) * vocab), some(3 * static_cast<size_t>(vocab));
    ASSERT_TRUE(model->Forward(ops, ids.data(), n, all_st, all.data()).ok());
    const std::vector<int32_t> rows = {0, 64, n - 1};
    ASSERT_TRUE(model->Forward(ops, ids.data(), n, some_st, some.data(), 0, nullptr, LogitRows::Only(rows)).ok());
    for (size_t i = 0; i < rows.size(); ++i) {
      EXPECT_EQ(std::memcmp(some.data() + i * vocab, all.data() + size_t(rows[i]) * vocab, vocab * sizeof(float)), 0)
          << fixture << " row " << rows[i];
    }
    ASSERT_TRUE(model->Forward(ops, ids.data(), n, none_st, nullptr, 0, nullptr, LogitRows::None()).ok());
    int32_t next = 7;
    std::vector<float> a(vocab), b(vocab);
    ASSERT_TRUE(model->Forward(ops, &next, 1, all_st, a.data()).ok());
    ASSERT_TRUE(model->Forward(ops, &next, 1, none_st, b.data()).ok());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), vocab * sizeof(float)), 0) << fixture << ": the cache after a logit-free prefill";
    for (const auto& bad : {std::vector<int32_t>{n}, std::vector<int32_t>{3, 3}, std::vector<int32_t>{5, 2}, std::vector<int32_t>{-1}}) {
      SequenceState st = model->NewState();
      Status s = model->Forward(ops, ids.data(), n, st, some.data(), 0, nullptr, LogitRows::Only(bad));
      ASSERT_FALSE(s.ok());
      EXPECT_NE(s.message().find("out of range or out of order"), std::string::npos) << s.message();
      EXPECT_EQ(st.pos, 0) << "a refused step leaves the state alone";
    }
  }
}

// Candidate mode (LogitRows::top_k): the selected rows' best entries, as Ops::TopK picks them
// from the full logits; bad requests are refused by name before any state moves.
TEST(Forward, CandidateRowsAreTheTopKOfTheLogitRows) {
  auto model = test::LoadFixtureModel("qwen3_5-wrapper");
  ASSERT_NE(model, nullptr);
  auto ids = test::ReadIntTensors(test::Fixture("qwen3_5-wrapper/inputs.safetensors")).at("seq4");
  const int n = static_cast<int>(ids.size()), vocab = model->config().vocab_size;
  CpuOps ops(ActDtype::kBF16, 2);
  SequenceState a = model->NewState();
  std::vector<float> all(static_cast<size_t>(n) * vocab);
  ASSERT_TRUE(model->Forward(ops, ids.data(), n, a, all.data()).ok());
  LogitRows which = LogitRows::Only({3, n - 1});
  which.top_k = 5;
  which.temperature = {0.0f, 0.7f};
  std::vector<float> vals(10), want_vals(10);
  std::vector<int32_t> top(10), want_top(10);
  SequenceState c = model->NewState();
  StepBatch batch;
  batch.Add(&c, ids.data(), n, 0);
  batch.logits = which;
  ASSERT_TRUE(model->Forward(ops, batch, AdapterSet{}, vals.data(), top.data()).ok());
  ops.TopK(all.data() + 3 * vocab, 1, vocab, &which.temperature[0], 5, want_vals.data(), want_top.data());
  ops.TopK(all.data() + int64_t{n - 1} * vocab, 1, vocab, &which.temperature[1], 5, want_vals.data() + 5,
           want_top.data() + 5);
  EXPECT_EQ(top, want_top);
  EXPECT_EQ(std::memcmp(vals.data(), want_vals.data(), vals.size() * 4), 0);
  struct Bad {
    int top_k;
    std::vector<float> temps;
    bool ids;
    const char* says;
  };
  for (const Bad& bad : {Bad{65, {0.0f, 0.0f}, true, "outside"}, Bad{-2, {0.0f, 0.0f}, true, "outside"},
                         Bad{5, {0.0f}, true, "temperatures"}, Bad{5, {0.0f, -1.0f}, true, "temperature"},
                         Bad{5, {0.0f, 0.0f}, false, "ids buffer"}}) {
    SequenceState st = model->NewState();
    StepBatch bb;
    bb.Add(&st, ids.data(), n, 0);
    bb.logits = LogitRows::Only({3, n - 1});
    bb.logits.top_k = bad.top_k;
    bb.logits.temperature = bad.temps;
    Status s = model->Forward(ops, bb, AdapterSet{}, vals.data(), bad.ids ? top.data() : nullptr);
    ASSERT_FALSE(s.ok()) << bad.says;
    EXPECT_NE(s.message().find(bad.says), std::string::npos) << s.message();
    EXPECT_EQ(st.pos, 0) << "a refused step leaves the state alone";
  }
}

TEST(Forward, RejectsPositionsPastTheContextLength) {
  auto model = test::LoadFixtureModel("qwen3-tiny");
  ASSERT_NE(model, nullptr);
  CpuOps ops(ActDtype::kF32, 1);
  SequenceState st = model->NewState();
  st.pos = model->config().max_position_embeddings;
  int32_t id = 3;
  std::vector<float> logits(512);
  Status s = model->Forward(ops, &id, 1, st, logits.data());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("exceed the model's context length of 4096"), std::string::npos);
}

// One dispatch by architecture (MakeModel): each known one gets its own forward pass, and one
// without a forward pass is an error naming it, never another architecture's pass.
TEST(MakeModel, PicksTheArchitecturesPassAndRefusesAnUnknownOne) {
  auto model = test::LoadFixtureModel("qwen3-tiny");
  ASSERT_NE(model, nullptr);
  auto again = MakeModel(model->config(), model->weights());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ((*again)->config().arch, "qwen3");
  ModelConfig odd = model->config();
  odd.arch = "qwen9";
  auto refused = MakeModel(odd, model->weights());
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(), "unknown architecture 'qwen9' (graft runs qwen3, qwen3_5)");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DecodeInvariance,
                         ::testing::Values(Case{"qwen3-tiny", ActDtype::kF32}, Case{"qwen3-tiny", ActDtype::kBF16},
                                           Case{"qwen3_5-wrapper", ActDtype::kF32},
                                           Case{"qwen3_5-wrapper", ActDtype::kBF16},
                                           Case{"qwen3_5-text-odd", ActDtype::kF32}),
                         [](const auto& info) {
                           std::string s = info.param.fixture + (info.param.act == ActDtype::kF32 ? "_f32" : "_bf16");
                           for (char& ch : s) if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });

}  // namespace
}  // namespace graft

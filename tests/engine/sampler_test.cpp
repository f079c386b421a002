#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backend/cpu/cpu_ops.h"

namespace graft {
namespace {

TEST(Sampler, GreedyTakesTheArgmaxLowestIdOnTies) {
  Sampler s({});
  const float l[] = {0.5f, 2.0f, 2.0f, -1.0f};
  EXPECT_EQ(s.Sample(l, 4), 1);
}

TEST(Sampler, TopKOneAndTinyTopPAreGreedy) {
  const float l[] = {0.1f, 0.3f, 3.0f, 0.2f};
  for (uint64_t seed = 0; seed < 20; ++seed) {
    Sampler k1({1.0f, 1, 1.0f, seed});
    Sampler p0({1.0f, 0, 1e-6f, seed});
    EXPECT_EQ(k1.Sample(l, 4), 2);
    EXPECT_EQ(p0.Sample(l, 4), 2);
  }
}

TEST(Sampler, SameSeedSameDrawsAndFrequenciesFollowSoftmax) {
  const float l[] = {0.0f, std::log(2.0f), std::log(7.0f)};  // probabilities 0.1, 0.2, 0.7
  Sampler a({1.0f, 0, 1.0f, 42}), b({1.0f, 0, 1.0f, 42}), c({1.0f, 0, 1.0f, 43});
  int counts[3] = {0, 0, 0};
  int differ = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const int x = a.Sample(l, 3);
    EXPECT_EQ(x, b.Sample(l, 3));
    differ += x != c.Sample(l, 3);
    counts[x]++;
  }
  EXPECT_GT(differ, 0);
  EXPECT_NEAR(counts[0] / double(n), 0.1, 0.015);
  EXPECT_NEAR(counts[1] / double(n), 0.2, 0.015);
  EXPECT_NEAR(counts[2] / double(n), 0.7, 0.015);
}

TEST(Sampler, TopPKeepsTheSmallestSetReachingP) {
  const float l[] = {0.0f, std::log(2.0f), std::log(7.0f)};  // 0.1, 0.2, 0.7
  Sampler s({1.0f, 0, 0.8f, 1});  // {0.7, 0.2} reaches 0.8: token 0 never drawn
  for (int i = 0; i < 2000; ++i) EXPECT_NE(s.Sample(l, 3), 0);
}

TEST(Sampler, InvalidParamsAreRefused) {
  EXPECT_FALSE(ValidateSamplingParams({-1.0f, 0, 1.0f, 0}).ok());
  EXPECT_FALSE(ValidateSamplingParams({NAN, 0, 1.0f, 0}).ok());
  EXPECT_FALSE(ValidateSamplingParams({1.0f, -2, 1.0f, 0}).ok());
  EXPECT_FALSE(ValidateSamplingParams({1.0f, 0, 0.0f, 0}).ok());
  EXPECT_FALSE(ValidateSamplingParams({1.0f, 0, 1.5f, 0}).ok());
  EXPECT_TRUE(ValidateSamplingParams({0.7f, 20, 0.95f, 3}).ok());
}

// Drawing from a row's best candidates (Ops::TopK) gives the very tokens drawing from the
// whole row gives: greedy, and top-k at several temperatures and top-p, over many seeds —
// including rows with tied logits, where the order among equals decides.
TEST(Sampler, CandidatesDrawWhatTheWholeRowDraws) {
  const int vocab = 300;
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.0f, 3.0f);
  CpuOps ops(ActDtype::kF32, 1);
  int draws = 0;
  for (int row = 0; row < 20; ++row) {
    std::vector<float> logits(vocab);
    for (auto& v : logits) v = row % 4 == 0 ? std::round(d(rng)) : d(rng);  // every 4th row full of ties
    for (SamplingParams p : {SamplingParams{0.0f, 0, 1.0f, 0}, SamplingParams{0.7f, 5, 1.0f, 0},
                             SamplingParams{1.3f, 40, 0.9f, 0}, SamplingParams{1.0f, 64, 1.0f, 0}}) {
      for (uint64_t seed = 0; seed < 10; ++seed) {
        p.seed = seed * 7919 + row;
        Sampler whole(p), cand(p);
        const int k = whole.CandidatesNeeded(Ops::kMaxTopK);
        ASSERT_GT(k, 0);
        std::vector<float> values(k);
        std::vector<int32_t> ids(k);
        ops.TopK(logits.data(), 1, vocab, &p.temperature, k, values.data(), ids.data());
        for (int draw = 0; draw < 3; ++draw, ++draws) {
          ASSERT_EQ(whole.Sample(logits.data(), vocab), cand.SampleCandidates(values.data(), ids.data(), k))
              << "row " << row << " temperature " << p.temperature << " top_k " << p.top_k << " seed " << p.seed;
        }
      }
    }
  }
  EXPECT_EQ(draws, 20 * 4 * 10 * 3);
  // No top_k (or one above the limit): the whole row is needed.
  EXPECT_EQ(Sampler({1.0f, 0, 1.0f, 0}).CandidatesNeeded(Ops::kMaxTopK), 0);
  EXPECT_EQ(Sampler({1.0f, 65, 1.0f, 0}).CandidatesNeeded(Ops::kMaxTopK), 0);
}

}  // namespace
}  // namespace graft

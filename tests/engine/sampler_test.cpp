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

SamplingParams Greedy() { return SamplingParams{}; }

// OpenAI's penalties: presence once and frequency per occurrence, for tokens the output holds
// (not the prompt); the greedy pick moves exactly where the arithmetic says.
TEST(Sampler, PresenceAndFrequencyPenaltiesCountTheOutputOnly) {
  const float l[] = {3.0f, 2.0f, 1.9f, 0.0f};
  SamplingParams p = Greedy();
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.3f;
  Sampler s(p, /*prompt=*/{1, 1, 1});
  EXPECT_EQ(s.Sample(l, 4), 0);  // nothing generated yet; the prompt's token 1 is not penalized
  s.Accept(0);                   // token 0: 3 - 0.5 - 0.3 = 2.2 > 2.0
  EXPECT_EQ(s.Sample(l, 4), 0);
  s.Accept(0);                   // 3 - 0.5 - 0.6 = 1.9 < 2.0
  EXPECT_EQ(s.Sample(l, 4), 1);
  s.Accept(1);                   // token 1: 2 - 0.8 = 1.2; token 2 (1.9) ties token 0 (1.9): lowest id
  EXPECT_EQ(s.Sample(l, 4), 0);
  EXPECT_EQ(l[0], 3.0f) << "the caller's row (what logprobs report) is left as the model wrote it";
  // Negative penalties encourage repeats.
  SamplingParams q = Greedy();
  q.presence_penalty = -1.5f;
  Sampler r(q);
  r.Accept(3);
  EXPECT_EQ(r.Sample(l, 4), 0);  // 0 + 1.5 < 3
  r.Accept(2);
  EXPECT_EQ(r.Sample(l, 4), 2);  // 1.9 + 1.5 = 3.4 > 3
}

// repetition_penalty (HF / vLLM): every token of the prompt or the output, once however often,
// positive logits divided by it and negative ones multiplied.
TEST(Sampler, RepetitionPenaltyCoversPromptAndOutputAndPushesBothSigns) {
  SamplingParams p = Greedy();
  p.repetition_penalty = 2.0f;
  {
    const float l[] = {4.0f, 2.5f, -1.0f};
    Sampler s(p, /*prompt=*/{0, 0, 0, 0});
    EXPECT_EQ(s.Sample(l, 3), 1);  // 4 / 2 = 2 < 2.5 (once, though the prompt holds it four times)
    s.Accept(1);
    EXPECT_EQ(s.Sample(l, 3), 0);  // 2 vs 1.25
  }
  {
    const float l[] = {-1.0f, -1.5f};  // a negative logit is multiplied: -1 -> -2 falls behind -1.5
    Sampler s(p, {0});
    EXPECT_EQ(s.Sample(l, 2), 1);
  }
  {
    SamplingParams off = Greedy();
    off.repetition_penalty = 1.0f;
    const float l[] = {4.0f, 2.5f};
    EXPECT_EQ(Sampler(off, {0}).Sample(l, 2), 0);
  }
}

TEST(Sampler, LogitBiasBansAndPromotes) {
  const float l[] = {5.0f, 1.0f, 0.0f};
  SamplingParams ban = Greedy();
  ban.logit_bias = {{0, -100.0f}};
  EXPECT_EQ(Sampler(ban).Sample(l, 3), 1);
  SamplingParams promote = ban;
  promote.logit_bias = {{0, -100.0f}, {2, 1.5f}};
  EXPECT_EQ(Sampler(promote).Sample(l, 3), 2);
  // Sampling too: a -100 bias leaves token 0 (p = e^-96 of the rest) undrawn in 2,000 draws.
  SamplingParams t = ban;
  t.temperature = 1.0f;
  t.seed = 7;
  Sampler s(t);
  for (int i = 0; i < 2000; ++i) EXPECT_NE(s.Sample(l, 3), 0);
}

// min_p keeps tokens at least min_p times as likely as the best, then draws among them in
// proportion; it needs the whole row.
TEST(Sampler, MinPDropsTheUnlikelyAndRenormalises) {
  const float l[] = {0.0f, std::log(2.0f), std::log(7.0f)};  // 0.1, 0.2, 0.7
  SamplingParams p{1.0f, 0, 1.0f, 11};
  p.min_p = 0.2f;  // threshold 0.14: token 0 out
  Sampler s(p);
  int counts[3] = {0, 0, 0};
  const int n = 20000;
  for (int i = 0; i < n; ++i) counts[s.Sample(l, 3)]++;
  EXPECT_EQ(counts[0], 0);
  EXPECT_NEAR(counts[1] / double(n), 0.2 / 0.9, 0.015);
  EXPECT_NEAR(counts[2] / double(n), 0.7 / 0.9, 0.015);
  p.min_p = 0.3f;  // threshold 0.21: only token 2
  Sampler only(p);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(only.Sample(l, 3), 2);
  EXPECT_EQ(only.CandidatesNeeded(Ops::kMaxTopK), 0);
  SamplingParams pen{0.0f, 0, 1.0f, 0};
  pen.presence_penalty = 0.1f;
  EXPECT_EQ(Sampler(pen).CandidatesNeeded(Ops::kMaxTopK), 0) << "a shaped row is never drawn from candidates";
}

// min_tokens: the stop tokens are never drawn until that many tokens are accepted.
TEST(Sampler, BannedTokensComeBackAfterNAccepts) {
  const float l[] = {5.0f, 1.0f, 0.0f};
  Sampler s(SamplingParams{});
  s.BanUntil({0, 2}, 2);
  EXPECT_EQ(s.CandidatesNeeded(Ops::kMaxTopK), 0) << "a banned row is drawn whole";
  EXPECT_EQ(s.Sample(l, 3), 1);
  s.Accept(1);
  EXPECT_EQ(s.Sample(l, 3), 1);
  s.Accept(1);
  EXPECT_EQ(s.Sample(l, 3), 0);
  EXPECT_EQ(s.CandidatesNeeded(Ops::kMaxTopK), 1);
  Sampler t(SamplingParams{1.0f, 0, 1.0f, 5});
  t.BanUntil({0}, 1000);
  for (int i = 0; i < 1000; ++i) {
    ASSERT_NE(t.Sample(l, 3), 0);
    t.Accept(1);
  }
}

TEST(Sampler, ShapingParamsOutOfRangeAreRefusedNamingThem) {
  auto refused = [](void (*set)(SamplingParams&), const char* name) {
    SamplingParams p{1.0f, 0, 1.0f, 0};
    set(p);
    const Status st = ValidateSamplingParams(p, 100);
    EXPECT_FALSE(st.ok()) << name;
    EXPECT_NE(st.message().find(name), std::string::npos) << st.message();
  };
  refused([](SamplingParams& p) { p.presence_penalty = 2.5f; }, "presence_penalty");
  refused([](SamplingParams& p) { p.frequency_penalty = -3.0f; }, "frequency_penalty");
  refused([](SamplingParams& p) { p.frequency_penalty = NAN; }, "frequency_penalty");
  refused([](SamplingParams& p) { p.repetition_penalty = 0.0f; }, "repetition_penalty");
  refused([](SamplingParams& p) { p.repetition_penalty = INFINITY; }, "repetition_penalty");
  refused([](SamplingParams& p) { p.min_p = 1.5f; }, "min_p");
  refused([](SamplingParams& p) { p.logit_bias = {{100, 1.0f}}; }, "token 100 is outside the vocabulary");
  refused([](SamplingParams& p) { p.logit_bias = {{-1, 1.0f}}; }, "token -1");
  refused([](SamplingParams& p) { p.logit_bias = {{3, 101.0f}}; }, "[-100, 100]");
  refused([](SamplingParams& p) { p.logit_bias = {{3, 1.0f}, {3, 2.0f}}; }, "token 3 is given twice");
  SamplingParams fine{0.7f, 20, 0.95f, 3};
  fine.presence_penalty = -2.0f;
  fine.frequency_penalty = 2.0f;
  fine.repetition_penalty = 1.05f;
  fine.min_p = 0.05f;
  fine.logit_bias = {{0, -100.0f}, {99, 100.0f}};
  EXPECT_TRUE(ValidateSamplingParams(fine, 100).ok());
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

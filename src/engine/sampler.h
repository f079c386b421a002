// Sampler: picks the next token from one row of logits.
//
// First the row is shaped, in vLLM's order, on a copy (the caller's row, which logprobs report,
// stays the model's): logit_bias added; repetition_penalty for every token the prompt or the
// output holds (a positive logit divided by it, a negative one multiplied: HF's and vLLM's
// rule); frequency_penalty x the token's count in the output and presence_penalty once, for
// each token the output holds (OpenAI's rule; negative values encourage); tokens banned by
// BanUntil (min_tokens' stop tokens) -inf until then. Then temperature == 0
// is greedy (argmax, lowest id on ties). Otherwise: logits / temperature, drop tokens whose
// probability is below min_p x the most likely one's, keep the top_k largest (0: all), keep the
// smallest set whose probability reaches top_p (1: all), renormalise, draw. Under a
// TokenConstraint (structured output) all of that runs over the allowed tokens only. Each Sampler owns its RNG (seeded per request), so a seeded
// request draws the same tokens whatever else runs beside it. Uniform draws come from the
// top 53 bits of a 64-bit Mersenne Twister, so the sequence is the same on every platform.
#pragma once

#include <cstdint>
#include <random>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/token_constraint.h"
#include "util/status.h"

namespace graft {

struct SamplingParams {
  // The four every request has; the shaping fields below are set by name.
  SamplingParams(float temperature_ = 0.0f, int top_k_ = 0, float top_p_ = 1.0f, uint64_t seed_ = 0)
      : temperature(temperature_), top_k(top_k_), top_p(top_p_), seed(seed_) {}
  float temperature = 0.0f;
  int top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
  float min_p = 0.0f;               // [0, 1]; 0: off
  float presence_penalty = 0.0f;    // [-2, 2]
  float frequency_penalty = 0.0f;   // [-2, 2]
  float repetition_penalty = 1.0f;  // > 0; 1: off
  std::vector<std::pair<int32_t, float>> logit_bias;  // (token, [-100, 100]), each token once

  // Whether anything reshapes the row before the draw (then the whole row is needed).
  bool Shapes() const {
    return presence_penalty != 0.0f || frequency_penalty != 0.0f || repetition_penalty != 1.0f || min_p > 0.0f ||
           !logit_bias.empty();
  }
};

// vocab > 0 also checks logit_bias's tokens against it.
Status ValidateSamplingParams(const SamplingParams& p, int vocab = 0);

class Sampler {
 public:
  // prompt: the request's tokens (repetition_penalty counts them; kept only when it is on).
  explicit Sampler(const SamplingParams& p, const std::vector<int32_t>& prompt = {});
  // logits: [vocab] fp32, not modified.
  int32_t Sample(const float* logits, int vocab);
  // A token the request generated (the penalties count it from the next draw on).
  void Accept(int32_t token);
  // min_tokens: `tokens` (the request's stop tokens) are never drawn until n more are accepted.
  void BanUntil(std::vector<int32_t> tokens, int n);
  // Structured output: only tokens `c` allows are drawn (the row's values untouched; the draw is
  // over the allowed ones, as if the others' logits were -inf). Not owned; nullptr: none. With
  // a constraint Sample returns -1 when no token is allowed.
  void Constrain(const TokenConstraint* c) { constraint_ = c; }
  // How many of a row's best candidates Sample needs to draw exactly what it draws from the
  // whole row: 1 when greedy, top_k when it keeps the top_k (at most max_k); 0: the whole row
  // (also whenever the row is shaped: penalties, biases, min_p or a ban).
  int CandidatesNeeded(int max_k) const;
  // The same draw from the row's best candidates (Ops::TopK with this sampler's temperature):
  // values[i] = logit / temperature (the raw logit when greedy), in descending order with
  // ascending ids on ties, n >= CandidatesNeeded(). Draws the same token as Sample on the row.
  int32_t SampleCandidates(const float* values, const int32_t* ids, int n);

 private:
  int32_t Draw(size_t keep);  // from scratch_[0..keep), sorted
  // The draw over logits[0..vocab) restricted to allowed[t] != 0 (nullptr: all).
  int32_t SampleFrom(const float* logits, int vocab, const uint8_t* allowed);
  int32_t SampleConstrained(const float* logits, int vocab);
  bool Shaping() const { return p_.Shapes() || ban_left_ > 0; }
  void Shape(float* row, int vocab) const;
  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> scratch_;
  std::vector<float> shaped_;
  std::vector<int32_t> prompt_set_;  // sorted, unique; empty unless repetition_penalty is on
  std::unordered_map<int32_t, int> output_counts_;
  std::vector<int32_t> banned_;
  int ban_left_ = 0;
  const TokenConstraint* constraint_ = nullptr;
  std::vector<uint8_t> allowed_;
};

}  // namespace graft

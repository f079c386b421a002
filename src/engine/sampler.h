// Sampler: picks the next token from one row of logits.
//
// temperature == 0 is greedy (argmax, lowest id on ties). Otherwise: logits / temperature,
// keep the top_k largest (0: all), keep the smallest set whose probability reaches top_p
// (1: all), renormalise, draw. Each Sampler owns its RNG (seeded per request), so a seeded
// request draws the same tokens whatever else runs beside it. Uniform draws come from the
// top 53 bits of a 64-bit Mersenne Twister, so the sequence is the same on every platform.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "util/status.h"

namespace graft {

struct SamplingParams {
  float temperature = 0.0f;
  int top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
};

Status ValidateSamplingParams(const SamplingParams& p);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) {}
  // logits: [vocab] fp32.
  int32_t Sample(const float* logits, int vocab);
  // How many of a row's best candidates Sample needs to draw exactly what it draws from the
  // whole row: 1 when greedy, top_k when it keeps the top_k (at most max_k); 0: the whole row.
  int CandidatesNeeded(int max_k) const;
  // The same draw from the row's best candidates (Ops::TopK with this sampler's temperature):
  // values[i] = logit / temperature (the raw logit when greedy), in descending order with
  // ascending ids on ties, n >= CandidatesNeeded(). Draws the same token as Sample on the row.
  int32_t SampleCandidates(const float* values, const int32_t* ids, int n);

 private:
  int32_t Draw(size_t keep);  // from scratch_[0..keep), sorted
  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> scratch_;
};

}  // namespace graft

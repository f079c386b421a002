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

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> scratch_;
};

}  // namespace graft

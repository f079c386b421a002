// A model's generation_config.json: the sampling defaults its publisher chose, which vLLM applies
// to every request that does not set them (its --generation-config auto). Keys read:
// temperature [0, 2], top_p (0, 1], top_k (-1 or 0: off; else >= 1), min_p [0, 1],
// repetition_penalty (> 0) and max_new_tokens (>= 1, the default max_tokens). Others (the token
// ids, do_sample, ...) are ignored, as vLLM ignores them; a read key of the wrong type or range
// is an error naming the file and the key. No file: no defaults.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "util/status.h"

namespace graft {

struct SamplingDefaults {
  std::optional<double> temperature, top_p, min_p, repetition_penalty;
  std::optional<int64_t> top_k, max_tokens;
  bool empty() const { return !temperature && !top_p && !min_p && !repetition_penalty && !top_k && !max_tokens; }
  std::string Describe() const;  // "temperature 0.6, top_p 0.95, ..." for the start-up line
};

// DIR/generation_config.json (a missing file gives empty defaults).
Result<SamplingDefaults> LoadGenerationConfig(const std::string& dir);

}  // namespace graft

// Compares two logits files (as `graft logits` writes them, or a transformers reference):
// per sequence and overall, top-1 agreement, max |Δlogit| relative to max |logit|, and the
// mean KL(reference ‖ candidate) of the next-token distributions.
#pragma once

#include <string>
#include <vector>

#include "util/status.h"

namespace graft {

struct LogitsAgreement {
  std::string name;  // sequence name, or "all"
  int positions = 0;
  int top1_same = 0;
  double max_abs_diff = 0;
  double max_abs_ref = 0;
  double mean_kl = 0;
};

// Every reference sequence must be present in the candidate with the same [len, vocab] shape.
// Returns one entry per sequence and a final "all" entry.
Result<std::vector<LogitsAgreement>> CompareLogitsFiles(const std::string& reference, const std::string& candidate);

}  // namespace graft

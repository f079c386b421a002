// The `graft decide` job: JSONL decision requests in, JSONL responses out, line for line.
// A line that fails validation gets {"error": {...}} in its place; the others still run.
// A line's "mode" ("lora" or "exact") selects how the adapter serves it.
#pragma once

#include <string>

#include "engine/decision_scorer.h"

namespace graft {

struct DecideJob {
  std::string input, output;
  std::string model_name;  // reported in each response's "model"
  AdapterSlots slots;       // the model's slots; a line's "mode" (else default_mode) picks one
  std::string default_mode;  // "" = the adapter manifest's
  DecisionLimits limits;
};

struct DecideReport {
  int lines = 0, failed = 0;
};

Result<DecideReport> RunDecide(DecisionScorer& scorer, const DecideJob& job);

}  // namespace graft

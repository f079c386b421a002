// The `graft logits` job: int32 token sequences in, fp32 logits for every position out, each
// sequence run alone from an empty cache (docs/design.md §4).
#pragma once

#include <string>

#include "backend/ops.h"
#include "model/model.h"
#include "util/status.h"

namespace graft {

struct LogitsJob {
  std::string input;   // safetensors of int32 1-D tensors, any names
  std::string output;  // safetensors of float32 [len, vocab] under the same names
  int32_t adapter_slot = 0;  // every row selects this slot of `adapters`
};

Status RunLogits(const Model& model, Ops& ops, const LogitsJob& job, const AdapterSet& adapters = AdapterSet{});

}  // namespace graft

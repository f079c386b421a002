// The projections (nn.Linear modules) of one layer: their checkpoint names, the fused slot
// each feeds and where its rows land there. Shared by the LoRA loader and anything else that
// addresses individual projections of the fused weights. The list is derived from the
// architecture's weight-table rows (model/architecture.h), so it cannot disagree with the loader.
#pragma once

#include <string>
#include <vector>

#include "weights/lora.h"
#include "io/model_config.h"

namespace graft {

struct Projection {
  std::string path;      // relative to the layer: "self_attn.q_proj", "linear_attn.in_proj_qkv", ...
  LoraTarget target;     // the fused slot
  int64_t row_offset;    // first row inside the fused slot
  int64_t rows;          // N (output features)
  int64_t cols;          // K (input features)
};

// c: a config from ParseModelConfig (its arch is in the registry). In the fused slots' row order.
std::vector<Projection> LayerProjections(const ModelConfig& c, LayerKind kind);

// The fused weight a slot names in one layer (empty where the layer's kind has no such slot).
const Weight& FusedWeight(const LayerWeights& l, LoraTarget t);
inline Weight& FusedWeight(LayerWeights& l, LoraTarget t) {
  return const_cast<Weight&>(FusedWeight(static_cast<const LayerWeights&>(l), t));
}

}  // namespace graft

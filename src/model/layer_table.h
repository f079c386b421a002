// The declarative weight table's rows (weight_table.h loads them) and the building blocks an
// architecture's entry composes one layer's rows from (model/architecture.h).
//
// A row names a slot of ModelWeights and the checkpoint tensors that fill it, with their expected
// shapes; parts are concatenated by rows (the fusions). Names are relative to the config's weight
// prefix unless `absolute`. A projection row also names its fused LoRA slot, so the list of a
// layer's projections (projections.h) is derived from the same rows the loader reads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/model_config.h"
#include "weights/lora.h"
#include "weights/weights.h"

namespace graft {

struct TablePart {
  std::string name;            // "layers.3.self_attn.q_proj.weight"; relative to the weight prefix unless absolute
  std::vector<int64_t> shape;  // the expected checkpoint shape
  bool absolute = false;
};

struct TableEntry {
  Weight* slot = nullptr;
  std::vector<TablePart> parts;            // concatenated by rows
  bool projection = false;                 // a Linear's weight: may be stored quantized
  LoraTarget target = LoraTarget::kCount;  // a layer projection's fused slot (kCount: not a layer projection)
  float identity = 0;                      // a vector's value in dummy weights: a norm at identity, 0 otherwise
};

using LayerTable = std::vector<TableEntry>;

// Building blocks; p is the layer's prefix ("layers.3."), l the layer's slots (l.kind set).
// norm_identity: 1 for norms that scale by w (Qwen3), 0 for those that scale by 1 + w (Qwen3.5).
void AddLayerNorms(const ModelConfig& c, const std::string& p, float norm_identity, LayerWeights& l, LayerTable& t);
// q_rows: the rows of q_proj (heads x head_dim, or twice that where each head carries its gate).
void AddAttention(const ModelConfig& c, const std::string& p, int64_t q_rows, float norm_identity, LayerWeights& l,
                  LayerTable& t);
void AddGatedDeltaNet(const ModelConfig& c, const std::string& p, LayerWeights& l, LayerTable& t);
void AddSwiGluMlp(const ModelConfig& c, const std::string& p, LayerWeights& l, LayerTable& t);

}  // namespace graft

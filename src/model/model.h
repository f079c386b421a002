// Model: a loaded checkpoint and its forward pass over the ops interface.
//
// One forward pass per architecture (qwen3.cpp, qwen3_5.cpp), each readable top to bottom.
// Forward() processes `n` new tokens of one sequence that continue from `state` (prefill when
// state is fresh, incremental decode when n == 1 afterwards) and writes fp32 logits for every
// new position. A position's logits are the same bits whichever way its sequence is split
// into Forward() calls.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "io/model_config.h"
#include "model/weights.h"
#include "util/status.h"

namespace graft {

// The cache of one sequence: KV for full-attention layers, conv + recurrent state for GDN
// layers (indexed by layer; the entries of the other kind stay empty).
struct KvCache {
  std::vector<float> k, v;  // [len, num_kv_heads, head_dim]
  int len = 0;
};

struct SequenceState {
  int pos = 0;  // tokens processed so far
  std::vector<KvCache> kv;
  std::vector<GdnState> gdn;
};

class Model {
 public:
  virtual ~Model() = default;
  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }

  // A fresh (empty) state sized for this model.
  SequenceState NewState() const;
  // tokens [n] in [0, vocab); logits [n, vocab] fp32. Fails (state untouched) on a bad token or
  // when pos + n would pass max_position_embeddings.
  Status Forward(Ops& ops, const int32_t* tokens, int n, SequenceState& state, float* logits) const;

 protected:
  Model(ModelConfig c, ModelWeights w) : config_(std::move(c)), weights_(std::move(w)) {}
  // The architecture's forward pass; inputs already validated.
  virtual void Run(Ops& ops, const int32_t* tokens, int n, SequenceState& state, float* logits) const = 0;

  ModelConfig config_;
  ModelWeights weights_;
};

std::unique_ptr<Model> MakeQwen3(ModelConfig c, ModelWeights w);
std::unique_ptr<Model> MakeQwen3_5(ModelConfig c, ModelWeights w);

// Reads DIR/config.json and the checkpoint, loads every weight, and builds the model.
Result<std::unique_ptr<Model>> LoadModel(const std::string& dir);

}  // namespace graft

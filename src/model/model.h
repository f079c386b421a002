// Model: a loaded checkpoint and its forward pass over the ops interface.
//
// One forward pass per architecture (qwen3.cpp, qwen3_5.cpp), each readable top to bottom.
// Forward() runs one step: a batch of rows grouped by sequence, each sequence continuing from
// its own state (prefill when fresh, decode when it brings one token), each row selecting an
// adapter slot (0 = base). It writes fp32 logits for every row. A row's logits are the same
// bits whichever rows share its step, whichever adapters they select, and however its
// sequence is split into steps.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "adapters/lora.h"
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

// One step's rows, grouped by sequence: sequence s owns rows [seq_start[s], seq_start[s+1]).
struct StepBatch {
  std::vector<int32_t> tokens;          // [rows]
  std::vector<int32_t> row_adapter;     // [rows] adapter slot, 0 = base
  std::vector<int> seq_start{0};        // [num_seqs + 1]
  std::vector<SequenceState*> states;   // [num_seqs], distinct
  void Add(SequenceState* state, const int32_t* ids, int n, int32_t adapter_slot);
  int rows() const { return static_cast<int>(tokens.size()); }
  int num_seqs() const { return static_cast<int>(states.size()); }
};

// What a forward pass reads besides the weights: the batch, its adapters, each row's position.
struct StepContext {
  const StepBatch& batch;
  const AdapterSet& adapters;
  std::vector<int32_t> pos;  // [rows]
};

class Model {
 public:
  virtual ~Model() = default;
  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }

  // A fresh (empty) state sized for this model.
  SequenceState NewState() const;
  // logits: [batch.rows(), vocab]. Fails (no state touched) on a bad token, adapter slot,
  // duplicate state, or positions past max_position_embeddings.
  Status Forward(Ops& ops, const StepBatch& batch, const AdapterSet& adapters, float* logits) const;
  // One sequence: tokens [n], logits [n, vocab].
  Status Forward(Ops& ops, const int32_t* tokens, int n, SequenceState& state, float* logits,
                 int32_t adapter_slot = 0, const AdapterSet* adapters = nullptr) const;

 protected:
  Model(ModelConfig c, ModelWeights w) : config_(std::move(c)), weights_(std::move(w)) {}
  // The architecture's forward pass; inputs already validated.
  virtual void Run(Ops& ops, const StepContext& ctx, float* logits) const = 0;

  ModelConfig config_;
  ModelWeights weights_;
};

std::unique_ptr<Model> MakeQwen3(ModelConfig c, ModelWeights w);
std::unique_ptr<Model> MakeQwen3_5(ModelConfig c, ModelWeights w);

// Reads DIR/config.json and the checkpoint, loads every weight, and builds the model.
Result<std::unique_ptr<Model>> LoadModel(const std::string& dir);

}  // namespace graft

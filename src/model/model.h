// Model: a loaded checkpoint and its forward pass over the ops interface.
//
// One forward pass per architecture (qwen3.cpp, qwen3_5.cpp), each readable top to bottom.
// Forward() runs one step: a batch of rows grouped by sequence, each sequence continuing from
// its own state (prefill when fresh, decode when it brings one token), each row selecting an
// adapter slot (0 = base). It writes fp32 logits for every row. A row's logits are the same
// bits whichever rows share its step, whichever adapters they select, and however its
// sequence is split into steps.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "weights/lora.h"
#include "backend/ops.h"
#include "io/model_config.h"
#include "model/architecture.h"
#include "kv/kv_pool.h"
#include "kv/sequence_state.h"
#include "weights/weights.h"
#include "util/status.h"

namespace graft {

// Which rows of a step get logits. Computing the output head costs 2 * hidden * vocab FLOPs a
// row, as much as several layers of a small model, and most rows never need it: a record's
// prefill reads none, a question only its last row, a chat step one row per sequence.
struct LogitRows {
  bool all = true;             // every row, in order (the default)
  std::vector<int32_t> rows;   // otherwise only these rows, strictly increasing (may be empty)
  // Sampling candidates instead of logits: when top_k > 0, Forward writes for each selected row
  // i its top_k best entries under temperature[i] (Ops::TopK): values [count, top_k] into
  // `logits` and ids [count, top_k] into `ids`. 1 <= top_k <= Ops::kMaxTopK.
  int top_k = 0;
  std::vector<float> temperature;  // [count], >= 0 (0: the raw logits, as greedy picks)
  static LogitRows None() { return {false, {}, 0, {}}; }
  static LogitRows Only(std::vector<int32_t> r) { return {false, std::move(r), 0, {}}; }
  int count(int total_rows) const { return all ? total_rows : static_cast<int>(rows.size()); }
};

// One step's rows, grouped by sequence: sequence s owns rows [seq_start[s], seq_start[s+1]).
struct StepBatch {
  std::vector<int32_t> tokens;          // [rows]
  std::vector<int32_t> row_adapter;     // [rows] adapter slot, 0 = base
  std::vector<int> seq_start{0};        // [num_seqs + 1]
  std::vector<SequenceState*> states;   // [num_seqs], distinct
  LogitRows logits;                     // which rows' logits Forward writes
  void Add(SequenceState* state, const int32_t* ids, int n, int32_t adapter_slot);
  int rows() const { return static_cast<int>(tokens.size()); }
  int num_seqs() const { return static_cast<int>(states.size()); }
};

// What a forward pass reads besides the weights: the batch, its adapters, each row's position.
struct StepContext {
  const StepBatch& batch;
  const AdapterSet& adapters;
  std::vector<int32_t> pos;  // [rows]
  int32_t* top_ids = nullptr;  // LogitRows::top_k mode: where the candidates' ids go
  const ModelWeights* exact_base = nullptr;  // Model::exact_base(): where exact rows rebuild from
};

class Model {
 public:
  virtual ~Model() = default;
  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }

  // A fresh (empty) sequence in `pool` on `account` (kResourceExhausted when it has no free slot).
  Result<SequenceState> NewState(KvPool& pool, int account = 0) const { return SequenceState::New(pool, account); }
  // A fresh sequence in the model's own growable pool where `ops` keeps its caches, for
  // offline tools and tests that run from one thread; a server uses a fixed pool made with
  // NewPool. Fails only when device memory runs out.
  Result<SequenceState> NewState(Ops& ops) const;
  // The same in host memory (the CPU backend's; cannot fail).
  SequenceState NewState() const;
  // Gives back what the growable pools of NewState() / NewState(ops) grew, so that fixed pools
  // sized from a memory budget next can have it (graft bench: its offline runs, then an
  // engine). Every sequence made in them must be gone.
  void ReleaseOwnPools() const { own_pools_.clear(); }
  std::unique_ptr<KvPool> NewPool(int page_size, int num_pages, int num_slots, bool growable,
                                  std::shared_ptr<PoolMemory> mem = nullptr) const;
  // logits: [batch.logits.count(batch.rows()), vocab], the selected rows in order; a row's
  // logits are the same bits whether or not other rows are selected. In top-k mode
  // (LogitRows::top_k) logits and ids receive the candidates instead. Fails (no state touched)
  // on a bad token, adapter slot, logit row, top-k request, duplicate state, or positions past
  // max_position_embeddings.
  Status Forward(Ops& ops, const StepBatch& batch, const AdapterSet& adapters, float* logits,
                 int32_t* ids = nullptr) const;
  // Exact mode on a base whose touched projections are not stored in bf16 (float32 today,
  // quantized formats later): a resident bf16 copy of just the fused projections the exact
  // slots of `adapters` touch, loaded from `dir` — the bf16 checkpoint the adapters were
  // extracted against (same config). Exact rows rebuild from it; everything else still runs on
  // the served weights. Returns the copy's bytes. Call at start-up, before serving.
  Result<int64_t> LoadExactBase(const std::string& dir, const AdapterSet& adapters);
  const ModelWeights* exact_base() const { return exact_base_.layers.empty() ? nullptr : &exact_base_; }
  // Exact mode: the largest fused base weight the exact slots of `adapters` reconstruct, in
  // bf16 elements (what Ops::ReserveExact needs; 0 when no slot is exact). Fails when an exact
  // slot's adapter has no exact representation or a weight it touches is not bf16.
  Result<int64_t> ExactScratchElements(const AdapterSet& adapters) const;
  // One sequence: tokens [n], logits [which.count(n), vocab] (every row by default).
  Status Forward(Ops& ops, const int32_t* tokens, int n, SequenceState& state, float* logits,
                 int32_t adapter_slot = 0, const AdapterSet* adapters = nullptr,
                 const LogitRows& which = LogitRows{}) const;

  // Makes room for each sequence's rows of `b` (pages, copy-on-write); all or nothing: the pages
  // are counted by pool and account first, the pool's reclaimer asked where an account is short
  // (KvPool::Reclaim), and kResourceExhausted changes nothing. Forward does it itself; a caller that must know before the step whether its rows fit calls it first
  // (calling it again for the same rows takes nothing more).
  Status ReserveRows(const StepBatch& b) const;

 protected:
  Model(ModelConfig c, ModelWeights w);
  // The architecture's forward pass; inputs already validated.
  virtual void Run(Ops& ops, const StepContext& ctx, float* logits) const = 0;

  // ExactScratchElements for one adapter.
  Result<int64_t> ExactElements(const LoraAdapter& a) const;

  // The growable pool NewState() and NewState(ops) use for memory `mem` (nullptr: host).
  KvPool& OwnPool(std::shared_ptr<PoolMemory> mem) const;

  ModelConfig config_;
  ModelWeights weights_;
  ModelWeights exact_base_;  // LoadExactBase's copy (only touched slots filled), or empty
  mutable std::map<PoolMemory*, std::unique_ptr<KvPool>> own_pools_;  // NewState()'s growable pools
};

// The forward pass of c.arch over w, from its registry entry (model/architecture.h): an
// architecture the registry does not hold is an error naming it, never another one's pass.
Result<std::unique_ptr<Model>> MakeModel(ModelConfig c, ModelWeights w);

// Reads DIR/config.json and the checkpoint, loads every weight, and builds the model.
Result<std::unique_ptr<Model>> LoadModel(const std::string& dir);
// DIR/config.json with seeded random bf16 weights at its shapes (`--load-format dummy`): no
// checkpoint is read.
Result<std::unique_ptr<Model>> LoadDummyModel(const std::string& dir, uint64_t seed, int threads);

}  // namespace graft

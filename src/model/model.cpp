#include "model/model.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "io/checkpoint.h"
#include "model/projections.h"
#include "model/architecture.h"
#include "model/weight_table.h"

namespace graft {

Model::Model(ModelConfig c, ModelWeights w) : config_(std::move(c)), weights_(std::move(w)) {}

std::unique_ptr<KvPool> Model::NewPool(int page_size, int num_pages, int num_slots, bool growable,
                                       std::shared_ptr<PoolMemory> mem) const {
  return std::make_unique<KvPool>(config_, page_size, num_pages, num_slots, growable, std::move(mem));
}

KvPool& Model::OwnPool(std::shared_ptr<PoolMemory> mem) const {
  auto& pool = own_pools_[mem.get()];
  if (!pool) pool = NewPool(/*page_size=*/16, /*num_pages=*/64, /*num_slots=*/4, /*growable=*/true, std::move(mem));
  return *pool;
}

Result<SequenceState> Model::NewState(Ops& ops) const { return NewState(OwnPool(ops.pool_memory())); }

SequenceState Model::NewState() const {
  return std::move(NewState(OwnPool(nullptr))).value();  // a growable host pool cannot run out
}

Status Model::ReserveRows(const StepBatch& b) const {
  // Count first, so that a step either gets all its pages or changes nothing.
  std::map<std::pair<KvPool*, int>, int> need;
  for (int s = 0; s < b.num_seqs(); ++s) {
    const SequenceState* st = b.states[s];
    need[{st->pool, st->account}] += st->PagesFor(b.seq_start[s + 1] - b.seq_start[s]);
  }
  for (const auto& [at, n] : need) {
    auto [pool, account] = at;
    if (!pool->Reclaim(account, n)) {
      return ResourceExhausted(fmt::format("the step needs {} KV pages but only {} are free", n, pool->free_pages(account)));
    }
  }
  for (int s = 0; s < b.num_seqs(); ++s) GRAFT_RETURN_IF_ERROR(b.states[s]->Grow(b.seq_start[s + 1] - b.seq_start[s]));
  return Status::Ok();
}

void StepBatch::Add(SequenceState* state, const int32_t* ids, int n, int32_t adapter_slot) {
  tokens.insert(tokens.end(), ids, ids + n);
  row_adapter.insert(row_adapter.end(), static_cast<size_t>(n), adapter_slot);
  states.push_back(state);
  seq_start.push_back(static_cast<int>(tokens.size()));
}

Result<int64_t> Model::LoadExactBase(const std::string& dir, const AdapterSet& adapters) {
  GRAFT_ASSIGN_OR_RETURN(ModelConfig cfg, LoadModelConfig(dir));
  if (cfg.arch != config_.arch || cfg.num_layers != config_.num_layers || cfg.hidden_size != config_.hidden_size ||
      cfg.intermediate_size != config_.intermediate_size || cfg.layer_kinds != config_.layer_kinds) {
    return InvalidArgument(fmt::format("--exact-base {}: a different model ({}) than the served base ({})", dir,
                                       cfg.Summary(), config_.Summary()));
  }
  std::set<std::pair<int, int>> touched;  // (layer, target)
  for (size_t s = 1; s < adapters.slots.size(); ++s) {
    if (!adapters.is_exact(s) || !adapters.slots[s]) continue;
    const LoraAdapter& a = *adapters.slots[s];
    for (size_t l = 0; l < a.layers.size(); ++l) {
      for (int t = 0; t < static_cast<int>(LoraTarget::kCount); ++t) {
        if (!a.layers[l].targets[static_cast<size_t>(t)].empty()) touched.insert({static_cast<int>(l), t});
      }
    }
  }
  GRAFT_ASSIGN_OR_RETURN(Checkpoint ck, Checkpoint::Open(dir));
  auto wanted = [&](const ModelWeights& w, const Weight* slot) {
    for (const auto& [l, t] : touched) {
      if (&FusedWeight(w.layers[static_cast<size_t>(l)], static_cast<LoraTarget>(t)) == slot) return true;
    }
    return false;
  };
  GRAFT_ASSIGN_OR_RETURN(ModelWeights copy, LoadSlots(ck, cfg, wanted));
  int64_t bytes = 0;
  for (const auto& [l, t] : touched) {
    const Weight& c = FusedWeight(copy.layers[static_cast<size_t>(l)], static_cast<LoraTarget>(t));
    const Weight& w = FusedWeight(weights_.layers[static_cast<size_t>(l)], static_cast<LoraTarget>(t));
    if (!c.is_bf16 || !c.dense()) {
      return InvalidArgument(fmt::format("--exact-base {}: {} is stored in {}, not bf16", dir, c.name, c.storage()));
    }
    if (c.rows != w.rows || c.cols != w.cols) {
      return InvalidArgument(fmt::format("--exact-base {}: {} is [{}, {}] but the served base's is [{}, {}]", dir, c.name,
                                         c.rows, c.cols, w.rows, w.cols));
    }
    bytes += c.bytes();
  }
  exact_base_ = std::move(copy);
  return bytes;
}

Result<int64_t> Model::ExactElements(const LoraAdapter& a) const {
  if (!a.has_exact) {
    return InvalidArgument(fmt::format("adapter '{}' ({}) has no exact representation (graft adapter extract --exact makes one)",
                                       a.name, a.dir));
  }
  int64_t most = 0;
  for (size_t l = 0; l < a.layers.size() && l < weights_.layers.size(); ++l) {
    for (int t = 0; t < static_cast<int>(LoraTarget::kCount); ++t) {
      if (a.layers[l].targets[static_cast<size_t>(t)].empty()) continue;
      const Weight* w = &FusedWeight(weights_.layers[l], static_cast<LoraTarget>(t));
      if (exact_base_.layers.size() > l && !FusedWeight(exact_base_.layers[l], static_cast<LoraTarget>(t)).empty()) {
        w = &FusedWeight(exact_base_.layers[l], static_cast<LoraTarget>(t));
      }
      if (!w->is_bf16) {
        return Unsupported(fmt::format("adapter '{}': exact mode reconstructs bf16 weights, but {} is stored in {}; "
                                       "pass --exact-base DIR (the bf16 checkpoint the adapter was extracted against) "
                                       "to keep a bf16 copy of the projections it touches",
                                       a.name, w->name, w->storage()));
      }
      const Weight& ww = *w;
      most = std::max(most, ww.rows * ww.cols);
    }
  }
  return most;
}

Result<int64_t> Model::ExactScratchElements(const AdapterSet& adapters) const {
  int64_t most = 0;
  for (size_t s = 1; s < adapters.slots.size(); ++s) {
    if (!adapters.is_exact(s) || !adapters.slots[s]) continue;
    GRAFT_ASSIGN_OR_RETURN(int64_t e, ExactElements(*adapters.slots[s]));
    most = std::max(most, e);
  }
  return most;
}

Status Model::Forward(Ops& ops, const StepBatch& b, const AdapterSet& adapters, float* logits, int32_t* ids) const {
  const int rows = b.rows();
  if (rows <= 0) return InvalidArgument("forward: no tokens");
  if (b.seq_start.size() != b.states.size() + 1 || b.seq_start.front() != 0 || b.seq_start.back() != rows ||
      static_cast<int>(b.row_adapter.size()) != rows) {
    return InvalidArgument("forward: malformed step batch");
  }
  for (int t = 0; t < rows; ++t) {
    if (b.tokens[t] < 0 || b.tokens[t] >= config_.vocab_size) {
      return InvalidArgument(fmt::format("token {} at index {} is outside the vocabulary [0, {})", b.tokens[t], t,
                                         config_.vocab_size));
    }
    const int32_t slot = b.row_adapter[t];
    if (slot < 0 || static_cast<size_t>(slot) >= adapters.slots.size() || (slot > 0 && !adapters.slots[slot])) {
      return InvalidArgument(fmt::format("row {} selects adapter slot {}, which is not loaded", t, slot));
    }
    if (adapters.is_exact(static_cast<size_t>(slot)) && (t == 0 || b.row_adapter[t - 1] != slot)) {
      GRAFT_RETURN_IF_ERROR(ExactElements(*adapters.slots[slot]).status());
    }
  }
  if (!b.logits.all) {
    for (size_t i = 0; i < b.logits.rows.size(); ++i) {
      const int32_t r = b.logits.rows[i];
      if (r < 0 || r >= rows || (i > 0 && r <= b.logits.rows[i - 1])) {
        return InvalidArgument(fmt::format("forward: logit row {} is out of range or out of order", r));
      }
    }
  }
  if (b.logits.top_k != 0) {
    const int count = b.logits.count(rows);
    if (b.logits.top_k < 0 || b.logits.top_k > Ops::kMaxTopK || b.logits.top_k > config_.vocab_size) {
      return InvalidArgument(fmt::format("forward: top_k {} is outside [1, {}]", b.logits.top_k,
                                         std::min(Ops::kMaxTopK, config_.vocab_size)));
    }
    if (static_cast<int>(b.logits.temperature.size()) != count) {
      return InvalidArgument(fmt::format("forward: {} temperatures for {} candidate rows", b.logits.temperature.size(),
                                         count));
    }
    for (float t : b.logits.temperature) {
      if (!(t >= 0.0f) || !std::isfinite(t)) return InvalidArgument(fmt::format("forward: temperature {} is not >= 0", t));
    }
    if (count > 0 && (!logits || !ids)) return InvalidArgument("forward: top-k mode needs a values and an ids buffer");
  }
  StepContext ctx{b, adapters, {}, ids, exact_base()};
  ctx.pos.resize(static_cast<size_t>(rows));
  for (int s = 0; s < b.num_seqs(); ++s) {
    const SequenceState* st = b.states[s];
    const int n = b.seq_start[s + 1] - b.seq_start[s];
    if (n <= 0) return InvalidArgument(fmt::format("forward: sequence {} brings no tokens", s));
    for (int o = 0; o < s; ++o) {
      if (b.states[o] == st) return InvalidArgument("forward: a sequence appears twice in one step");
    }
    if (!st->pool || (st->pool->has_gdn() && st->slot < 0)) return InvalidArgument("forward: the state holds no cache (use NewState)");
    if (config_.max_position_embeddings > 0 && st->pos + n > config_.max_position_embeddings) {
      return InvalidArgument(fmt::format("{} positions exceed the model's context length of {}", st->pos + n,
                                         config_.max_position_embeddings));
    }
    for (int i = 0; i < n; ++i) ctx.pos[b.seq_start[s] + i] = st->pos + i;
  }
  GRAFT_RETURN_IF_ERROR(ReserveRows(b));
  Run(ops, ctx, logits);
  for (int s = 0; s < b.num_seqs(); ++s) b.states[s]->pos += b.seq_start[s + 1] - b.seq_start[s];
  return ops.TakeError().WithContext("forward");
}

Status Model::Forward(Ops& ops, const int32_t* tokens, int n, SequenceState& state, float* logits, int32_t adapter_slot,
                      const AdapterSet* adapters, const LogitRows& which) const {
  if (n <= 0) return InvalidArgument("forward: no tokens");
  StepBatch b;
  b.Add(&state, tokens, n, adapter_slot);
  b.logits = which;
  static const AdapterSet kNone;
  return Forward(ops, b, adapters ? *adapters : kNone, logits);
}

Result<std::unique_ptr<Model>> MakeModel(ModelConfig c, ModelWeights w) {
  GRAFT_ASSIGN_OR_RETURN(const Architecture* a, FindArchitecture(c.arch));
  return a->make(std::move(c), std::move(w));
}

Result<std::unique_ptr<Model>> LoadDummyModel(const std::string& dir, uint64_t seed, int threads) {
  GRAFT_ASSIGN_OR_RETURN(ModelConfig cfg, LoadModelConfig(dir));
  GRAFT_ASSIGN_OR_RETURN(ModelWeights w, DummyWeights(cfg, seed, threads));
  return MakeModel(std::move(cfg), std::move(w));
}

Result<std::unique_ptr<Model>> LoadModel(const std::string& dir) {
  GRAFT_ASSIGN_OR_RETURN(ModelConfig cfg, LoadModelConfig(dir));
  GRAFT_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::Open(dir));
  GRAFT_ASSIGN_OR_RETURN(ModelWeights w, LoadWeights(ckpt, cfg));
  if (w.lm_head.empty()) cfg.tie_word_embeddings = true;  // no lm_head in the checkpoint: tied
  return MakeModel(std::move(cfg), std::move(w));
}

}  // namespace graft

#include "model/model.h"

#include <fmt/core.h>

#include "io/checkpoint.h"
#include "model/weight_table.h"

namespace graft {

SequenceState Model::NewState() const {
  const auto& c = config_;
  SequenceState s;
  s.kv.resize(static_cast<size_t>(c.num_layers));
  s.gdn.resize(static_cast<size_t>(c.num_layers));
  for (int i = 0; i < c.num_layers; ++i) {
    if (c.layer_kinds[i] != LayerKind::kLinearAttention) continue;
    auto& g = s.gdn[i];
    const size_t hv = c.linear_num_value_heads, dk = c.linear_key_head_dim, dv = c.linear_value_head_dim;
    g.conv.assign(static_cast<size_t>(c.conv_dim()) * (c.linear_conv_kernel - 1), 0.0f);
    g.S.assign(hv * dk * dv, 0.0f);
    g.pk.assign(kGdnChunk * hv * dk, 0.0f);
    g.pvn.assign(kGdnChunk * hv * dv, 0.0f);
    g.pgam.assign(kGdnChunk * hv, 0.0f);
  }
  return s;
}

void StepBatch::Add(SequenceState* state, const int32_t* ids, int n, int32_t adapter_slot) {
  tokens.insert(tokens.end(), ids, ids + n);
  row_adapter.insert(row_adapter.end(), static_cast<size_t>(n), adapter_slot);
  states.push_back(state);
  seq_start.push_back(static_cast<int>(tokens.size()));
}

Status Model::Forward(Ops& ops, const StepBatch& b, const AdapterSet& adapters, float* logits) const {
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
  }
  StepContext ctx{b, adapters, {}};
  ctx.pos.resize(static_cast<size_t>(rows));
  for (int s = 0; s < b.num_seqs(); ++s) {
    const SequenceState* st = b.states[s];
    const int n = b.seq_start[s + 1] - b.seq_start[s];
    if (n <= 0) return InvalidArgument(fmt::format("forward: sequence {} brings no tokens", s));
    for (int o = 0; o < s; ++o) {
      if (b.states[o] == st) return InvalidArgument("forward: a sequence appears twice in one step");
    }
    if (static_cast<int>(st->kv.size()) != config_.num_layers) return InvalidArgument("forward: state is not for this model");
    if (config_.max_position_embeddings > 0 && st->pos + n > config_.max_position_embeddings) {
      return InvalidArgument(fmt::format("{} positions exceed the model's context length of {}", st->pos + n,
                                         config_.max_position_embeddings));
    }
    for (int i = 0; i < n; ++i) ctx.pos[b.seq_start[s] + i] = st->pos + i;
  }
  Run(ops, ctx, logits);
  for (int s = 0; s < b.num_seqs(); ++s) b.states[s]->pos += b.seq_start[s + 1] - b.seq_start[s];
  return Status::Ok();
}

Status Model::Forward(Ops& ops, const int32_t* tokens, int n, SequenceState& state, float* logits, int32_t adapter_slot,
                      const AdapterSet* adapters) const {
  if (n <= 0) return InvalidArgument("forward: no tokens");
  StepBatch b;
  b.Add(&state, tokens, n, adapter_slot);
  static const AdapterSet kNone;
  return Forward(ops, b, adapters ? *adapters : kNone, logits);
}

Result<std::unique_ptr<Model>> LoadModel(const std::string& dir) {
  GRAFT_ASSIGN_OR_RETURN(ModelConfig cfg, LoadModelConfig(dir));
  GRAFT_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::Open(dir));
  GRAFT_ASSIGN_OR_RETURN(ModelWeights w, LoadWeights(ckpt, cfg));
  if (w.lm_head.empty()) cfg.tie_word_embeddings = true;  // no lm_head in the checkpoint: tied
  if (cfg.arch == Arch::kQwen3) return MakeQwen3(std::move(cfg), std::move(w));
  return MakeQwen3_5(std::move(cfg), std::move(w));
}

}  // namespace graft

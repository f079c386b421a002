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

Status Model::Forward(Ops& ops, const int32_t* tokens, int n, SequenceState& state, float* logits) const {
  if (n <= 0) return InvalidArgument("forward: no tokens");
  for (int t = 0; t < n; ++t) {
    if (tokens[t] < 0 || tokens[t] >= config_.vocab_size) {
      return InvalidArgument(fmt::format("token {} at index {} is outside the vocabulary [0, {})", tokens[t], t,
                                         config_.vocab_size));
    }
  }
  if (config_.max_position_embeddings > 0 && state.pos + n > config_.max_position_embeddings) {
    return InvalidArgument(fmt::format("{} positions exceed the model's context length of {}", state.pos + n,
                                       config_.max_position_embeddings));
  }
  if (static_cast<int>(state.kv.size()) != config_.num_layers) return InvalidArgument("forward: state is not for this model");
  Run(ops, tokens, n, state, logits);
  return Status::Ok();
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

// Qwen3.5 (hybrid) forward pass: docs/architectures.md §6. Layers are either Gated DeltaNet
// (linear attention with a causal conv and a recurrent state) or gated full attention with
// partial RoPE; every layer has a SwiGLU MLP; residual, final and q/k norms are (1+w) norms.
#include <vector>

#include "model/architecture.h"
#include "model/blocks.h"
#include "model/model.h"

namespace graft {
namespace {

class Qwen3_5 final : public Model {
 public:
  Qwen3_5(ModelConfig c, ModelWeights w) : Model(std::move(c), std::move(w)) {}

 protected:
  void Run(Ops& ops, const StepContext& ctx, float* logits) const override {
    const auto& c = config_;
    const int n = ctx.batch.rows();
    const int H = c.hidden_size;
    const float eps = static_cast<float>(c.rms_norm_eps);
    Scratch scratch(ops);
    float *h = scratch(int64_t{n} * H), *x = scratch(int64_t{n} * H), *y = scratch(int64_t{n} * H);
    uint16_t* xb = scratch.Twin(int64_t{n} * H);  // x's twin for the projections (null: none)

    // h is the residual stream; x the normed input of the next sublayer (each residual add
    // and the norm after it are one AddRmsNorm).
    ops.Embed(weights_.embed, ctx.batch.tokens.data(), n, h);
    ops.RmsNorm(h, weights_.layers[0].input_norm, n, H, eps, NormKind::kOnePlusW, x, xb);
    for (int i = 0; i < c.num_layers; ++i) {
      const LayerWeights& l = weights_.layers[i];
      if (l.kind == LayerKind::kLinearAttention) GatedDeltaNet(ops, ctx, i, l.gdn, x, xb, y);
      else GatedAttention(ops, ctx, i, l.attn, x, xb, y);
      ops.AddRmsNorm(h, y, l.post_norm, n, H, eps, NormKind::kOnePlusW, x, xb);
      Mlp(ops, ctx, i, l, x, H, c.intermediate_size, y, xb);
      const bool last = i + 1 == c.num_layers;  // the final norm feeds the head's gathered rows: no twin
      const Weight& next_norm = last ? weights_.final_norm : weights_.layers[i + 1].input_norm;
      ops.AddRmsNorm(h, y, next_norm, n, H, eps, NormKind::kOnePlusW, x, last ? nullptr : xb);
    }
    OutputHead(ops, ctx, weights_.head(), x, H, logits);
  }

 private:
  // q_proj rows hold [q_h | gate_h] per head; out = o_proj(attention(q, k, v) * sigmoid(gate)).
  void GatedAttention(Ops& ops, const StepContext& ctx, int layer, const AttentionWeights& w, const float* x,
                      const uint16_t* xb, float* out) const {
    const auto& c = config_;
    const int n = ctx.batch.rows();
    const int H = c.hidden_size, hd = c.head_dim, nh = c.num_heads, nkv = c.num_kv_heads;
    const int q_w = nh * hd, kv_w = nkv * hd, qg_w = 2 * q_w, qkv_w = qg_w + 2 * kv_w;
    const float eps = static_cast<float>(c.rms_norm_eps);
    Scratch scratch(ops);
    float *qkv = scratch(int64_t{n} * qkv_w), *q = scratch(int64_t{n} * q_w), *gate = scratch(int64_t{n} * q_w),
          *a = scratch(int64_t{n} * q_w), *k = scratch(int64_t{n} * kv_w), *v = scratch(int64_t{n} * kv_w);
    Project(ops, ctx, layer, LoraTarget::kAttnQkv, x, H, w.qkv, qkv, xb);
    // q, gate, k, v out of the fused rows; q and k normed per head and rotated (one launch on CUDA).
    ops.QkvPrep({.qkv = qkv, .n = n, .nh = nh, .nkv = nkv, .hd = hd, .rot_dim = c.rotary_dim, .q_norm = &w.q_norm,
                 .k_norm = &w.k_norm, .norm_kind = NormKind::kOnePlusW, .eps = eps, .pos = ctx.pos.data(),
                 .inv_freq = c.inv_freq.data(), .attn_scale = c.rope_attention_scaling, .q = q, .gate = gate, .k = k,
                 .v = v});
    uint16_t* ab = scratch.Twin(int64_t{n} * q_w);  // the gated attention's twin for o_proj (null: none)
    CachedAttention(ops, ctx, layer, q, k, v, c, a);
    ops.SigmoidGateMul(a, gate, q_w, n, q_w, ab);
    Project(ops, ctx, layer, LoraTarget::kAttnO, a, q_w, w.o, out, ab);
  }

  // in_proj rows: [q k v (conv_dim) | z (value_dim) | b (Hv) | a (Hv)]. The conv and the delta
  // rule run per sequence, each on its own state (all sequences in one call each: a decode step
  // launches one of each, not one a sequence).
  void GatedDeltaNet(Ops& ops, const StepContext& ctx, int layer, const GdnWeights& w, const float* x,
                     const uint16_t* xb, float* out) const {
    const auto& c = config_;
    const auto& b = ctx.batch;
    const int n = b.rows();
    const int H = c.hidden_size, hv = c.linear_num_value_heads, conv_dim = c.conv_dim(), value_dim = c.value_dim();
    const int proj_w = conv_dim + value_dim + 2 * hv;
    Scratch scratch(ops);
    float *proj = scratch(int64_t{n} * proj_w), *mixed = scratch(int64_t{n} * conv_dim), *beta = scratch(int64_t{n} * hv),
          *g = scratch(int64_t{n} * hv), *core = scratch(int64_t{n} * value_dim), *normed = scratch(int64_t{n} * value_dim);
    uint16_t* normed_b = scratch.Twin(int64_t{n} * value_dim);  // normed's twin for out_proj (null: none)
    Project(ops, ctx, layer, LoraTarget::kGdnIn, x, H, w.in_proj, proj, xb);
    std::vector<float*> conv_states(static_cast<size_t>(b.num_seqs()));
    std::vector<GdnCoreArgs> seqs(static_cast<size_t>(b.num_seqs()));
    for (int s = 0; s < b.num_seqs(); ++s) {
      const int r0 = b.seq_start[s], ns = b.seq_start[s + 1] - r0;
      GdnState& state = b.states[s]->pool->state(b.states[s]->slot, layer);
      conv_states[static_cast<size_t>(s)] = state.conv;
      GdnCoreArgs& a = seqs[static_cast<size_t>(s)];  // reads `mixed`, which the conv below writes
      a.qkv = mixed + int64_t{r0} * conv_dim;
      a.beta = beta + int64_t{r0} * hv;
      a.g = g + int64_t{r0} * hv;
      a.n = ns;
      a.hk = c.linear_num_key_heads;
      a.hv = hv;
      a.dk = c.linear_key_head_dim;
      a.dv = c.linear_value_head_dim;
      a.state = &state;
      a.out = core + int64_t{r0} * value_dim;
    }
    ops.CausalConvSiluSeqs(proj, proj_w, b.seq_start.data(), b.num_seqs(), conv_dim, w.conv, conv_states.data(), mixed);
    // The gates (b, a), the delta rule and the gated norm (z): one launch on a CUDA decode step.
    const GdnGatedArgs gated{.in = proj, .stride = proj_w, .b_col = conv_dim + value_dim,
                             .a_col = conv_dim + value_dim + hv, .z_col = conv_dim, .n = n, .hv = hv,
                             .dv = c.linear_value_head_dim, .a_log = &w.a_log, .dt_bias = &w.dt_bias, .norm = &w.norm,
                             .eps = static_cast<float>(c.rms_norm_eps), .beta = beta, .g = g, .core = core,
                             .normed = normed, .normed_bf16 = normed_b};
    ops.GdnGatedCoreSeqs(seqs.data(), b.num_seqs(), gated);
    Project(ops, ctx, layer, LoraTarget::kGdnOut, normed, value_dim, w.out, out, normed_b);
  }
};

// A layer's weights: (1+w) norms; gated attention (q_proj holds each head's query and its gate:
// [q_h | gate_h], twice heads x head_dim rows) or Gated DeltaNet; a SwiGLU MLP.
void Qwen3_5Layer(const ModelConfig& c, const std::string& p, LayerWeights& l, LayerTable& t) {
  AddLayerNorms(c, p, /*norm_identity=*/0.0f, l, t);
  if (l.kind == LayerKind::kFullAttention) {
    AddAttention(c, p, int64_t{c.num_heads} * 2 * c.head_dim, /*norm_identity=*/0.0f, l, t);
  } else {
    AddGatedDeltaNet(c, p, l, t);
  }
  AddSwiGluMlp(c, p, l, t);
}

std::unique_ptr<Model> MakeQwen3_5(ModelConfig c, ModelWeights w) {
  return std::unique_ptr<Model>(new Qwen3_5(std::move(c), std::move(w)));
}

}  // namespace

const Architecture& Qwen3_5Architecture() {
  static const Architecture a{
      // "qwen3_5" is the multimodal wrapper (text fields in text_config, text weights under
      // model.language_model.); "qwen3_5_text" the flat text model. GDN defaults: the HF class's.
      .config = {.name = "qwen3_5",
                 .spellings = {{.model_type = "qwen3_5", .weight_prefix = "model.language_model.", .text_config = true},
                               {.model_type = "qwen3_5_text", .weight_prefix = "model.", .text_config = false}},
                 .rope_theta = 1e7,
                 .partial_rotary_factor = 0.25,
                 .linear_attention = LinearAttentionDefaults{.key_heads = 16,
                                                             .value_heads = 32,
                                                             .key_head_dim = 128,
                                                             .value_head_dim = 128,
                                                             .conv_kernel = 4,
                                                             .full_attention_interval = 4}},
      .norm_identity = 0.0f,
      .layer_table = Qwen3_5Layer,
      .make = MakeQwen3_5,
  };
  return a;
}

}  // namespace graft

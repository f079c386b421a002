// Qwen3 (dense) forward pass: docs/architectures.md §5.
#include "model/architecture.h"
#include "model/blocks.h"
#include "model/model.h"

namespace graft {
namespace {

class Qwen3 final : public Model {
 public:
  Qwen3(ModelConfig c, ModelWeights w) : Model(std::move(c), std::move(w)) {}

 protected:
  void Run(Ops& ops, const StepContext& ctx, float* logits) const override {
    const auto& c = config_;
    const auto& w = weights_;
    const int n = ctx.batch.rows();
    const int H = c.hidden_size, hd = c.head_dim, nh = c.num_heads, nkv = c.num_kv_heads;
    const int q_w = nh * hd, kv_w = nkv * hd, qkv_w = q_w + 2 * kv_w;
    const float eps = static_cast<float>(c.rms_norm_eps);
    const int32_t* pos = ctx.pos.data();
    Scratch scratch(ops);
    auto buf = [&](int width) { return scratch(int64_t{n} * width); };
    auto h = buf(H), x = buf(H), y = buf(H), qkv = buf(qkv_w), q = buf(q_w), k = buf(kv_w), v = buf(kv_w),
         a = buf(q_w);
    uint16_t* xb = scratch.Twin(int64_t{n} * H);  // x's twin for the projections (null: none)

    // h is the residual stream; x the normed input of the next sublayer (each residual add
    // and the norm after it are one AddRmsNorm).
    ops.Embed(w.embed, ctx.batch.tokens.data(), n, h);
    ops.RmsNorm(h, w.layers[0].input_norm, n, H, eps, NormKind::kPlainW, x, xb);
    for (int i = 0; i < c.num_layers; ++i) {
      const LayerWeights& l = w.layers[i];
      // Attention: q, k, v out of the fused rows; q/k norms per head before RoPE; v has no norm
      // (one launch on CUDA).
      Project(ops, ctx, i, LoraTarget::kAttnQkv, x, H, l.attn.qkv, qkv, xb);
      ops.QkvPrep({.qkv = qkv, .n = n, .nh = nh, .nkv = nkv, .hd = hd, .rot_dim = c.rotary_dim,
                   .q_norm = &l.attn.q_norm, .k_norm = &l.attn.k_norm, .norm_kind = NormKind::kPlainW, .eps = eps,
                   .pos = pos, .inv_freq = c.inv_freq.data(), .attn_scale = c.rope_attention_scaling, .q = q,
                   .gate = nullptr, .k = k, .v = v});
      CachedAttention(ops, ctx, i, q, k, v, c, a);
      Project(ops, ctx, i, LoraTarget::kAttnO, a, q_w, l.attn.o, y);
      // MLP.
      ops.AddRmsNorm(h, y, l.post_norm, n, H, eps, NormKind::kPlainW, x, xb);
      Mlp(ops, ctx, i, l, x, H, c.intermediate_size, y, xb);
      ops.AddRmsNorm(h, y, i + 1 < c.num_layers ? w.layers[i + 1].input_norm : w.final_norm, n, H, eps,
                     NormKind::kPlainW, x, i + 1 < c.num_layers ? xb : nullptr);
    }
    OutputHead(ops, ctx, w.head(), x, H, logits);
  }
};

// A layer's weights: plain (w) norms, attention with q_proj of heads x head_dim, a SwiGLU MLP.
void Qwen3Layer(const ModelConfig& c, const std::string& p, LayerWeights& l, LayerTable& t) {
  AddLayerNorms(c, p, /*norm_identity=*/1.0f, l, t);
  AddAttention(c, p, int64_t{c.num_heads} * c.head_dim, /*norm_identity=*/1.0f, l, t);
  AddSwiGluMlp(c, p, l, t);
}

std::unique_ptr<Model> MakeQwen3(ModelConfig c, ModelWeights w) {
  return std::unique_ptr<Model>(new Qwen3(std::move(c), std::move(w)));
}

}  // namespace

const Architecture& Qwen3Architecture() {
  static const Architecture a{
      .config = {.name = "qwen3",
                 .spellings = {{.model_type = "qwen3", .weight_prefix = "model.", .text_config = false}},
                 .rope_theta = 1e4,
                 .partial_rotary_factor = 1.0,
                 .linear_attention = std::nullopt},
      .norm_identity = 1.0f,
      .layer_table = Qwen3Layer,
      .make = MakeQwen3,
  };
  return a;
}

}  // namespace graft

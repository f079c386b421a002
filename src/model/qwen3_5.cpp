// Qwen3.5 (hybrid) forward pass: qwen-architectures.md §6. Layers are either Gated DeltaNet
// (linear attention with a causal conv and a recurrent state) or gated full attention with
// partial RoPE; every layer has a SwiGLU MLP; residual, final and q/k norms are (1+w) norms.
#include "model/blocks.h"
#include "model/model.h"

namespace graft {
namespace {

using Buf = std::vector<float>;

class Qwen3_5 final : public Model {
 public:
  Qwen3_5(ModelConfig c, ModelWeights w) : Model(std::move(c), std::move(w)) {}

 protected:
  void Run(Ops& ops, const StepContext& ctx, float* logits) const override {
    const auto& c = config_;
    const int n = ctx.batch.rows();
    const int H = c.hidden_size;
    const float eps = static_cast<float>(c.rms_norm_eps);
    Buf h(static_cast<size_t>(n) * H), x(h.size()), y(h.size());

    ops.Embed(weights_.embed, ctx.batch.tokens.data(), n, h.data());
    for (int i = 0; i < c.num_layers; ++i) {
      const LayerWeights& l = weights_.layers[i];
      ops.RmsNorm(h.data(), l.input_norm, n, H, eps, NormKind::kOnePlusW, x.data());
      if (l.kind == LayerKind::kLinearAttention) GatedDeltaNet(ops, ctx, i, l.gdn, x.data(), y.data());
      else GatedAttention(ops, ctx, i, l.attn, x.data(), y.data());
      ops.Add(h.data(), y.data(), static_cast<int64_t>(n) * H);
      ops.RmsNorm(h.data(), l.post_norm, n, H, eps, NormKind::kOnePlusW, x.data());
      Mlp(ops, ctx, i, l, x.data(), H, c.intermediate_size, y.data());
      ops.Add(h.data(), y.data(), static_cast<int64_t>(n) * H);
    }
    ops.RmsNorm(h.data(), weights_.final_norm, n, H, eps, NormKind::kOnePlusW, x.data());
    OutputHead(ops, ctx, weights_.head(), x.data(), H, logits);
  }

 private:
  // q_proj rows hold [q_h | gate_h] per head; out = o_proj(attention(q, k, v) * sigmoid(gate)).
  void GatedAttention(Ops& ops, const StepContext& ctx, int layer, const AttentionWeights& w, const float* x,
                      float* out) const {
    const auto& c = config_;
    const int n = ctx.batch.rows();
    const int H = c.hidden_size, hd = c.head_dim, nh = c.num_heads, nkv = c.num_kv_heads;
    const int q_w = nh * hd, kv_w = nkv * hd, qg_w = 2 * q_w, qkv_w = qg_w + 2 * kv_w;
    const float eps = static_cast<float>(c.rms_norm_eps);
    Buf qkv(static_cast<size_t>(n) * qkv_w), q(static_cast<size_t>(n) * q_w), gate(q.size()), a(q.size()),
        k(static_cast<size_t>(n) * kv_w), v(k.size());
    ops.MatMul(x, n, w.qkv, qkv.data(), true);
    AddLora(ops, ctx, layer, LoraTarget::kAttnQkv, x, H, qkv.data(), qkv_w);
    for (int head = 0; head < nh; ++head) {
      ops.CopyBlock(qkv.data(), qkv_w, head * 2 * hd, q.data(), q_w, head * hd, n, hd);
      ops.CopyBlock(qkv.data(), qkv_w, head * 2 * hd + hd, gate.data(), q_w, head * hd, n, hd);
    }
    ops.CopyBlock(qkv.data(), qkv_w, qg_w, k.data(), kv_w, 0, n, kv_w);
    ops.CopyBlock(qkv.data(), qkv_w, qg_w + kv_w, v.data(), kv_w, 0, n, kv_w);
    ops.RmsNorm(q.data(), w.q_norm, static_cast<int64_t>(n) * nh, hd, eps, NormKind::kOnePlusW, q.data());
    ops.RmsNorm(k.data(), w.k_norm, static_cast<int64_t>(n) * nkv, hd, eps, NormKind::kOnePlusW, k.data());
    ops.Rope(q.data(), n, nh, hd, c.rotary_dim, ctx.pos.data(), c.inv_freq.data(), c.rope_attention_scaling);
    ops.Rope(k.data(), n, nkv, hd, c.rotary_dim, ctx.pos.data(), c.inv_freq.data(), c.rope_attention_scaling);
    CachedAttention(ops, ctx, layer, q.data(), k.data(), v.data(), c, a.data());
    ops.SigmoidGateMul(a.data(), gate.data(), q_w, n, q_w);
    ops.MatMul(a.data(), n, w.o, out, true);
    AddLora(ops, ctx, layer, LoraTarget::kAttnO, a.data(), q_w, out, H);
  }

  // in_proj rows: [q k v (conv_dim) | z (value_dim) | b (Hv) | a (Hv)]. The conv and the delta
  // rule run per sequence, each on its own state.
  void GatedDeltaNet(Ops& ops, const StepContext& ctx, int layer, const GdnWeights& w, const float* x,
                     float* out) const {
    const auto& c = config_;
    const auto& b = ctx.batch;
    const int n = b.rows();
    const int H = c.hidden_size, hv = c.linear_num_value_heads, conv_dim = c.conv_dim(), value_dim = c.value_dim();
    const int proj_w = conv_dim + value_dim + 2 * hv;
    Buf proj(static_cast<size_t>(n) * proj_w), mixed(static_cast<size_t>(n) * conv_dim),
        beta(static_cast<size_t>(n) * hv), g(beta.size()), core(static_cast<size_t>(n) * value_dim),
        normed(core.size());
    ops.MatMul(x, n, w.in_proj, proj.data(), true);
    AddLora(ops, ctx, layer, LoraTarget::kGdnIn, x, H, proj.data(), proj_w);
    ops.GdnGates(proj.data(), proj_w, conv_dim + value_dim, conv_dim + value_dim + hv, n, hv, w.a_log, w.dt_bias,
                 beta.data(), g.data());
    for (int s = 0; s < b.num_seqs(); ++s) {
      const int r0 = b.seq_start[s], ns = b.seq_start[s + 1] - r0;
      GdnState& state = b.states[s]->pool->state(b.states[s]->slot, layer);
      ops.CausalConvSilu(proj.data() + int64_t{r0} * proj_w, proj_w, ns, conv_dim, w.conv, state.conv.data(),
                         mixed.data() + int64_t{r0} * conv_dim);
      GdnCoreArgs a{};
      a.qkv = mixed.data() + int64_t{r0} * conv_dim;
      a.beta = beta.data() + int64_t{r0} * hv;
      a.g = g.data() + int64_t{r0} * hv;
      a.n = ns;
      a.hk = c.linear_num_key_heads;
      a.hv = hv;
      a.dk = c.linear_key_head_dim;
      a.dv = c.linear_value_head_dim;
      a.state = &state;
      a.out = core.data() + int64_t{r0} * value_dim;
      ops.GdnCore(a);
    }
    ops.GatedRmsNorm(core.data(), proj.data(), proj_w, conv_dim, n, hv, c.linear_value_head_dim, w.norm,
                     static_cast<float>(c.rms_norm_eps), normed.data());
    ops.MatMul(normed.data(), n, w.out, out, true);
    AddLora(ops, ctx, layer, LoraTarget::kGdnOut, normed.data(), value_dim, out, H);
  }
};

}  // namespace

std::unique_ptr<Model> MakeQwen3_5(ModelConfig c, ModelWeights w) {
  return std::unique_ptr<Model>(new Qwen3_5(std::move(c), std::move(w)));
}

}  // namespace graft

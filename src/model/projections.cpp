#include "model/projections.h"

namespace graft {

std::vector<Projection> LayerProjections(const ModelConfig& c, LayerKind kind) {
  const int64_t H = c.hidden_size, I = c.intermediate_size;
  std::vector<Projection> p;
  if (kind == LayerKind::kFullAttention) {
    const int64_t q = c.arch == Arch::kQwen3_5 ? int64_t{c.num_heads} * 2 * c.head_dim : int64_t{c.num_heads} * c.head_dim;
    const int64_t kv = int64_t{c.num_kv_heads} * c.head_dim;
    p.push_back({"self_attn.q_proj", LoraTarget::kAttnQkv, 0, q, H});
    p.push_back({"self_attn.k_proj", LoraTarget::kAttnQkv, q, kv, H});
    p.push_back({"self_attn.v_proj", LoraTarget::kAttnQkv, q + kv, kv, H});
    p.push_back({"self_attn.o_proj", LoraTarget::kAttnO, 0, H, int64_t{c.num_heads} * c.head_dim});
  } else {
    const int64_t cd = c.conv_dim(), vd = c.value_dim(), hv = c.linear_num_value_heads;
    p.push_back({"linear_attn.in_proj_qkv", LoraTarget::kGdnIn, 0, cd, H});
    p.push_back({"linear_attn.in_proj_z", LoraTarget::kGdnIn, cd, vd, H});
    p.push_back({"linear_attn.in_proj_b", LoraTarget::kGdnIn, cd + vd, hv, H});
    p.push_back({"linear_attn.in_proj_a", LoraTarget::kGdnIn, cd + vd + hv, hv, H});
    p.push_back({"linear_attn.out_proj", LoraTarget::kGdnOut, 0, H, vd});
  }
  p.push_back({"mlp.gate_proj", LoraTarget::kMlpGateUp, 0, I, H});
  p.push_back({"mlp.up_proj", LoraTarget::kMlpGateUp, I, I, H});
  p.push_back({"mlp.down_proj", LoraTarget::kMlpDown, 0, H, I});
  return p;
}

const Weight& FusedWeight(const LayerWeights& l, LoraTarget t) {
  switch (t) {
    case LoraTarget::kAttnQkv: return l.attn.qkv;
    case LoraTarget::kAttnO: return l.attn.o;
    case LoraTarget::kGdnIn: return l.gdn.in_proj;
    case LoraTarget::kGdnOut: return l.gdn.out;
    case LoraTarget::kMlpGateUp: return l.gate_up;
    case LoraTarget::kMlpDown:
    case LoraTarget::kCount: break;
  }
  return l.down;
}

}  // namespace graft

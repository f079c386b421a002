#include "model/layer_table.h"

namespace graft {
namespace {

using V = std::vector<int64_t>;

TableEntry ProjectionRow(Weight* slot, LoraTarget target, std::vector<TablePart> parts) {
  return {slot, std::move(parts), /*projection=*/true, target};
}

TableEntry Vector(Weight* slot, std::string name, int64_t size, float identity) {
  return {slot, {{std::move(name), V{size}}}, false, LoraTarget::kCount, identity};
}

}  // namespace

void AddLayerNorms(const ModelConfig& c, const std::string& p, float norm_identity, LayerWeights& l, LayerTable& t) {
  t.push_back(Vector(&l.input_norm, p + "input_layernorm.weight", c.hidden_size, norm_identity));
  t.push_back(Vector(&l.post_norm, p + "post_attention_layernorm.weight", c.hidden_size, norm_identity));
}

void AddAttention(const ModelConfig& c, const std::string& p, int64_t q_rows, float norm_identity, LayerWeights& l,
                  LayerTable& t) {
  const int64_t H = c.hidden_size, hd = c.head_dim, nh = c.num_heads, nkv = c.num_kv_heads;
  t.push_back(ProjectionRow(&l.attn.qkv, LoraTarget::kAttnQkv,
                         {{p + "self_attn.q_proj.weight", V{q_rows, H}},
                          {p + "self_attn.k_proj.weight", V{nkv * hd, H}},
                          {p + "self_attn.v_proj.weight", V{nkv * hd, H}}}));
  t.push_back(ProjectionRow(&l.attn.o, LoraTarget::kAttnO, {{p + "self_attn.o_proj.weight", V{H, nh * hd}}}));
  t.push_back(Vector(&l.attn.q_norm, p + "self_attn.q_norm.weight", hd, norm_identity));
  t.push_back(Vector(&l.attn.k_norm, p + "self_attn.k_norm.weight", hd, norm_identity));
}

void AddGatedDeltaNet(const ModelConfig& c, const std::string& p, LayerWeights& l, LayerTable& t) {
  const int64_t H = c.hidden_size, hv = c.linear_num_value_heads;
  t.push_back(ProjectionRow(&l.gdn.in_proj, LoraTarget::kGdnIn,
                         {{p + "linear_attn.in_proj_qkv.weight", V{c.conv_dim(), H}},
                          {p + "linear_attn.in_proj_z.weight", V{c.value_dim(), H}},
                          {p + "linear_attn.in_proj_b.weight", V{hv, H}},
                          {p + "linear_attn.in_proj_a.weight", V{hv, H}}}));
  t.push_back({&l.gdn.conv, {{p + "linear_attn.conv1d.weight", V{c.conv_dim(), 1, c.linear_conv_kernel}}}});
  t.push_back(Vector(&l.gdn.a_log, p + "linear_attn.A_log", hv, 0.0f));
  t.push_back(Vector(&l.gdn.dt_bias, p + "linear_attn.dt_bias", hv, 0.0f));
  t.push_back(Vector(&l.gdn.norm, p + "linear_attn.norm.weight", c.linear_value_head_dim, 1.0f));  // scales by w
  t.push_back(ProjectionRow(&l.gdn.out, LoraTarget::kGdnOut, {{p + "linear_attn.out_proj.weight", V{H, c.value_dim()}}}));
}

void AddSwiGluMlp(const ModelConfig& c, const std::string& p, LayerWeights& l, LayerTable& t) {
  const int64_t H = c.hidden_size, I = c.intermediate_size;
  t.push_back(ProjectionRow(&l.gate_up, LoraTarget::kMlpGateUp,
                         {{p + "mlp.gate_proj.weight", V{I, H}}, {p + "mlp.up_proj.weight", V{I, H}}}));
  t.push_back(ProjectionRow(&l.down, LoraTarget::kMlpDown, {{p + "mlp.down_proj.weight", V{H, I}}}));
}

}  // namespace graft

#include "model/projections.h"

#include "model/architecture.h"
#include "model/layer_table.h"

namespace graft {

std::vector<Projection> LayerProjections(const ModelConfig& c, LayerKind kind) {
  // The architecture's rows for a scratch layer of this kind: each projection row's parts, in
  // order, are its projections, stacked in the fused slot.
  LayerWeights scratch;
  scratch.kind = kind;
  LayerTable rows;
  const std::string prefix = "layers.0.";
  ArchitectureOf(c).layer_table(c, prefix, scratch, rows);
  std::vector<Projection> p;
  for (const TableEntry& e : rows) {
    if (!e.projection || e.target == LoraTarget::kCount) continue;
    int64_t offset = 0;
    for (const TablePart& part : e.parts) {
      // "layers.0.self_attn.q_proj.weight" -> "self_attn.q_proj"
      const std::string path = part.name.substr(prefix.size(), part.name.size() - prefix.size() - 7);
      p.push_back({path, e.target, offset, part.shape[0], part.shape[1]});
      offset += part.shape[0];
    }
  }
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

// A resident LoRA adapter in the model's own layout, and the set of adapters a step may use.
//
// Each LoRA module targets one checkpoint projection; since the model fuses projections
// (q|k|v, gate|up, in_proj_qkv|z|b|a), a module is filed under the fused slot it feeds and
// writes its N rows at `row_offset` of that slot's output.
//
// Arithmetic (Ops::LoraAdd): for a row x that selects this adapter,
//   t = r(x · Aᵀ)            [rank]   fp32 sums over K, rounded to the activation dtype
//   u = r(t · Bᵀ)            [N]      fp32 sums over rank, rounded
//   y = r(y_base + r(u · s))          s = the module's scale; y_base is the base matmul's output
// which is exactly PEFT's `result + lora_B(lora_A(x)) * scaling` in both bf16 and float32.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "model/weights.h"

namespace graft {

// The fused weight slots a LoRA module can feed.
enum class LoraTarget : int { kAttnQkv = 0, kAttnO, kGdnIn, kGdnOut, kMlpGateUp, kMlpDown, kCount };
const char* LoraTargetName(LoraTarget t);

struct LoraModule {
  std::string name;     // checkpoint projection, e.g. "layers.3.self_attn.q_proj"
  int64_t row_offset = 0;
  int rank = 0;
  float scale = 1.0f;   // alpha / rank, or alpha / sqrt(rank) with rsLoRA
  Weight a;             // [rank, K]
  Weight b;             // [N, rank]
};

struct LoraLayer {
  std::array<std::vector<LoraModule>, static_cast<size_t>(LoraTarget::kCount)> targets;
  const std::vector<LoraModule>& at(LoraTarget t) const { return targets[static_cast<size_t>(t)]; }
};

struct LoraAdapter {
  std::string name;
  std::string dir;
  std::vector<LoraLayer> layers;  // [num_layers]
  std::string base_identity;      // from graft_manifest.json, "" when none
  int num_modules() const;
  int min_rank() const;
  int max_rank() const;
  int64_t bytes() const;
};

// Adapters a step can select, by slot: slots[0] is the base (nullptr).
struct AdapterSet {
  std::vector<const LoraAdapter*> slots{nullptr};
};

}  // namespace graft

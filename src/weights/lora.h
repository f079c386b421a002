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
#include <memory>
#include <string>
#include <vector>

#include "weights/exact.h"
#include "weights/weights.h"
#include "util/status.h"

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
  // Exact mode (weights/exact.h): the residual that, after the reconstruction from the base
  // and a, b (scale not applied), gives back the merged release's rows bit for bit.
  std::shared_ptr<const IndexedResidual> exact;
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
  bool has_exact = false;         // every module carries its exact residual (graft_exact.safetensors)
  bool default_exact = false;     // graft_manifest.json "default_mode": "exact"
  bool factors_rounded = false;   // float32 / float16 factors rounded to bf16 at load (LoraLoadOptions)
  int num_modules() const;
  std::string factor_storage() const;  // "bf16", "float32", "bf16, rounded from the checkpoint's float factors at load", ...
  int min_rank() const;
  int max_rank() const;
  int64_t bytes() const;        // the factors (LoRA mode; exact mode uses them too)
  int64_t exact_bytes() const;  // the residuals and their chunk tables (exact mode only)
};

// Adapters a step can select, by slot: slots[0] is the base (nullptr). A slot serves its
// adapter either as LoRA (the factors' deltas added to the base projection) or, when its
// `exact` flag is set, exactly: the rows that select it run on the merged projections
// reconstructed from the base (Ops::ExactWeight). An adapter may sit in two slots, one per mode.
struct AdapterSet {
  std::vector<const LoraAdapter*> slots{nullptr};
  std::vector<uint8_t> exact;  // [slots] or shorter (missing = LoRA)
  bool is_exact(size_t slot) const { return slot < exact.size() && exact[slot] != 0; }
  // Appends a slot and returns its number.
  int32_t Add(const LoraAdapter* a, bool exact_mode) {
    exact.resize(slots.size(), 0);
    slots.push_back(a);
    exact.push_back(exact_mode ? 1 : 0);
    return static_cast<int32_t>(slots.size() - 1);
  }
};

// A request's "mode": "", "lora" or "exact"; anything else is an error quoting it.
Status CheckMode(const std::string& mode);

// The slots one served model is reachable through, and which one a request's mode selects.
// The base: lora = exact = 0 (the base is its own exact arithmetic).
struct AdapterSlots {
  int32_t lora = 0;
  int32_t exact = -1;  // -1: no exact representation
  bool default_exact = false;
  // mode: "lora", "exact" or "" (the default). The error names `model` and what it offers.
  Result<int32_t> Select(const std::string& mode, const std::string& model) const;
};

}  // namespace graft

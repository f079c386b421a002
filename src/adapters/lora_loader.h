// Loads and validates a PEFT LoRA adapter (adapter_config.json + adapter_model.safetensors)
// for one base model, before anything uses it.
//
// Checks, each problem reported (all of them, not only the first): every tensor key maps to a
// known layer and projection of this architecture; every module has lora_A and lora_B and
// nothing else; the set of modules equals what adapter_config.json targets (nothing extra,
// nothing missing); A is [rank, K] and B is [N, rank] for the projection's widths, with the
// rank the config gives the module; dtypes are F32/BF16/F16; every value is finite. When
// graft_manifest.json names a base identity and it differs from the loaded base's, the
// adapter is refused unless `force`. graft_manifest.json's "default_mode" ("lora" or "exact")
// says how requests that name no mode are served.
#pragma once

#include <functional>
#include <string>

#include "weights/lora.h"
#include "io/model_config.h"
#include "util/status.h"

namespace graft {

struct LoraLoadOptions {
  std::string name;  // how requests will name it
  bool force = false;
  // Returns the loaded base's identity (computed only when a manifest asks for it).
  std::function<Result<std::string>()> base_identity;
  // Also load the exact representation (graft_exact.safetensors) when the manifest lists one:
  // every module's residual, validated and indexed. Refused when the manifest says other
  // tensors differ too (exact mode reproduces projections only).
  bool load_exact = true;
  // Round float32 / float16 factors to bf16 once, here (round to nearest even), so that bf16
  // serving runs them as bf16 products (--adapter-dtype bfloat16, the default with bf16
  // activations). An adapter with an exact representation keeps its factors as extracted: its
  // reconstruction needs them. LoraAdapter::factors_rounded says whether it happened.
  bool bf16_factors = false;
};

Result<LoraAdapter> LoadLoraAdapter(const std::string& dir, const ModelConfig& cfg, const LoraLoadOptions& opt);

}  // namespace graft

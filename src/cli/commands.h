// Subcommand wiring: each Add*Command registers its flags on `app`; when that subcommand is
// chosen, CLI11 stores the work to do in `run` (called by main after parsing).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "weights/lora.h"
#include "backend/ops.h"
#include "engine/engine.h"
#include "engine/pool_plan.h"
#include "model/model.h"
#include "util/status.h"

namespace graft::cli {

using Runner = std::function<Status()>;

// Flags every model-running command shares.
struct ModelSettings {
  std::string model;
  std::string adapter;  // a PEFT adapter directory, applied to every row ("" = none)
  std::string adapter_mode;  // "lora", "exact" or "" (the adapter manifest's default)
  std::string exact_base;    // bf16 checkpoint for exact mode on a base not stored in bf16 ("" = none)
  bool force = false;   // load an adapter whose manifest names another base
  std::string device = "cpu";
  std::string dtype = "bfloat16";
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  double gpu_memory_gib = 0;  // --device cuda: the device memory graft may use (0: 90% of the free memory)
  int gpu_scratch_mib = 1024; // --device cuda: the activation arena, inside gpu_memory
  bool op_profile = false;    // --device cuda: time every op (graft bench --op-profile)
  std::string gemm = "graft"; // --device cuda: "graft" (batch-invariant kernels) or "cublas" (to measure their cost)
  std::string adapter_dtype = "bfloat16";  // --adapter-dtype: adapter factors in bf16 mode
  // Adapter factors rounded to bf16 at load: --adapter-dtype bfloat16 with bf16 activations.
  bool bf16_factors() const { return adapter_dtype == "bfloat16" && dtype == "bfloat16"; }
};
// --adapter-dtype (commands that load adapters).
void AddAdapterDtypeFlag(CLI::App* cmd, ModelSettings& s);
// The decision record pieces a backend runs by default when no chat runs (--decision-prefill-chunk):
// 256 tokens on cpu, 1024 on cuda (~0.12 s of a 27B model on an H100).
inline int DefaultDecisionPrefillChunk(const std::string& device) { return device == "cpu" ? 256 : 1024; }
// The engine's pool sizes (kv_token_budget, decision_kv_tokens, max_running): the asked values,
// and where they are 0, from what the backend's memory budget leaves (engine/pool_plan.h; a
// device) or EngineConfig's fixed defaults (the CPU). Logs the plan.
Status SizeEnginePools(const Model& model, Ops& ops, const PoolAsk& ask, EngineConfig* ec);
// Backend memory one run-time adapter slot needs: a max_rank adapter on every projection of every
// layer, its factors as `ops` stores them (bf16_factors: rounded to bf16 at load; else the widest
// form), with room for each copy's alignment. 0 where the backend reads the host's factors.
int64_t RuntimeAdapterSlotBytes(const ModelConfig& c, int max_rank, bool bf16_factors, const Ops& ops);
void AddModelFlags(CLI::App* cmd, ModelSettings& s);
// --device, --dtype, --threads, --gpu-memory, --gpu-scratch, --gemm.
void AddBackendFlags(CLI::App* cmd, ModelSettings& s);
// The backend the settings name, with the model's weights and the adapters already on it
// (CUDA: uploaded, the memory table logged) and the exact-mode scratch reserved when a slot
// is exact.
Status MakeOps(const ModelSettings& s, const Model& model, const AdapterSet& adapters, std::unique_ptr<Ops>* ops);

// --exact-base: loads the resident bf16 copy of the projections the exact slots touch
// (Model::LoadExactBase) after checking its identity against the adapters' manifests (unless
// --force); a no-op without the flag or when the served base already holds them in bf16.
Status LoadExactBase(const ModelSettings& s, Model& model, const AdapterSet& adapters);

// Decode steps replayed from CUDA graphs (engine/decode_graph.h) when `ops` is the CUDA
// backend and `enabled`; otherwise both members are empty and steps run eagerly. The closures
// share the graph cache, which lives as long as either of them.
struct DecodeGraphs {
  StepRunner run;                        // for Engine and RunBench
  std::function<std::string()> summary;  // "decode graphs: N captured, ..."
};
DecodeGraphs MakeDecodeGraphs(const Model& model, Ops& ops, bool enabled);
std::string DefaultCacheDir();

// A loaded model with the optional adapter of ModelSettings: slot 1 serves it as LoRA and,
// when it has an exact representation, slot 2 exactly. Logs a memory summary.
struct LoadedModel {
  std::unique_ptr<Model> model;
  std::unique_ptr<LoraAdapter> adapter;
  AdapterSet adapters;
  AdapterSlots slots;  // the adapter's slots (the base's when none)
  int32_t slot = 0;    // the slot --adapter-mode (or the manifest's default) selects
};
Result<LoadedModel> LoadModelAndAdapter(const ModelSettings& s);

void AddLogitsCommand(CLI::App& app, Runner& run);
void AddInfoCommand(CLI::App& app, Runner& run);
void AddCompareLogitsCommand(CLI::App& app, Runner& run);
void AddTokenizeCommand(CLI::App& app, Runner& run);
void AddGenerateCommand(CLI::App& app, Runner& run);
void AddAdapterCommand(CLI::App& app, Runner& run);
void AddDecideCommand(CLI::App& app, Runner& run);
void AddServeCommand(CLI::App& app, Runner& run);
void AddGateCommand(CLI::App& app, Runner& run);
void AddBenchCommand(CLI::App& app, Runner& run);
void AddQuantizeCommand(CLI::App& app, Runner& run);

}  // namespace graft::cli

// AdapterRegistry: adapters loaded and unloaded while the server runs (vLLM's
// /v1/load_lora_adapter and /v1/unload_lora_adapter; graft serve --allow-runtime-adapters).
//
// Slots are reserved when the server starts (--max-adapters of them, empty in the engine's
// AdapterSet), so a load takes a free one and allocates no device memory on the request path;
// adapters above --max-adapter-rank are refused. A load reads and validates the adapter exactly
// as --adapter does at start-up (LoadLoraAdapter: every problem named with the file), serves it in
// LoRA mode only (an exact representation needs scratch sized at start-up: it is not read, and a
// request for mode "exact" on the adapter is a 400 naming the modes it has), and hands it to the
// engine between two steps. An unload closes the slot to new work, waits for the
// requests and decisions on it to finish, then frees the slot and the adapter; other rows never
// see either. Thread-safe: loads and unloads run one at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "io/model_config.h"
#include "server/api.h"
#include "util/status.h"
#include "weights/lora.h"

namespace graft {

struct RuntimeAdapterConfig {
  std::vector<int32_t> slots;  // the engine's empty slots reserved for them (--max-adapters)
  int max_rank = 0;            // --max-adapter-rank
  bool force = false;          // --force: load adapters whose manifest names another base
  bool bf16_factors = false;   // --adapter-dtype bfloat16 with bf16 activations (LoraLoadOptions)
  std::function<Result<std::string>()> base_identity;  // the loaded base's identity (LoraLoadOptions)
};

class AdapterRegistry {
 public:
  AdapterRegistry(Engine& engine, const ModelConfig& model, RuntimeAdapterConfig cfg);
  ~AdapterRegistry();
  // Loads `dir` as `name` into a free slot; what the served list gets. kResourceExhausted when
  // every reserved slot is taken, kInvalidArgument for an adapter that fails validation or is over
  // the rank limit (the message names the file and the reason).
  Result<ServedAdapter> Load(const std::string& name, const std::string& dir);
  // Unloads the adapter in `slot` (one Load returned), waiting for the work on it.
  Status Unload(int32_t slot);
  int capacity() const { return static_cast<int>(cfg_.slots.size()); }
  int max_rank() const { return cfg_.max_rank; }

 private:
  Engine& engine_;
  const ModelConfig& model_;
  RuntimeAdapterConfig cfg_;
  std::mutex mu_;  // one load or unload at a time
  std::map<int32_t, std::unique_ptr<LoraAdapter>> loaded_;  // by slot
};

}  // namespace graft

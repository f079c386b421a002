#include "server/adapter_registry.h"

#include <fmt/core.h>

#include <filesystem>

#include "adapters/lora_loader.h"

namespace graft {

AdapterRegistry::AdapterRegistry(Engine& engine, const ModelConfig& model, RuntimeAdapterConfig cfg)
    : engine_(engine), model_(model), cfg_(std::move(cfg)) {}

AdapterRegistry::~AdapterRegistry() = default;

Result<ServedAdapter> AdapterRegistry::Load(const std::string& name, const std::string& dir) {
  std::lock_guard<std::mutex> l(mu_);
  int32_t slot = -1;
  for (int32_t s : cfg_.slots) {
    if (!loaded_.count(s)) {
      slot = s;
      break;
    }
  }
  if (slot < 0) {
    return ResourceExhausted(fmt::format("all {} run-time adapter slots are taken (--max-adapters); unload one first",
                                         cfg_.slots.size()));
  }
  if (!std::filesystem::is_directory(dir)) return InvalidArgument(fmt::format("'{}' is not a directory", dir));
  LoraLoadOptions opt;
  opt.name = name;
  opt.force = cfg_.force;
  opt.base_identity = cfg_.base_identity;
  opt.load_exact = false;
  opt.bf16_factors = cfg_.bf16_factors;
  GRAFT_ASSIGN_OR_RETURN(LoraAdapter a, LoadLoraAdapter(dir, model_, opt));
  if (a.max_rank() > cfg_.max_rank) {
    return InvalidArgument(fmt::format("{}: rank {} is over this server's --max-adapter-rank {}", dir, a.max_rank(),
                                       cfg_.max_rank));
  }
  auto owned = std::make_unique<LoraAdapter>(std::move(a));
  GRAFT_RETURN_IF_ERROR(engine_.AttachAdapter(slot, owned.get()));
  ServedAdapter sa;
  sa.dir = dir;
  sa.slots.lora = slot;
  sa.runtime_slot = slot;
  sa.lora_bytes = owned->bytes();
  loaded_[slot] = std::move(owned);
  return sa;
}

Status AdapterRegistry::Unload(int32_t slot) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = loaded_.find(slot);
  if (it == loaded_.end()) return InvalidArgument(fmt::format("slot {} holds no run-time adapter", slot));
  GRAFT_RETURN_IF_ERROR(engine_.DetachAdapter(slot));
  loaded_.erase(it);  // the engine no longer points at it
  return Status::Ok();
}

}  // namespace graft

#include <cstdlib>

#include <fmt/core.h>
#include <spdlog/spdlog.h>

#include "adapters/lora_loader.h"
#include "backend/cpu/cpu_ops.h"
#include "io/checkpoint.h"
#include "io/identity.h"
#include "cli/commands.h"

namespace graft::cli {

void AddModelFlags(CLI::App* cmd, ModelSettings& s) {
  cmd->add_option("--model", s.model, "Model directory (config.json + safetensors)")->required()->check(CLI::ExistingDirectory);
  cmd->add_option("--device", s.device, "Backend: cpu (reference) or cuda")->capture_default_str()->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--dtype", s.dtype, "Activation dtype: bfloat16 (as the checkpoint runs) or float32")->capture_default_str()
      ->check(CLI::IsMember({"float32", "bfloat16"}));
  cmd->add_option("--adapter", s.adapter, "A PEFT LoRA adapter directory to apply")->check(CLI::ExistingDirectory);
  cmd->add_flag("--force", s.force, "Load the adapter even if its manifest names a different base");
  cmd->add_option("--threads", s.threads, "CPU threads")->capture_default_str()->check(CLI::Range(1, 1024));
}

Status MakeOps(const ModelSettings& s, std::unique_ptr<Ops>* ops) {
  if (s.device == "cuda") {
    return Unsupported("--device cuda: the CUDA backend does not run whole models yet; use --device cpu");
  }
  *ops = std::make_unique<CpuOps>(s.dtype == "float32" ? ActDtype::kF32 : ActDtype::kBF16, s.threads);
  return Status::Ok();
}

Result<LoadedModel> LoadModelAndAdapter(const ModelSettings& s) {
  LoadedModel lm;
  GRAFT_ASSIGN_OR_RETURN(lm.model, LoadModel(s.model));
  spdlog::info("model: {} ({:.1f} MB of weights)", lm.model->config().Summary(), lm.model->weights().bytes() / 1e6);
  if (s.adapter.empty()) return lm;
  LoraLoadOptions opt;
  opt.name = s.adapter;
  opt.force = s.force;
  opt.base_identity = [&s]() -> Result<std::string> {
    GRAFT_ASSIGN_OR_RETURN(Checkpoint ck, Checkpoint::Open(s.model));
    GRAFT_ASSIGN_OR_RETURN(IdentityResult id, CachedIdentity(ck, DefaultCacheDir()));
    return id.identity;
  };
  GRAFT_ASSIGN_OR_RETURN(LoraAdapter ad, LoadLoraAdapter(s.adapter, lm.model->config(), opt));
  lm.adapter = std::make_unique<LoraAdapter>(std::move(ad));
  lm.adapters.slots.push_back(lm.adapter.get());
  lm.slot = 1;
  spdlog::info("adapter {}: {} modules, rank {}..{}, {:.2f} MB", s.adapter, lm.adapter->num_modules(),
               lm.adapter->min_rank(), lm.adapter->max_rank(), lm.adapter->bytes() / 1e6);
  return lm;
}

std::string DefaultCacheDir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/graft";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/graft";
  return "";
}

}  // namespace graft::cli

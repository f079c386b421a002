#include <cstdlib>

#include "backend/cpu/cpu_ops.h"
#include "cli/commands.h"

namespace graft::cli {

void AddModelFlags(CLI::App* cmd, ModelSettings& s) {
  cmd->add_option("--model", s.model, "Model directory (config.json + safetensors)")->required()->check(CLI::ExistingDirectory);
  cmd->add_option("--device", s.device, "Backend: cpu (reference) or cuda")->capture_default_str()->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--dtype", s.dtype, "Activation dtype: bfloat16 (as the checkpoint runs) or float32")->capture_default_str()
      ->check(CLI::IsMember({"float32", "bfloat16"}));
  cmd->add_option("--threads", s.threads, "CPU threads")->capture_default_str()->check(CLI::Range(1, 1024));
}

Status MakeOps(const ModelSettings& s, std::unique_ptr<Ops>* ops) {
  if (s.device == "cuda") {
    return Unsupported("--device cuda: the CUDA backend does not run whole models yet; use --device cpu");
  }
  *ops = std::make_unique<CpuOps>(s.dtype == "float32" ? ActDtype::kF32 : ActDtype::kBF16, s.threads);
  return Status::Ok();
}

std::string DefaultCacheDir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/graft";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/graft";
  return "";
}

}  // namespace graft::cli

// graft: one binary, subcommands. Wiring only: each subcommand parses its flags into a
// settings struct, logs it, and calls library code that returns a Status.
#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <memory>
#include <thread>

#include "backend/cpu/cpu_ops.h"
#include "io/checkpoint.h"
#include "io/identity.h"
#include "io/model_config.h"
#include "model/model.h"
#include "tools/compare_logits.h"
#include "tools/logits.h"

namespace {

using graft::Status;

std::string DefaultCacheDir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/graft";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/graft";
  return "";
}

struct CommonSettings {
  std::string model;
  std::string device = "cpu";
  std::string dtype = "bfloat16";
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
};

Status MakeOps(const CommonSettings& s, std::unique_ptr<graft::Ops>* ops) {
  if (s.device == "cuda") {
    return graft::Unsupported("--device cuda: the CUDA backend does not run whole models yet; use --device cpu");
  }
  const auto act = s.dtype == "float32" ? graft::ActDtype::kF32 : graft::ActDtype::kBF16;
  *ops = std::make_unique<graft::CpuOps>(act, s.threads);
  return Status::Ok();
}

Status RunLogitsCommand(const CommonSettings& s, const graft::LogitsJob& job) {
  spdlog::info("graft logits: model {} | device {} | activations {} | threads {} | {} -> {}", s.model, s.device,
               s.dtype, s.threads, job.input, job.output);
  std::unique_ptr<graft::Ops> ops;
  GRAFT_RETURN_IF_ERROR(MakeOps(s, &ops));
  auto model = graft::LoadModel(s.model);
  if (!model.ok()) return model.status();
  spdlog::info("model: {} ({:.1f} MB of weights)", (*model)->config().Summary(), (*model)->weights().bytes() / 1e6);
  return graft::RunLogits(**model, *ops, job);
}

Status RunInfoCommand(const std::string& dir, const std::string& cache_dir) {
  GRAFT_ASSIGN_OR_RETURN(graft::ModelConfig cfg, graft::LoadModelConfig(dir));
  GRAFT_ASSIGN_OR_RETURN(graft::Checkpoint ckpt, graft::Checkpoint::Open(dir));
  GRAFT_ASSIGN_OR_RETURN(graft::IdentityResult id, graft::CachedIdentity(ckpt, cache_dir));
  fmt::print("model     {}\nconfig    {}\ntensors   {} in {} file(s), {:.1f} MB\nidentity  {}{}\n", dir,
             cfg.Summary(), ckpt.All().size(), ckpt.files().size(), ckpt.total_bytes() / 1e6, id.identity,
             id.from_cache ? " (cached)" : "");
  return Status::Ok();
}

Status RunCompareCommand(const std::string& reference, const std::string& candidate) {
  GRAFT_ASSIGN_OR_RETURN(std::vector<graft::LogitsAgreement> rows, graft::CompareLogitsFiles(reference, candidate));
  fmt::print("{:<12} {:>9} {:>14} {:>22} {:>12}\n", "sequence", "positions", "top-1 agree", "max|dlogit|/max|logit|",
             "mean KL");
  for (const auto& r : rows) {
    fmt::print("{:<12} {:>9} {:>8} {:>5.1f}% {:>22.2e} {:>12.2e}\n", r.name, r.positions,
               fmt::format("{}/{}", r.top1_same, r.positions), 100.0 * r.top1_same / std::max(r.positions, 1),
               r.max_abs_diff / std::max(r.max_abs_ref, 1e-30), r.mean_kl);
  }
  return Status::Ok();
}

void AddCommon(CLI::App* cmd, CommonSettings& s) {
  cmd->add_option("--model", s.model, "Model directory (config.json + safetensors)")->required()->check(CLI::ExistingDirectory);
  cmd->add_option("--device", s.device, "Backend: cpu (reference) or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--dtype", s.dtype, "Activation dtype: bfloat16 (as the checkpoint runs) or float32")
      ->check(CLI::IsMember({"float32", "bfloat16"}));
  cmd->add_option("--threads", s.threads, "CPU threads")->check(CLI::Range(1, 1024));
}

}  // namespace

int main(int argc, char** argv) {
  spdlog::set_pattern("%H:%M:%S.%e %^%l%$ %v");
  spdlog::set_default_logger(spdlog::stderr_color_mt("graft"));
  spdlog::set_pattern("%H:%M:%S.%e %^%l%$ %v");
  CLI::App app{"graft: serve a base language model and its fine-tunes, grafted at run time"};
  app.require_subcommand(1);

  CommonSettings common;
  graft::LogitsJob job;
  auto* logits = app.add_subcommand("logits", "Logits for every position of int32 token sequences (each from an empty cache)");
  AddCommon(logits, common);
  logits->add_option("--input", job.input, "IN.safetensors: int32 1-D token tensors under any names")
      ->required()->check(CLI::ExistingFile);
  logits->add_option("--output", job.output, "OUT.safetensors: float32 [len, vocab] logits under the same names")->required();

  std::string info_dir, cache_dir = DefaultCacheDir();
  auto* info = app.add_subcommand("info", "Print a checkpoint's configuration and identity (SHA-256, cached)");
  info->add_option("--model", info_dir, "Model directory")->required()->check(CLI::ExistingDirectory);
  info->add_option("--cache-dir", cache_dir, "Where identities are cached (empty: no cache)");

  std::string cmp_ref, cmp_cand;
  auto* compare = app.add_subcommand("compare-logits", "Compare two logits files: top-1 agreement, max |dlogit|, mean KL");
  compare->add_option("--reference", cmp_ref, "Reference logits (e.g. transformers')")->required()->check(CLI::ExistingFile);
  compare->add_option("--candidate", cmp_cand, "Candidate logits (e.g. graft logits output)")->required()->check(CLI::ExistingFile);

  CLI11_PARSE(app, argc, argv);

  Status st;
  if (*logits) st = RunLogitsCommand(common, job);
  else if (*info) st = RunInfoCommand(info_dir, cache_dir);
  else if (*compare) st = RunCompareCommand(cmp_ref, cmp_cand);
  if (!st.ok()) {
    spdlog::error("{}", st.ToString());
    return 1;
  }
  return 0;
}

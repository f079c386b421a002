// graft logits | info | compare-logits
#include <fmt/core.h>
#include <spdlog/spdlog.h>

#include "cli/commands.h"
#include "io/checkpoint.h"
#include "io/identity.h"
#include "io/weight_scan.h"
#include "io/model_config.h"
#include "model/model.h"
#include "model/quant_loader.h"
#include "tools/quantize.h"
#include "tools/compare_logits.h"
#include "tools/logits.h"

namespace graft::cli {

void AddLogitsCommand(CLI::App& app, Runner& run) {
  struct S {
    ModelSettings m;
    LogitsJob job;
  };
  auto s = std::make_shared<S>();
  auto* cmd = app.add_subcommand("logits", "Logits for every position of int32 token sequences (each from an empty cache)");
  AddModelFlags(cmd, s->m);
  cmd->add_option("--input", s->job.input, "IN.safetensors: int32 1-D token tensors under any names")
      ->required()->check(CLI::ExistingFile);
  cmd->add_option("--output", s->job.output, "OUT.safetensors: float32 [len, vocab] logits under the same names")->required();
  cmd->callback([s, &run] {
    run = [s]() -> Status {
      spdlog::info("graft logits: model {} | device {} | activations {} | threads {} | {} -> {}", s->m.model,
                   s->m.device, s->m.dtype, s->m.threads, s->job.input, s->job.output);
      GRAFT_ASSIGN_OR_RETURN(LoadedModel lm, LoadModelAndAdapter(s->m));
      std::unique_ptr<Ops> ops;
      GRAFT_RETURN_IF_ERROR(MakeOps(s->m, *lm.model, lm.adapters, &ops));
      s->job.adapter_slot = lm.slot;
      return RunLogits(*lm.model, *ops, s->job, lm.adapters);
    };
  });
}

void AddInfoCommand(CLI::App& app, Runner& run) {
  struct S {
    std::string dir, cache_dir = DefaultCacheDir();
    bool check_weights = false;
    int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  };
  auto s = std::make_shared<S>();
  auto* cmd = app.add_subcommand("info", "Print a checkpoint's configuration and identity (SHA-256, cached)");
  cmd->add_option("--model", s->dir, "Model directory")->required()->check(CLI::ExistingDirectory);
  cmd->add_option("--cache-dir", s->cache_dir, "Where identities are cached (empty: no cache)")->capture_default_str();
  cmd->add_flag("--check-weights", s->check_weights,
                "Also read every floating-point tensor for NaN and infinity (exit 1 naming them)");
  cmd->add_option("--threads", s->threads, "Threads for --check-weights")->capture_default_str()->check(CLI::Range(1, 1024));
  cmd->callback([s, &run] {
    run = [s]() -> Status {
      GRAFT_ASSIGN_OR_RETURN(ModelConfig cfg, LoadModelConfig(s->dir));
      GRAFT_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::Open(s->dir));
      GRAFT_ASSIGN_OR_RETURN(IdentityResult id, CachedIdentity(ckpt, s->cache_dir));
      GRAFT_ASSIGN_OR_RETURN(QuantScheme q, LoadQuantScheme(s->dir));
      fmt::print("model     {}\nconfig    {}\nquantized {}{}\ntensors   {} in {} file(s), {:.1f} MB\nidentity  {}{}\n",
                 s->dir, cfg.Summary(), q.Describe(),
                 q.skip.empty() ? "" : fmt::format(" ({} modules in its skip list)", q.skip.size()), ckpt.All().size(),
                 ckpt.files().size(), ckpt.total_bytes() / 1e6, id.identity, id.from_cache ? " (cached)" : "");
      if (s->check_weights) {
        const WeightScan scan = ScanNonFinite(ckpt, s->threads);
        GRAFT_RETURN_IF_ERROR(NonFiniteError(ckpt, scan));
        fmt::print("weights   all finite ({} floating-point tensors, {:.1f} MB read)\n", scan.tensors, scan.bytes / 1e6);
      }
      return Status::Ok();
    };
  });
}

void AddCompareLogitsCommand(CLI::App& app, Runner& run) {
  struct S {
    std::string reference, candidate;
  };
  auto s = std::make_shared<S>();
  auto* cmd = app.add_subcommand("compare-logits", "Compare two logits files: top-1 agreement, max |dlogit|, mean KL");
  cmd->add_option("--reference", s->reference, "Reference logits (e.g. transformers')")->required()->check(CLI::ExistingFile);
  cmd->add_option("--candidate", s->candidate, "Candidate logits (e.g. graft logits output)")->required()->check(CLI::ExistingFile);
  cmd->callback([s, &run] {
    run = [s]() -> Status {
      GRAFT_ASSIGN_OR_RETURN(std::vector<LogitsAgreement> rows, CompareLogitsFiles(s->reference, s->candidate));
      fmt::print("{:<12} {:>9} {:>14} {:>22} {:>12}\n", "sequence", "positions", "top-1 agree", "max|dlogit|/max|logit|",
                 "mean KL");
      for (const auto& r : rows) {
        fmt::print("{:<12} {:>9} {:>8} {:>5.1f}% {:>22.2e} {:>12.2e}\n", r.name, r.positions,
                   fmt::format("{}/{}", r.top1_same, r.positions), 100.0 * r.top1_same / std::max(r.positions, 1),
                   r.max_abs_diff / std::max(r.max_abs_ref, 1e-30), r.mean_kl);
      }
      return Status::Ok();
    };
  });
}

void AddQuantizeCommand(CLI::App& app, Runner& run) {
  auto job = std::make_shared<QuantizeJob>();
  auto* cmd = app.add_subcommand("quantize", "Quantize a bf16 checkpoint into a standard quantized layout, with a quality report");
  cmd->add_option("--in", job->in, "The bf16 model directory")->required()->check(CLI::ExistingDirectory);
  cmd->add_option("--out", job->out, "Output directory: new, or one holding no checkpoint")->required();
  cmd->add_option("--format", job->format,
                  "fp8-block (Qwen's official FP8: e4m3, 128x128 block scales), w4a16 (compressed-tensors int4, "
                  "groups of 128) or nvfp4 (compressed-tensors NVFP4, weight only)")
      ->capture_default_str()->check(CLI::IsMember({"fp8-block", "w4a16", "nvfp4"}));
  cmd->add_option("--eval-sequences", job->eval_sequences, "Quality report: random token sequences (0 skips it)")
      ->capture_default_str()->check(CLI::Range(0, 10000));
  cmd->add_option("--eval-length", job->eval_length, "Quality report: tokens per sequence")->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--threads", job->threads, "CPU threads: tensors quantized in parallel, and the quality report")->capture_default_str()
      ->check(CLI::Range(1, 1024));
  cmd->callback([job, &run] {
    run = [job]() -> Status {
      spdlog::info("graft quantize: {} -> {} | {}", job->in, job->out, job->format);
      GRAFT_ASSIGN_OR_RETURN(QuantizeReport r, RunQuantize(*job));
      spdlog::info("quantized {} tensors, kept {}: {:.1f} MB -> {:.1f} MB", r.quantized, r.kept, r.in_bytes / 1e6,
                   r.out_bytes / 1e6);
      if (r.mean_kl >= 0) {
        spdlog::info("quality vs the input (float32): mean KL {:.3g}, max KL {:.3g}, top-1 agreement {:.2f}%", r.mean_kl,
                     r.max_kl, 100 * r.top1);
      }
      return Status::Ok();
    };
  });
}

}  // namespace graft::cli

// graft adapter extract | verify | inspect
#include <fmt/core.h>
#include <spdlog/spdlog.h>

#include <sstream>

#include "cli/commands.h"
#include "tools/adapter_extract.h"
#include "tools/adapter_verify.h"

namespace graft::cli {
namespace {

// "0-3,7" -> {0, 1, 2, 3, 7}
Status ParseLayers(const std::string& spec, std::set<int>* out) {
  std::stringstream ss(spec);
  std::string part;
  while (std::getline(ss, part, ',')) {
    try {
      const size_t dash = part.find('-');
      if (dash == std::string::npos) {
        out->insert(std::stoi(part));
      } else {
        const int a = std::stoi(part.substr(0, dash)), b = std::stoi(part.substr(dash + 1));
        if (b < a || b - a > 100000) return InvalidArgument("--layers: bad range " + part);
        for (int i = a; i <= b; ++i) out->insert(i);
      }
    } catch (...) {
      return InvalidArgument(fmt::format("--layers: '{}' is not a layer number or range", part));
    }
  }
  return Status::Ok();
}

}  // namespace

void AddAdapterCommand(CLI::App& app, Runner& run) {
  auto* adapter = app.add_subcommand("adapter", "Adapter tools: extract a LoRA from a merged release, verify, inspect");
  adapter->require_subcommand(1);

  struct E {
    ExtractJob job;
    std::vector<std::string> modules;
    std::string layers;
  };
  auto e = std::make_shared<E>();
  e->job.cache_dir = DefaultCacheDir();
  auto* ex = adapter->add_subcommand("extract", "Extract a PEFT LoRA adapter from a merged checkpoint and its base (truncated SVD)");
  ex->add_option("--merged", e->job.merged, "The merged (fine-tuned) checkpoint")->required()->check(CLI::ExistingDirectory);
  ex->add_option("--base", e->job.base, "The base checkpoint it was made from")->required()->check(CLI::ExistingDirectory);
  ex->add_option("--out", e->job.out, "Output adapter directory")->required();
  auto* rank = ex->add_option("--rank", e->job.rank.rank, "Fixed rank per projection")->check(CLI::Range(1, 1 << 20));
  auto* energy = ex->add_option("--energy", e->job.rank.energy, "Per-projection rank keeping this share of Σ s² (0-1]")
                     ->check(CLI::Range(1e-9, 1.0));
  rank->excludes(energy);
  ex->add_option("--modules", e->modules, "Only these projections (q_proj, in_proj_qkv, down_proj, ...)")->delimiter(',');
  ex->add_option("--layers", e->layers, "Only these layers: 0-3,7");
  ex->add_option("--quantized-base", e->job.quantized_base,
                 "Fit the factors to the quantized checkpoint of --base the adapter will be served on (merged minus "
                 "its served weights), and name it as the adapter's base")
      ->check(CLI::ExistingDirectory);
  ex->add_option("--calibration", e->job.calibration,
                 "Activation-aware fit: run the served model (--quantized-base, else --base) on this text file's tokens "
                 "and fit each projection's factors to the inputs it sees there, not in weight space")
      ->check(CLI::ExistingFile);
  ex->add_option("--calibration-tokens", e->job.calibration_tokens, "--calibration: at most this many tokens of the text")
      ->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  ex->add_option("--calibration-length", e->job.calibration_length, "--calibration: tokens per sequence")
      ->capture_default_str()->check(CLI::Range(1, 1 << 20));
  ex->add_option("--calibration-damping", e->job.calibration_damp,
                 "--calibration: added to the inputs' Gram matrix, as a share of its mean diagonal")
      ->capture_default_str()->check(CLI::Range(1e-9, 1e3));
  ex->add_flag("--exact", e->job.exact, "Also store the residual that reconstructs the merged bf16 weights bit for bit");
  ex->add_option("--exact-iterations", e->job.exact_iterations, "Refit rounds that shrink the exact residual (each one SVD)")
      ->capture_default_str()->check(CLI::Range(0, 10000));
  ex->add_flag("--store-full", e->job.store_full, "Store other differing tensors whole instead of refusing");
  ex->add_flag("--float32", e->job.float32_factors, "Store the factors in float32 (default bfloat16)");
  ex->add_option("--base-revision", e->job.base_revision, "Recorded in the manifest");
  ex->add_option("--merged-revision", e->job.merged_revision, "Recorded in the manifest");
  ex->add_option("--eval-sequences", e->job.eval_sequences, "Quality report: random token sequences (0 skips it)")
      ->capture_default_str()->check(CLI::Range(0, 10000));
  ex->add_option("--eval-length", e->job.eval_length, "Quality report: tokens per sequence")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  ex->add_option("--threads", e->job.threads, "CPU threads for the quality report and the calibration run")->capture_default_str();
  ex->callback([e, &run] {
    run = [e]() -> Status {
      if (!e->layers.empty()) GRAFT_RETURN_IF_ERROR(ParseLayers(e->layers, &e->job.layers));
      e->job.modules.insert(e->modules.begin(), e->modules.end());
      spdlog::info("graft adapter extract: {} - {} -> {} | {} | exact {} | store-full {}", e->job.merged, e->job.base, e->job.out,
                   e->job.rank.rank > 0 ? fmt::format("rank {}", e->job.rank.rank) : fmt::format("energy {}", e->job.rank.energy),
                   e->job.exact, e->job.store_full);
      GRAFT_ASSIGN_OR_RETURN(ExtractReport r, RunExtract(e->job));
      spdlog::info("extracted {} projections, {:.2f} MB stored, peak resident memory {:.0f} MB", r.projections,
                   r.adapter_bytes / 1e6, r.peak_rss_kb / 1024.0);
      if (e->job.exact) {
        spdlog::info("exact: {} residual elements in {} bytes (a bf16 copy of the touched projections: {} bytes, {:.3f}%)",
                     r.exact_residual_elements, r.exact_residual_bytes, r.touched_bf16_bytes,
                     100.0 * r.exact_residual_bytes / std::max<int64_t>(r.touched_bf16_bytes, 1));
      }
      if (r.top1 >= 0) {
        spdlog::info("quality vs merged (float32): mean KL {:.3g}, max KL {:.3g}, top-1 agreement {:.2f}%", r.mean_kl, r.max_kl,
                     100 * r.top1);
      }
      return Status::Ok();
    };
  });

  auto v = std::make_shared<VerifyJob>();
  v->cache_dir = DefaultCacheDir();
  auto* ve = adapter->add_subcommand("verify", "Check an adapter: inventory, shapes, hashes, base identity (and --exact reconstruction)");
  ve->add_option("dir", v->dir, "Adapter directory")->required()->check(CLI::ExistingDirectory);
  ve->add_option("--base", v->base, "The base checkpoint")->required()->check(CLI::ExistingDirectory);
  ve->add_option("--merged", v->merged, "The merged checkpoint (for --exact)")->check(CLI::ExistingDirectory);
  ve->add_flag("--exact", v->exact, "Prove bitwise reconstruction of every projection");
  ve->add_flag("--force", v->force, "Accept a manifest that names a different base");
  ve->callback([v, &run] {
    run = [v]() -> Status {
      std::string report;
      const Status st = RunVerify(*v, &report);
      fmt::print("{}", report);
      if (st.ok()) fmt::print("verified\n");
      return st;
    };
  });

  auto dir = std::make_shared<std::string>();
  auto* in = adapter->add_subcommand("inspect", "Show an adapter's modules, ranks, sizes and manifest");
  in->add_option("dir", *dir, "Adapter directory")->required()->check(CLI::ExistingDirectory);
  in->callback([dir, &run] {
    run = [dir]() -> Status {
      GRAFT_ASSIGN_OR_RETURN(std::string text, InspectAdapter(*dir));
      fmt::print("{}", text);
      return Status::Ok();
    };
  });
}

}  // namespace graft::cli

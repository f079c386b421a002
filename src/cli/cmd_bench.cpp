// graft bench: prefill and decode timings (tools/bench.h), on a checkpoint or on dummy weights
// at a config's dimensions, with an adapter from a directory or a dummy one.
#include <fmt/core.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <fstream>
#include <nlohmann/json.hpp>

#include "adapters/dummy.h"
#include "model/architecture.h"
#include "model/weight_table.h"
#include "tools/quantize.h"
#ifdef GRAFT_HAVE_CUDA
#include "backend/cuda/cuda_ops.h"
#endif
#include "adapters/lora_loader.h"
#include "cli/commands.h"
#include "engine/decision_scorer.h"
#include "engine/engine.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tools/bench.h"
#include "util/json_depth.h"

namespace graft::cli {

void AddBenchCommand(CLI::App& app, Runner& run) {
  struct S {
    ModelSettings m;
    std::string load_format = "auto", json, adapter_dtype = "auto", decisions, tokenizer, dummy_quant = "none";
    int dummy_rank = 0, dummy_layers = 24, dummy_count = 1, concurrency = 0, chat_tokens = 32, turn_prompt = 0;
    double dummy_exact = 0;
    std::vector<int> chat_streams;
    bool no_graphs = false;
    BenchJob job;
  };
  auto s = std::make_shared<S>();
  auto* cmd = app.add_subcommand("bench", "Prefill and decode timings, with and without an adapter (table + JSON)");
  cmd->add_option("--model", s->m.model, "Model directory (with --load-format dummy: config.json only)")
      ->required()->check(CLI::ExistingDirectory);
  cmd->add_option("--load-format", s->load_format, "auto: the checkpoint; dummy: seeded random bf16 weights at the config's shapes")
      ->capture_default_str()->check(CLI::IsMember({"auto", "dummy"}));
  cmd->add_option("--dummy-quantize", s->dummy_quant,
                  "With --load-format dummy: quantize the dummy weights in memory as graft quantize would "
                  "(fp8-block, w4a16, nvfp4; or fp8-channel, compressed-tensors' per-channel FP8, which "
                  "graft loads but does not write) to measure that format")
      ->capture_default_str()->check(CLI::IsMember({"none", "fp8-block", "fp8-channel", "w4a16", "nvfp4"}));
  cmd->add_option("--adapter", s->m.adapter, "A PEFT adapter directory to measure beside the base")->check(CLI::ExistingDirectory);
  AddAdapterDtypeFlag(cmd, s->m);
  cmd->add_flag("--force", s->m.force, "Load the adapter even if its manifest names a different base");
  cmd->add_option("--dummy-adapter-rank", s->dummy_rank, "Measure a dummy adapter of this rank (0: none)")
      ->capture_default_str()->check(CLI::Range(0, 1024));
  cmd->add_option("--dummy-adapter-layers", s->dummy_layers, "... on every projection of this many upper layers")
      ->capture_default_str()->check(CLI::Range(1, 1 << 10));
  cmd->add_option("--dummy-adapter-dtype", s->adapter_dtype,
                  "... with factors in this dtype (auto: as a checkpoint's float32 factors are served, "
                  "--adapter-dtype's rule: bfloat16 with bfloat16 activations)")
      ->capture_default_str()->check(CLI::IsMember({"auto", "float32", "bfloat16"}));
  cmd->add_option("--dummy-adapter-exact", s->dummy_exact,
                  "... and a synthetic exact representation whose residual touches this share of each projection's "
                  "elements (0: none); measured in exact mode too")
      ->capture_default_str()->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--dummy-adapter-count", s->dummy_count,
                  "... this many such adapters (distinct seeds): above 1, steps whose sequences spread over all of "
                  "them are timed against the same steps on one (prefill: one sequence an adapter; decode: the "
                  "batch's rows in turn)")
      ->capture_default_str()->check(CLI::Range(1, 16));
  cmd->add_flag("--op-profile", s->m.op_profile,
                "cuda: wait for every op and print where the time went, op by op (eager steps only; slows the run)");
  cmd->add_option("--prefill", s->job.prefill_lengths, "Prefill lengths, in tokens")->capture_default_str()
      ->check(CLI::Range(1, 1 << 20))->delimiter(',');
  cmd->add_option("--decode-batches", s->job.decode_batches, "Decode batch sizes")->capture_default_str()
      ->check(CLI::Range(1, 1 << 12))->delimiter(',');
  cmd->add_option("--decode-steps", s->job.decode_steps, "Decode steps per batch size (the first warms up)")
      ->capture_default_str()->check(CLI::Range(2, 1 << 16));
  cmd->add_option("--repeats", s->job.repeats, "Timed prefills per length (after one warm-up)")->capture_default_str()
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--decisions", s->decisions, "Also time these decision requests (JSONL, as graft decide reads), by record length")
      ->check(CLI::ExistingFile);
  cmd->add_option("--tokenizer", s->tokenizer, "Directory with tokenizer.json and the chat template (default: --model)")
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--concurrency", s->concurrency,
                  "With --decisions: submit N of its requests (in turn) to the engine at once, time them against the "
                  "first alone and count the ones that differ from themselves alone or fail; with --chat-streams, the "
                  "streams also run again beside N decisions (inter-token gaps alone and beside)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--chat-streams", s->chat_streams,
                  "Chat throughput and inter-token gaps (p50, p99) with these numbers of concurrent greedy streams")
      ->delimiter(',')->check(CLI::Range(1, 4096));
  cmd->add_option("--chat-tokens", s->chat_tokens, "Tokens each chat stream generates")->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--turn-snapshot-prompt", s->turn_prompt,
                  "Also time what serve's turn snapshots cost and save (Qwen3.5): a chat prompt of N random tokens' "
                  "first token alone and with the engine keeping the next turn's copy of its cache, then the next "
                  "turn's recomputed and continued (medians of 3)")
      ->check(CLI::Range(16, 1 << 20));
  cmd->add_option("--json", s->json, "Also write the results as JSON to this file");
  cmd->add_flag("--no-cuda-graphs", s->no_graphs, "cuda: run decode steps eagerly");
  AddBackendFlags(cmd, s->m);
  cmd->callback([s, &run] {
    run = [s]() -> Status {
      // Inputs first: a bad flag or request file is refused before a model of tens of GB loads.
      if (s->concurrency > 0 && s->decisions.empty()) return InvalidArgument("--concurrency needs --decisions");
      if (s->m.op_profile && s->m.device != "cuda") return InvalidArgument("--op-profile times CUDA ops: it needs --device cuda");
      if (s->dummy_count > 1 && (s->dummy_rank == 0 || !s->m.adapter.empty() || s->dummy_exact > 0)) {
        return InvalidArgument("--dummy-adapter-count measures several dummy adapters: it needs --dummy-adapter-rank "
                               "(and no --adapter or --dummy-adapter-exact)");
      }
      if (s->dummy_count > 1 && (!s->decisions.empty() || !s->chat_streams.empty() || s->turn_prompt > 0)) {
        return InvalidArgument("--dummy-adapter-count times prefill and decode steps only: leave out --decisions, "
                               "--chat-streams and --turn-snapshot-prompt");
      }
      if (s->dummy_exact > 0 && (s->dummy_rank == 0 || !s->m.adapter.empty())) {
        return InvalidArgument("--dummy-adapter-exact gives the dummy adapter an exact representation: it needs "
                               "--dummy-adapter-rank (and no --adapter)");
      }
      const bool engine_work = !s->decisions.empty() || !s->chat_streams.empty() || s->turn_prompt > 0;
      const std::string tdir = s->tokenizer.empty() ? s->m.model : s->tokenizer;
      std::shared_ptr<const Tokenizer> tok;
      std::shared_ptr<const ChatTemplate> tmpl;
      if (engine_work) {
        GRAFT_ASSIGN_OR_RETURN(tok, Tokenizer::FromFile((std::filesystem::path(tdir) / "tokenizer.json").string()));
        GRAFT_ASSIGN_OR_RETURN(tmpl, ChatTemplate::Load(tdir, ""));
      }
      std::vector<DecisionRequest> reqs;
      if (!s->decisions.empty()) {
        std::ifstream in(s->decisions);
        std::string line;
        for (int n = 1; std::getline(in, line); ++n) {
          if (line.empty()) continue;
          GRAFT_RETURN_IF_ERROR(CheckJsonDepth(line, fmt::format("{} line {}", s->decisions, n)));
          auto body = nlohmann::json::parse(line, nullptr, false);
          if (body.is_discarded()) return InvalidArgument(fmt::format("{} line {}: not valid JSON", s->decisions, n));
          auto r = ParseDecisionRequest(body, DecisionLimits{});
          if (!r.ok()) return r.status().WithContext(fmt::format("{} line {}", s->decisions, n));
          reqs.push_back(std::move(r).value());
        }
        if (reqs.empty()) return InvalidArgument(fmt::format("--decisions {}: no requests", s->decisions));
      }
      std::unique_ptr<Model> model;
      if (s->dummy_quant != "none" && s->load_format != "dummy") {
        return InvalidArgument("--dummy-quantize quantizes dummy weights: it needs --load-format dummy "
                               "(a checkpoint quantized by graft quantize loads as it is)");
      }
      if (s->load_format == "dummy" && s->dummy_quant != "none") {
        GRAFT_ASSIGN_OR_RETURN(ModelConfig cfg, LoadModelConfig(s->m.model));
        const auto t0 = std::chrono::steady_clock::now();
        GRAFT_ASSIGN_OR_RETURN(ModelWeights w, DummyWeights(cfg, s->job.seed, s->m.threads));
        const auto t1 = std::chrono::steady_clock::now();
        GRAFT_ASSIGN_OR_RETURN(QuantFormat f, ParseBenchQuantFormat(s->dummy_quant));
        GRAFT_RETURN_IF_ERROR(QuantizeWeights(w, cfg, f, s->m.threads));
        spdlog::info("bench: dummy weights generated in {:.1f} s, quantized to {} in {:.1f} s ({} threads)",
                     std::chrono::duration<double>(t1 - t0).count(), s->dummy_quant,
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count(), s->m.threads);
        GRAFT_ASSIGN_OR_RETURN(model, MakeModel(std::move(cfg), std::move(w)));
      } else if (s->load_format == "dummy") {
        GRAFT_ASSIGN_OR_RETURN(model, LoadDummyModel(s->m.model, s->job.seed, s->m.threads));
      } else {
        GRAFT_ASSIGN_OR_RETURN(model, LoadModel(s->m.model));
      }
      spdlog::info("bench: {} ({:.1f} GB of weights, {}) on {} with {} activations{}", model->config().Summary(),
                   model->weights().bytes() / 1e9,
                   s->dummy_quant == "none" ? s->load_format : s->load_format + ", " + s->dummy_quant, s->m.device,
                   s->m.dtype, s->m.gemm == "cublas" ? ", products by cuBLAS" : "");
      if (tok && tok->vocab_size() > model->config().vocab_size) {
        return InvalidArgument(fmt::format("--tokenizer {}: {} tokens, more than the model's {}", tdir, tok->vocab_size(),
                                           model->config().vocab_size));
      }
      std::unique_ptr<LoraAdapter> adapter;
      if (!s->m.adapter.empty()) {
        LoraLoadOptions opt;
        opt.name = s->m.adapter;
        opt.force = s->m.force;
        opt.bf16_factors = s->m.bf16_factors();
        GRAFT_ASSIGN_OR_RETURN(LoraAdapter a, LoadLoraAdapter(s->m.adapter, model->config(), opt));
        adapter = std::make_unique<LoraAdapter>(std::move(a));
      } else if (s->dummy_rank > 0) {
        adapter = std::make_unique<LoraAdapter>(DummyAdapter(model->config(), s->dummy_rank, s->dummy_layers,
                                                             s->adapter_dtype == "auto" ? s->m.bf16_factors()
                                                                                        : s->adapter_dtype == "bfloat16",
                                                             s->job.seed));
        if (s->dummy_exact > 0) AddDummyExact(*adapter, s->dummy_exact, s->job.seed);
      }
      std::vector<std::unique_ptr<LoraAdapter>> more;  // --dummy-adapter-count's others, slots 2..
      const bool dummy_bf16 = s->adapter_dtype == "auto" ? s->m.bf16_factors() : s->adapter_dtype == "bfloat16";
      for (int i = 1; adapter && i < s->dummy_count; ++i) {
        more.push_back(std::make_unique<LoraAdapter>(
            DummyAdapter(model->config(), s->dummy_rank, s->dummy_layers, dummy_bf16, s->job.seed + static_cast<uint64_t>(i))));
        more.back()->name += fmt::format("-{}", i + 1);
      }
      s->job.mixed_adapters = s->dummy_count > 1 ? s->dummy_count : 0;
      AdapterSet set;
      if (adapter) {
        set.Add(adapter.get(), false);
        for (const auto& a : more) set.Add(a.get(), false);
        if (adapter->has_exact) set.Add(adapter.get(), true);
        spdlog::info("adapter {}: {} modules, rank {}..{}, {:.1f} MB of factors{}", adapter->name, adapter->num_modules(),
                     adapter->min_rank(), adapter->max_rank(), adapter->bytes() / 1e6,
                     adapter->has_exact ? fmt::format(", {:.1f} MB of exact residuals (measured in both modes)", adapter->exact_bytes() / 1e6) : "");
      }
      std::unique_ptr<Ops> ops;
      GRAFT_RETURN_IF_ERROR(MakeOps(s->m, *model, set, &ops));
      const DecodeGraphs graphs = MakeDecodeGraphs(*model, *ops, !s->no_graphs);
      GRAFT_ASSIGN_OR_RETURN(BenchReport rep, RunBench(*model, *ops, set, s->job, graphs.run));
      if (graphs.summary) spdlog::info("bench: {}", graphs.summary());
      if (s->m.op_profile) {
#ifdef GRAFT_HAVE_CUDA
        if (auto* cuda = dynamic_cast<CudaOps*>(ops.get()); cuda && cuda->op_profile()) {
          std::fputs(("op profile (eager steps; each op waited for):\n" + cuda->op_profile()->Table()).c_str(), stdout);
        }
#endif
      }
      if (!reqs.empty()) {
#ifdef GRAFT_HAVE_CUDA
        OpProfile* profile = nullptr;
        if (auto* cuda = dynamic_cast<CudaOps*>(ops.get())) profile = cuda->op_profile();
        if (profile) profile->Clear();  // the decisions' own ops next
#endif
        DecisionScorer scorer(*model, *ops, *tok, *tmpl, set);
        scorer.set_prefill_chunk(DefaultDecisionPrefillChunk(s->m.device));  // records in serve's pieces
        std::function<void(bool)> on_questions;
#ifdef GRAFT_HAVE_CUDA
        OpProfile::Lines before, asked;  // the question pieces' own lines
        if (profile) {
          on_questions = [&](bool starting) {
            if (starting) before = profile->lines();
            else OpProfile::AddSince(profile->lines(), before, asked);
          };
        }
#endif
        GRAFT_ASSIGN_OR_RETURN(rep.decisions, RunDecisionBench(scorer, reqs, set, *model, *ops, on_questions));
#ifdef GRAFT_HAVE_CUDA
        if (profile) {
          std::fputs(("op profile of the decisions (each decision and its record's prefill alone; each op waited "
                      "for):\n" + profile->Table()).c_str(), stdout);
          std::fputs(("op profile of their question pieces alone:\n" + OpProfile::TableOf(asked)).c_str(), stdout);
        }
#endif
      }
      model->ReleaseOwnPools();  // the offline runs' pools: the engine's are sized from what is left
      if (s->concurrency > 0 || !s->chat_streams.empty() || s->turn_prompt > 0) {
        EngineConfig ec;  // serve's defaults, so chat beside decisions is what a server shows
        ec.decision_prefill_chunk = DefaultDecisionPrefillChunk(s->m.device);
        GRAFT_RETURN_IF_ERROR(SizeEnginePools(*model, *ops, PoolAsk{}, &ec));
        Engine engine(ec, *model, std::move(ops), *tok, *tmpl, set, graphs.run);
        GRAFT_RETURN_IF_ERROR(engine.PoolsReserved());
        if (s->concurrency > 0) {
          GRAFT_ASSIGN_OR_RETURN(DecisionConcurrency dc,
                                 RunDecisionConcurrency(engine, reqs, adapter ? 1 : 0, s->concurrency));
          rep.concurrency.push_back(dc);
        }
        std::mt19937 rng(7);
        std::vector<int32_t> prompt(64);
        for (auto& t : prompt) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(tok->vocab_size()));
        for (int n : s->chat_streams) {
          GRAFT_ASSIGN_OR_RETURN(ChatStreams cs, RunChatStreams(engine, prompt, n, s->chat_tokens));
          rep.chat.push_back(cs);
          if (s->concurrency > 0) {  // the same streams while --concurrency decisions run beside them
            GRAFT_ASSIGN_OR_RETURN(ChatStreams with,
                                   RunChatStreams(engine, prompt, n, s->chat_tokens, reqs, s->concurrency, adapter ? 1 : 0));
            rep.chat.push_back(with);
          }
        }
        if (s->turn_prompt > 0) {
          GRAFT_ASSIGN_OR_RETURN(TurnSnapshotCost tc, RunTurnSnapshotCost(engine, tok->vocab_size(), s->turn_prompt));
          rep.turns.push_back(tc);
        }
        engine.Stop();
      }
      std::fputs(rep.Table().c_str(), stdout);
      if (!s->json.empty()) {
        std::ofstream f(s->json);
        f << rep.Json(s->m.model, s->m.gemm == "cublas" ? s->m.device + " --gemm cublas" : s->m.device) << "\n";
        if (!f) return IoError(fmt::format("cannot write {}", s->json));
      }
      return Status::Ok();
    };
  });
}

}  // namespace graft::cli

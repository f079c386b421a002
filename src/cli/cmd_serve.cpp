// graft serve
#include <fmt/core.h>
#include <signal.h>
#include <unistd.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <thread>

#include "adapters/lora_loader.h"
#include "cli/commands.h"
#ifdef GRAFT_HAVE_CUDA
#include "backend/cuda/cuda_ops.h"
#endif
#include "engine/engine.h"
#include "io/checkpoint.h"
#include "io/identity.h"
#include "io/weight_scan.h"
#include "kv/kv_pool.h"
#include "server/http_server.h"
#include "server/stats_log.h"
#include "util/log_format.h"
#include "tools/generate.h"

namespace graft::cli {
namespace {

// SIGINT/SIGTERM reach this pipe (the self-pipe trick): threads that libraries start before
// main (OpenBLAS) may receive the signal, so masking cannot route it to one thread.
int g_signal_pipe[2] = {-1, -1};  // file-local: the one piece of state a signal handler may touch

volatile sig_atomic_t g_signals = 0;  // signals seen: the second one exits at once

void OnSignal(int sig) {
  g_signals = g_signals + 1;  // (++ on a volatile is deprecated in C++20)
  if (g_signals >= 2) {
    static const char kForced[] = "graft: second signal: exiting now\n";
    [[maybe_unused]] const ssize_t w = ::write(2, kForced, sizeof kForced - 1);
    ::_exit(1);
  }
  const char c = static_cast<char>(sig);
  [[maybe_unused]] const ssize_t n = ::write(g_signal_pipe[1], &c, 1);
}

// serve's config file: TOML whose keys outside any section are serve's flags.
class ServeConfigFile : public CLI::ConfigBase {
 public:
  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override {
    std::vector<CLI::ConfigItem> items = CLI::ConfigBase::from_config(input);
    for (auto& it : items) {
      if (it.parents.empty() && it.name != "++" && it.name != "--") it.parents = {"serve"};
    }
    return items;
  }
};

// Checkpoints up to this size are checked for non-finite weights at start-up without being asked.
constexpr uint64_t kCheckWeightsBytes = uint64_t{1} << 30;

}  // namespace

void AddServeCommand(CLI::App& app, Runner& run) {
  struct S {
    ModelSettings m;
    std::vector<std::string> adapters;  // NAME=DIR
    std::string name, chat_template;
    ServerConfig server;
    EngineConfig engine;
    bool no_graphs = false;
    bool no_turn_snapshots = false;
    std::string reasoning_parser = "qwen3";
    std::string generation_config = "auto";
    std::string log_format = "text";
    bool check_weights = false;
    double shutdown_timeout = 30;
    int decision_prefill_chunk = -1;  // -1: by backend
    bool runtime_adapters = false;
    int max_adapters = 4, max_adapter_rank = 64;
    int max_model_len = 0;  // 0: the model's context cut to --kv-tokens
    PoolAsk pools;          // --kv-tokens, --decision-kv-tokens, --max-running (0: from the memory budget)
  };
  auto s = std::make_shared<S>();
  auto* cmd = app.add_subcommand("serve", "Serve the base and its adapters over HTTP (OpenAI chat/completions, decisions)");
  cmd->footer("Every flag may also come from --config FILE (TOML: flag-name = value) or GRAFT_<FLAG_NAME> "
              "(GRAFT_MAX_QUEUE=512); the command line wins, then the file, then the environment.");
  cmd->add_option("--model", s->m.model, "Model directory (config.json, safetensors, tokenizer.json, chat template)")
      ->required()->check(CLI::ExistingDirectory);
  cmd->add_option("--adapter", s->adapters,
                  "NAME=DIR: a PEFT adapter requests select with \"model\": NAME (repeatable); one extracted with --exact "
                  "also serves \"mode\": \"exact\" (the merged release's arithmetic)");
  cmd->add_flag("--allow-runtime-adapters", s->runtime_adapters,
                "Serve POST /v1/load_lora_adapter and /v1/unload_lora_adapter (vLLM's): adapters loaded while the "
                "server runs, into --max-adapters slots reserved at start-up (on cuda, device memory for a "
                "--max-adapter-rank adapter on every projection each)");
  auto* max_adapters = cmd->add_option("--max-adapters", s->max_adapters, "Run-time adapter slots (with --allow-runtime-adapters)")
      ->capture_default_str()->check(CLI::Range(1, 1024));
  auto* max_rank = cmd->add_option("--max-adapter-rank", s->max_adapter_rank,
                                   "Largest rank a run-time adapter may have (with --allow-runtime-adapters)")
      ->capture_default_str()->check(CLI::Range(1, 1 << 16));
  AddAdapterDtypeFlag(cmd, s->m);
  cmd->add_option("--served-model-name", s->name, "The base's name in requests and /v1/models (default: the directory's name)");
  AddBackendFlags(cmd, s->m);
  cmd->add_flag("--no-cuda-graphs", s->no_graphs, "cuda: run decode steps eagerly instead of replaying CUDA graphs");
  cmd->add_flag("--no-turn-snapshots", s->no_turn_snapshots,
                "Qwen3.5: keep no cache copy where a chat prompt's next turn will part (without it a chat's next "
                "turn is computed whole; with it each chat prompt's prefill pauses there for one step)");
  cmd->add_flag("--force", s->m.force, "Load adapters whose manifest names a different base");
  cmd->add_option("--exact-base", s->m.exact_base,
                  "Exact mode on a base not stored in bf16: the bf16 checkpoint the adapters were extracted against; "
                  "a resident copy of just the projections they touch is kept (and reported)")
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--chat-template", s->chat_template, "A Jinja file to use instead of the model's chat template")->check(CLI::ExistingFile);
  cmd->add_option("--reasoning-parser", s->reasoning_parser,
                  "qwen3: chat output's thinking (<think>...</think>) as reasoning_content; none: all of it as content")
      ->capture_default_str()
      ->check(CLI::IsMember({"qwen3", "none"}));
  cmd->add_option("--generation-config", s->generation_config,
                  "Sampling defaults for what a request leaves unset: auto (the model's generation_config.json), "
                  "none (OpenAI's), or a directory holding one")
      ->capture_default_str();
  cmd->add_option("--log-format", s->log_format,
                  "Log lines as text, or as JSON objects {time, level, msg} for a log shipper; either way one "
                  "line a request (id, model, tokens, queue / prefill / decode ms, status) and a stats line "
                  "every 10 s while busy")
      ->capture_default_str()
      ->check(CLI::IsMember({"text", "json"}));
  cmd->add_flag("--check-weights", s->check_weights,
               "Read every floating-point weight for NaN and infinity before serving (refusing the model if any); "
               "done anyway for checkpoints up to 1 GB");
  cmd->add_option("--host", s->server.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", s->server.port, "Port (0: any free port)")->capture_default_str()->check(CLI::Range(0, 65535));
  cmd->add_option("--max-model-len", s->max_model_len,
                  "Longest prompt + completion served (and /v1/models' max_model_len); default the model's context "
                  "cut to --kv-tokens; more than either is a start-up error")
      ->check(CLI::Range(1, 1 << 30));
  cmd->add_option("--kv-tokens", s->pools.kv_tokens,
                  "KV pool in tokens, shared by chat sequences and decisions (default: cuda, sized from what "
                  "--gpu-memory leaves after weights, adapters and scratch; cpu, 65536)")
      ->check(CLI::Range(16, 1 << 30));
  cmd->add_option("--max-running", s->pools.max_running,
                  "Chat sequences running at once (state slots; default 64, on cuda fewer where 64 would take more "
                  "than half the pool's memory)")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--decision-kv-tokens", s->pools.decision_tokens,
                  "The most of the KV pool decisions hold at once, with their prefix cache, in tokens (default: "
                  "cuda, a quarter of the pool, raised to the model's context where that fits in half; cpu, 16384)")
      ->check(CLI::Range(16, 1 << 30));
  cmd->add_option("--page-size", s->engine.page_size, "KV page, in tokens")->capture_default_str()->check(CLI::Range(1, 4096));
  cmd->add_option("--max-step-tokens", s->engine.max_step_tokens, "Rows per forward step, chat and decision rows together (the bound on a chat stream's gap "
                  "while prompts and decisions are prefilled)")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--prefix-cache-entries", s->engine.prefix_cache_entries,
                  "Chat caches kept for prefix caching: a prompt that starts with an ended sequence's tokens "
                  "continues from its cache (usage.prompt_tokens_details.cached_tokens); on models without "
                  "linear-attention layers any shared start counts (a system prompt, a repeated prompt), on Qwen3.5 "
                  "a whole earlier sequence or a chat's next turn (--no-turn-snapshots); they use only room no running "
                  "request needs; 0: off")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--max-queue", s->engine.max_queue, "Queued plus running requests before 429")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--max-decisions", s->pools.max_decisions,
                  "Decisions in progress at once, sharing steps (one's questions beside another's record; those "
                  "on a record another is computing wait for it and continue from the prefix cache); the rest "
                  "wait in the queue (default 8; on cuda with Qwen3.5 fewer where their state slots would take "
                  "more than a quarter of the pool's memory)")
      ->check(CLI::Range(1, 256));
  cmd->add_option("--decision-prefill-chunk", s->decision_prefill_chunk,
                  "Prefill a decision's record in pieces of this many tokens (a multiple of 64; 0: at once); a piece "
                  "runs inside a chat step and, while chat runs, keeps to what --max-step-tokens leaves after the "
                  "decode rows, so chat waits for one step at most and a decision whose client hangs up stops within "
                  "a piece; default 256 on cpu, 1024 on cuda (bits are the same either way)")
      ->check(CLI::Validator(
          [](std::string& v) {
            char* end = nullptr;
            const long long n = std::strtoll(v.c_str(), &end, 10);
            if (v.empty() || *end != '\0' || n < 0 || n > (1 << 20) || n % 64 != 0) {
              return std::string("must be 0 or a multiple of 64 up to 1048576, not '" + v + "'");
            }
            return std::string();
          },
          "0 or a multiple of 64"));
  cmd->add_option("--max-body-bytes", s->server.max_body_bytes, "Largest request body, chunked or not (413 above)")
      ->capture_default_str();
  cmd->add_option("--max-connections", s->server.http.max_connections,
                  "Open connections held at once; past it a new one is answered 503 and closed")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 22));
  cmd->add_option("--header-timeout", s->server.http.header_timeout_s,
                  "Seconds a request's whole head may take from its first byte (408 after)")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  cmd->add_option("--body-timeout", s->server.http.body_timeout_s, "Seconds a request's whole body may take (408 after)")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  cmd->add_option("--keep-alive-timeout", s->server.http.idle_timeout_s,
                  "Seconds an idle keep-alive connection stays open")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 86400.0));
  cmd->add_option("--api-key", s->server.access.api_key,
                  "Require 'Authorization: Bearer KEY' on every route but --open-routes (401 otherwise)")
      ->envname("GRAFT_API_KEY");
  cmd->add_option("--open-routes", s->server.access.open_routes,
                  "Routes that need no --api-key (comma-separated; '' for none)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--allowed-hosts", s->server.access.allowed_hosts,
                  "Host header names answered besides loopback's when bound to loopback, the only ones otherwise; '*': any")
      ->delimiter(',');
  cmd->add_option("--request-timeout", s->server.request_timeout_s,
                  "Seconds a chat, completion or response may take from its arrival (waiting included) before it "
                  "ends with a 504, or an error event when streamed; 0: no limit")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 86400.0 * 365));
  cmd->add_option("--shutdown-timeout", s->shutdown_timeout,
                  "On SIGTERM / SIGINT: seconds in-flight requests may run on (new ones get 503) before the rest "
                  "end with an error; a second signal exits at once")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 86400.0));
  cmd->add_option("--allowed-origins", s->server.access.allowed_origins,
                  "Web origins (scheme://host[:port]) whose pages may call the API (CORS; '*': any); default none")
      ->delimiter(',');
  // Every flag also from a TOML file (`max-queue = 512`, read by the root app: CLI11 reads config
  // files there) and from GRAFT_<FLAG> (GRAFT_MAX_QUEUE=512).
  app.config_formatter(std::make_shared<ServeConfigFile>());
  app.set_config("--config", "",
                 "serve: read its flags from this TOML file, one `flag-name = value` a line, named as the long "
                 "flags without '--' (lists as [\"a\", \"b\"]; a [serve] section is read too); the command line "
                 "wins, then the file, then GRAFT_<FLAG_NAME> in the environment");
  cmd->fallthrough();  // `graft serve --config FILE`: the root's option after the subcommand
  app.allow_config_extras(CLI::config_extras_mode::error);
  for (CLI::Option* o : cmd->get_options()) {
    if (o->get_lnames().empty() || !o->get_envname().empty()) continue;
    const std::string& name = o->get_lnames().front();
    if (name == "help" || name == "config") continue;
    std::string env = "GRAFT_";
    for (char ch : name) env += ch == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    o->envname(env);
  }
  cmd->callback([s, &run, max_adapters, max_rank] {
    const bool sized = max_adapters->count() > 0 || max_rank->count() > 0;
    run = [s, sized]() -> Status {
      GRAFT_RETURN_IF_ERROR(SetLogFormat(s->log_format));
      if (sized && !s->runtime_adapters) {
        return InvalidArgument("--max-adapters and --max-adapter-rank size run-time adapter slots: they need --allow-runtime-adapters");
      }
      {
        GRAFT_ASSIGN_OR_RETURN(Checkpoint ck, Checkpoint::Open(s->m.model));
        if (s->check_weights || ck.total_bytes() <= kCheckWeightsBytes) {
          const WeightScan scan = ScanNonFinite(ck, s->m.threads);
          GRAFT_RETURN_IF_ERROR(NonFiniteError(ck, scan));
          spdlog::info("weights: all finite ({} floating-point tensors, {:.1f} MB read)", scan.tensors, scan.bytes / 1e6);
        }
      }
      GRAFT_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, LoadModel(s->m.model));
      GRAFT_ASSIGN_OR_RETURN(auto tok, Tokenizer::FromFile((std::filesystem::path(s->m.model) / "tokenizer.json").string()));
      GRAFT_ASSIGN_OR_RETURN(auto tmpl, ChatTemplate::Load(s->m.model, s->chat_template));
      ServedModels served;
      served.base_name = !s->name.empty() ? s->name : std::filesystem::path(s->m.model).lexically_normal().filename().string();
      if (served.base_name.empty()) served.base_name = "base";
      served.reasoning_parser = s->reasoning_parser == "qwen3";
      if (s->generation_config != "none") {
        const std::string dir = s->generation_config == "auto" ? s->m.model : s->generation_config;
        if (s->generation_config != "auto" && !std::filesystem::is_directory(dir)) {
          return InvalidArgument(fmt::format("--generation-config '{}': not auto, none or a directory", dir));
        }
        GRAFT_ASSIGN_OR_RETURN(served.defaults, LoadGenerationConfig(dir));
        if (!served.defaults.empty()) {
          spdlog::info("sampling defaults from {}/generation_config.json (a request's own values win): {}", dir,
                       served.defaults.Describe());
        }
      }
      std::vector<std::unique_ptr<LoraAdapter>> adapters;
      AdapterSet set;
      for (const auto& spec : s->adapters) {
        const size_t eq = spec.find('=');
        if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
          return InvalidArgument(fmt::format("--adapter '{}': expected NAME=DIR", spec));
        }
        const std::string name = spec.substr(0, eq), dir = spec.substr(eq + 1);
        if (name == served.base_name || served.adapters.count(name)) {
          return InvalidArgument(fmt::format("--adapter: the name '{}' is already taken", name));
        }
        LoraLoadOptions opt;
        opt.name = name;
        opt.force = s->m.force;
        opt.bf16_factors = s->m.bf16_factors();
        opt.base_identity = [&s]() -> Result<std::string> {
          GRAFT_ASSIGN_OR_RETURN(Checkpoint ck, Checkpoint::Open(s->m.model));
          GRAFT_ASSIGN_OR_RETURN(IdentityResult id, CachedIdentity(ck, DefaultCacheDir()));
          return id.identity;
        };
        GRAFT_ASSIGN_OR_RETURN(LoraAdapter ad, LoadLoraAdapter(dir, model->config(), opt));
        adapters.push_back(std::make_unique<LoraAdapter>(std::move(ad)));
        const LoraAdapter* a = adapters.back().get();
        ServedAdapter sa;
        sa.dir = dir;
        sa.slots.lora = set.Add(a, false);
        if (a->has_exact) sa.slots.exact = set.Add(a, true);
        sa.slots.default_exact = a->default_exact;
        sa.lora_bytes = a->bytes();
        sa.exact_bytes = a->exact_bytes();
        served.adapters[name] = sa;
      }
      // Run-time adapter slots: empty until a load fills one.
      RuntimeAdapterConfig runtime;
      if (s->runtime_adapters) {
        for (int i = 0; i < s->max_adapters; ++i) {
          runtime.slots.push_back(static_cast<int32_t>(set.slots.size()));
          set.slots.push_back(nullptr);
        }
        set.exact.resize(set.slots.size(), 0);
        runtime.max_rank = s->max_adapter_rank;
        runtime.force = s->m.force;
        runtime.bf16_factors = s->m.bf16_factors();
        runtime.base_identity = [s]() -> Result<std::string> {
          GRAFT_ASSIGN_OR_RETURN(Checkpoint ck, Checkpoint::Open(s->m.model));
          GRAFT_ASSIGN_OR_RETURN(IdentityResult id, CachedIdentity(ck, DefaultCacheDir()));
          return id.identity;
        };
      }
      GRAFT_RETURN_IF_ERROR(LoadExactBase(s->m, *model, set));
      GRAFT_ASSIGN_OR_RETURN(const int64_t exact_elements, model->ExactScratchElements(set));
      served.exact_scratch_bytes = exact_elements * 2;
      served.exact_base_bytes = model->exact_base() ? model->exact_base()->bytes() : 0;
      std::unique_ptr<Ops> ops;
      GRAFT_RETURN_IF_ERROR(MakeOps(s->m, *model, set, &ops));
      if (s->runtime_adapters) {  // device memory for the run-time adapter slots, before the pools take the rest
        const int64_t each = RuntimeAdapterSlotBytes(model->config(), runtime.max_rank, runtime.bf16_factors, *ops);
        GRAFT_RETURN_IF_ERROR(ops->ReserveAdapterSlots(runtime.slots, each).WithContext("--max-adapters"));
        if (each > 0) {
          spdlog::info("memory: {} run-time adapter slots of {:.1f} MB (rank {} on every projection)", runtime.slots.size(),
                       each / 1e6, runtime.max_rank);
        }
      }
      GRAFT_RETURN_IF_ERROR(SizeEnginePools(*model, *ops, s->pools, &s->engine));
      GRAFT_ASSIGN_OR_RETURN(served.context, ServedContext(s->max_model_len, model->config().max_position_embeddings,
                                                           s->engine.kv_token_budget));
      served.kv_tokens = s->engine.kv_token_budget;
      const auto& c = model->config();
      const int kv_value_bytes = ops->pool_memory() ? ops->pool_memory()->kv_value_bytes() : 4;
      const int64_t kv_per_token = KvPool::KvBytesPerToken(c, kv_value_bytes);
      served.kv_bytes_per_token = kv_per_token;
      served.kv_dtype = kv_value_bytes == 2 ? "bfloat16" : "float32";
      served.turn_snapshots = !s->no_turn_snapshots && s->engine.prefix_cache_entries > 0 &&
                              c.num_layers_of(LayerKind::kLinearAttention) > 0;
      const double state_per_seq = static_cast<double>(KvPool::SlotBytes(c));
      spdlog::info("graft serve: {} | {} backend, {} activations, {} threads", c.Summary(), s->m.device, s->m.dtype, s->m.threads);
      spdlog::info("memory: base weights {:.1f} MB", model->weights().bytes() / 1e6);
      for (const auto& [name, sa] : served.adapters) {
        const LoraAdapter* a = set.slots[static_cast<size_t>(sa.slots.lora)];
        spdlog::info("memory: adapter {} ({}) {:.2f} MB of factors ({}), {} modules, rank {}..{}; modes: lora{} (default {})",
                     name, a->dir, a->bytes() / 1e6, a->factor_storage(), a->num_modules(), a->min_rank(), a->max_rank(),
                     a->has_exact ? fmt::format(", exact (+{:.2f} MB of residuals, + the shared scratch)", a->exact_bytes() / 1e6) : "",
                     a->has_exact && a->default_exact ? "exact" : "lora");
      }
      Ops* ops_view = ops.get();
      const DecodeGraphs graphs = MakeDecodeGraphs(*model, *ops, !s->no_graphs);
      s->engine.decision_prefill_chunk =
          s->decision_prefill_chunk >= 0 ? s->decision_prefill_chunk : DefaultDecisionPrefillChunk(s->m.device);
      Engine engine(s->engine, *model, std::move(ops), *tok, *tmpl, set, graphs.run);
      GRAFT_RETURN_IF_ERROR(engine.PoolsReserved());
#ifdef GRAFT_HAVE_CUDA
      if (auto* cuda = dynamic_cast<CudaOps*>(ops_view)) spdlog::info("device memory with the pools:\n{}", cuda->memory().Table());
#else
      (void)ops_view;
#endif
      spdlog::info("memory: KV pool {:.1f} MB, reserved now: {} tokens in pages of {} ({} B/token, {}) shared by chat and "
                   "decisions (decisions hold up to {}); state slots of {:.2f} MB: {} for chat, {} for {} decisions at once",
                   engine.Stats().pool_bytes / 1e6, s->engine.kv_token_budget, s->engine.page_size, kv_per_token,
                   served.kv_dtype, s->engine.decision_kv_tokens, state_per_seq / 1e6, s->engine.max_running,
                   DecisionSlots(s->engine.max_decisions), s->engine.max_decisions);
      std::unique_ptr<AdapterRegistry> registry;
      if (s->runtime_adapters) {
        registry = std::make_unique<AdapterRegistry>(engine, model->config(), std::move(runtime));
        spdlog::info("run-time adapters: {} slots up to rank {} (POST /v1/load_lora_adapter, /v1/unload_lora_adapter)",
                     s->max_adapters, s->max_adapter_rank);
      }
      HttpServer server(engine, *tok, *tmpl, served, StopTokens(s->m.model, c, *tok, tmpl.get()), s->server, registry.get());
      GRAFT_RETURN_IF_ERROR(server.Bind());
      if (::pipe(g_signal_pipe) != 0) return IoError("cannot create the signal pipe");
      struct sigaction sa {};
      sa.sa_handler = OnSignal;
      sigemptyset(&sa.sa_mask);
      ::sigaction(SIGINT, &sa, nullptr);
      ::sigaction(SIGTERM, &sa, nullptr);
      std::thread signals([&server, s] {
        char c = 0;
        if (::read(g_signal_pipe[0], &c, 1) != 1 || c == 0) {  // woken: the server stopped by itself
          server.Stop();
          return;
        }
        spdlog::info("signal {}: shutting down — no new requests; {} in flight get up to {:g} s (a second signal exits now)",
                     static_cast<int>(c), server.in_flight(), s->shutdown_timeout);
        const int cut = server.Shutdown(std::chrono::milliseconds(static_cast<int64_t>(s->shutdown_timeout * 1000)));
        if (cut > 0) spdlog::warn("shutdown: {} requests were still running after {:g} s and ended with an error", cut,
                                  s->shutdown_timeout);
      });
      spdlog::info("max_model_len {} tokens (the model's context {}, the KV pool {})", served.context,
                   c.max_position_embeddings, s->engine.kv_token_budget);
      spdlog::info("serving {} (+{} adapters) on http://{}:{}/v1", served.base_name, served.adapters.size(), s->server.host,
                   server.port());
      StatsLog stats(engine, std::chrono::seconds(10));
      server.Serve();
      stats.Stop();
      const char wake = 0;
      [[maybe_unused]] const ssize_t n = ::write(g_signal_pipe[1], &wake, 1);  // ends the signal thread
      signals.join();
      engine.Stop();
      if (graphs.summary) spdlog::info("{}", graphs.summary());
      spdlog::info("stopped");
      return Status::Ok();
    };
  });
}

}  // namespace graft::cli

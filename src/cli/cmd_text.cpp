// graft tokenize | generate
#include <fmt/core.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <filesystem>
#include <unistd.h>

#include "cli/commands.h"
#include "model/model.h"
#include "engine/decision_scorer.h"
#include "tools/decide.h"
#include "tools/gate.h"
#include "tools/generate.h"
#include "tools/tokenize.h"

namespace graft::cli {
namespace {

std::string TokenizerPath(const std::string& dir) { return (std::filesystem::path(dir) / "tokenizer.json").string(); }

}  // namespace

void AddTokenizeCommand(CLI::App& app, Runner& run) {
  struct S {
    std::string model, input, output;
    bool decode = false;
  };
  auto s = std::make_shared<S>();
  auto* cmd = app.add_subcommand("tokenize", "Strings to token ids with the model's tokenizer.json (or back with --decode)");
  cmd->add_option("--model", s->model, "Model directory holding tokenizer.json")->required()->check(CLI::ExistingDirectory);
  cmd->add_option("--input", s->input, "STRINGS.json: a JSON array of strings (with --decode: of id arrays)")
      ->required()->check(CLI::ExistingFile);
  cmd->add_option("--output", s->output, "IDS.json: a JSON array of id arrays (with --decode: of strings)")->required();
  cmd->add_flag("--decode", s->decode, "Decode id arrays to strings instead");
  cmd->callback([s, &run] {
    run = [s]() -> Status {
      GRAFT_ASSIGN_OR_RETURN(auto tok, Tokenizer::FromFile(TokenizerPath(s->model)));
      return RunTokenize(*tok, s->input, s->output, s->decode);
    };
  });
}

void AddGenerateCommand(CLI::App& app, Runner& run) {
  struct S {
    ModelSettings m;
    GenerateJob job;
    std::string chat_template, thinking = "default";
  };
  auto s = std::make_shared<S>();
  auto* cmd = app.add_subcommand("generate", "Generate a reply to a prompt (chat template applied), streamed to stdout");
  AddModelFlags(cmd, s->m);
  cmd->add_option("--prompt", s->job.prompt, "The user message")->required();
  cmd->add_option("--system", s->job.system, "An optional system message");
  cmd->add_flag("--raw", s->job.raw, "Encode the prompt as is, without the chat template");
  cmd->add_option("--chat-template", s->chat_template, "A Jinja file to use instead of the model's chat template")
      ->check(CLI::ExistingFile);
  cmd->add_option("--enable-thinking", s->thinking, "true, false or default (the template decides)")->capture_default_str()
      ->check(CLI::IsMember({"true", "false", "default"}));
  cmd->add_option("--max-tokens", s->job.max_tokens, "Stop after this many generated tokens")->capture_default_str()->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--min-tokens", s->job.min_tokens, "No end token before this many tokens")->capture_default_str()
      ->check(CLI::Range(0, 1 << 24));
  cmd->add_flag("--ignore-eos", s->job.ignore_eos, "Generate --max-tokens tokens whatever end tokens come (benchmarks)");
  cmd->add_option("--temperature", s->job.sampling.temperature, "0 = greedy")->capture_default_str()->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--top-k", s->job.sampling.top_k, "Keep the k most likely tokens (0 = all)")->capture_default_str()->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--top-p", s->job.sampling.top_p, "Nucleus sampling threshold (1 = off)")->capture_default_str();
  cmd->add_option("--seed", s->job.sampling.seed, "Sampling seed: the same seed gives the same text")->capture_default_str();
  cmd->add_option("--min-p", s->job.sampling.min_p, "Drop tokens less likely than min-p x the most likely one (0 = off)")
      ->capture_default_str()->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--presence-penalty", s->job.sampling.presence_penalty,
                  "Subtracted once from the logit of every token already generated (OpenAI's; Qwen suggests up to 1.5 "
                  "against endless repetition)")
      ->capture_default_str()->check(CLI::Range(-2.0, 2.0));
  cmd->add_option("--frequency-penalty", s->job.sampling.frequency_penalty,
                  "Subtracted from a generated token's logit once for each time it was generated")
      ->capture_default_str()->check(CLI::Range(-2.0, 2.0));
  cmd->add_option("--repetition-penalty", s->job.sampling.repetition_penalty,
                  "Tokens in the prompt or the output: positive logits divided by it, negative ones multiplied (1 = off)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->callback([s, &run] {
    run = [s]() -> Status {
      if (s->thinking != "default") s->job.chat.enable_thinking = s->thinking == "true";
      GRAFT_ASSIGN_OR_RETURN(LoadedModel lm, LoadModelAndAdapter(s->m));
      std::unique_ptr<Ops> ops;
      GRAFT_RETURN_IF_ERROR(MakeOps(s->m, *lm.model, lm.adapters, &ops));
      const Model* model = lm.model.get();
      s->job.adapter_slot = lm.slot;
      GRAFT_ASSIGN_OR_RETURN(auto tok, Tokenizer::FromFile(TokenizerPath(s->m.model)));
      std::shared_ptr<const ChatTemplate> tmpl;
      if (!s->job.raw) {
        GRAFT_ASSIGN_OR_RETURN(tmpl, ChatTemplate::Load(s->m.model, s->chat_template));
      }
      const auto stop = StopTokens(s->m.model, model->config(), *tok, tmpl.get());
      const SamplingParams& sp = s->job.sampling;
      spdlog::info("graft generate: {} | {} | {} threads | max {} tokens | temperature {} top-k {} top-p {} min-p {} seed {}"
                   "{}",
                   model->config().Summary(), s->m.dtype, s->m.threads, s->job.max_tokens, sp.temperature, sp.top_k,
                   sp.top_p, sp.min_p, sp.seed,
                   sp.presence_penalty != 0 || sp.frequency_penalty != 0 || sp.repetition_penalty != 1
                       ? fmt::format(" | penalties: presence {} frequency {} repetition {}", sp.presence_penalty,
                                     sp.frequency_penalty, sp.repetition_penalty)
                       : std::string());
      GRAFT_ASSIGN_OR_RETURN(GenerateResult r, RunGenerate(*model, *ops, *tok, tmpl.get(), stop, s->job,
                                                          [](const std::string& piece) {
                                                            std::fwrite(piece.data(), 1, piece.size(), stdout);
                                                            std::fflush(stdout);
                                                          },
                                                          lm.adapters));
      std::fputc('\n', stdout);
      spdlog::info("prompt {} tokens in {:.3f} s ({:.0f} tokens/s); generated {} tokens in {:.3f} s ({:.1f} tokens/s); "
                   "stopped: {}",
                   r.prompt_tokens, r.prefill_seconds, r.prompt_tokens / std::max(r.prefill_seconds, 1e-9),
                   r.generated_tokens, r.decode_seconds, r.generated_tokens / std::max(r.decode_seconds, 1e-9),
                   r.stop_reason);
      return Status::Ok();
    };
  });
}

}  // namespace graft::cli

namespace graft::cli {

void AddDecideCommand(CLI::App& app, Runner& run) {
  struct S {
    ModelSettings m;
    DecideJob job;
    std::string chat_template;
  };
  auto s = std::make_shared<S>();
  auto* cmd = app.add_subcommand("decide", "Run decision requests (JSONL) offline: one response line per request line");
  AddModelFlags(cmd, s->m);
  cmd->add_option("--input", s->job.input, "requests.jsonl: one decisions request body per line")->required()->check(CLI::ExistingFile);
  cmd->add_option("--output", s->job.output, "decisions.jsonl: the response to each line, in order")->required();
  cmd->add_option("--chat-template", s->chat_template, "A Jinja file to use instead of the model's chat template")
      ->check(CLI::ExistingFile);
  cmd->callback([s, &run] {
    run = [s]() -> Status {
      GRAFT_ASSIGN_OR_RETURN(LoadedModel lm, LoadModelAndAdapter(s->m));
      std::unique_ptr<Ops> ops;
      GRAFT_RETURN_IF_ERROR(MakeOps(s->m, *lm.model, lm.adapters, &ops));
      GRAFT_ASSIGN_OR_RETURN(auto tok, Tokenizer::FromFile(TokenizerPath(s->m.model)));
      GRAFT_ASSIGN_OR_RETURN(auto tmpl, ChatTemplate::Load(s->m.model, s->chat_template));
      s->job.slots = lm.slots;
      s->job.default_mode = s->m.adapter_mode;
      s->job.model_name = s->m.adapter.empty() ? s->m.model : s->m.adapter;
      DecisionScorer scorer(*lm.model, *ops, *tok, *tmpl, lm.adapters);
      spdlog::info("graft decide: {} -> {} | {} | {} | {} threads", s->job.input, s->job.output, s->job.model_name,
                   s->m.dtype, s->m.threads);
      GRAFT_ASSIGN_OR_RETURN(DecideReport r, RunDecide(scorer, s->job));
      spdlog::info("decided {} requests ({} failed; their lines hold the error)", r.lines, r.failed);
      return Status::Ok();
    };
  });
}

}  // namespace graft::cli

namespace graft::cli {

void AddGateCommand(CLI::App& app, Runner& run) {
  struct S {
    std::string reference, candidate, requests;
    ModelSettings m;
    double max_kl = 0.05, min_top = 95;
  };
  auto s = std::make_shared<S>();
  auto* cmd = app.add_subcommand("gate", "Compare decisions with a reference: KL per question, top-choice agreement; exit 1 on fail");
  cmd->add_option("--reference", s->reference, "Reference decisions (graft decide on the merged release)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--candidate", s->candidate, "Candidate decisions (or compute them: --requests with --model/--adapter)");
  cmd->add_option("--requests", s->requests, "The requests behind the reference, to compute the candidate")->check(CLI::ExistingFile);
  cmd->add_option("--model", s->m.model, "Base model for the computed candidate")->check(CLI::ExistingDirectory);
  cmd->add_option("--adapter", s->m.adapter, "Adapter for the computed candidate")->check(CLI::ExistingDirectory);
  AddAdapterDtypeFlag(cmd, s->m);
  cmd->add_flag("--force", s->m.force,
                "Load the adapter even if its manifest names a different base (e.g. one extracted against the bf16 "
                "base, gated on a quantized one)");
  AddBackendFlags(cmd, s->m);  // for the computed candidate
  cmd->add_option("--max-kl", s->max_kl, "Fail when the mean KL is above this")->capture_default_str();
  cmd->add_option("--min-top", s->min_top, "Fail when top-choice agreement (percent) is below this")->capture_default_str();
  cmd->callback([s, &run] {
    run = [s]() -> Status {
      std::string candidate = s->candidate;
      std::string tmp;
      if (candidate.empty()) {
        if (s->requests.empty() || s->m.model.empty()) {
          return InvalidArgument("give --candidate FILE, or --requests FILE with --model DIR [--adapter DIR]");
        }
        GRAFT_ASSIGN_OR_RETURN(LoadedModel lm, LoadModelAndAdapter(s->m));
        std::unique_ptr<Ops> ops;
        GRAFT_RETURN_IF_ERROR(MakeOps(s->m, *lm.model, lm.adapters, &ops));
        GRAFT_ASSIGN_OR_RETURN(auto tok, Tokenizer::FromFile(TokenizerPath(s->m.model)));
        GRAFT_ASSIGN_OR_RETURN(auto tmpl, ChatTemplate::Load(s->m.model, ""));
        DecisionScorer scorer(*lm.model, *ops, *tok, *tmpl, lm.adapters);
        tmp = std::filesystem::temp_directory_path() / fmt::format("graft-gate-{}.jsonl", ::getpid());
        DecideJob job{s->requests, tmp, s->m.adapter.empty() ? s->m.model : s->m.adapter, lm.slots, s->m.adapter_mode, {}};
        GRAFT_ASSIGN_OR_RETURN(DecideReport r, RunDecide(scorer, job));
        (void)r;
        candidate = tmp;
      }
      auto rep = RunGate(s->reference, candidate, s->max_kl, s->min_top);
      if (!tmp.empty()) std::filesystem::remove(tmp);
      if (!rep.ok()) return rep.status();
      fmt::print("{}", rep->Table());
      if (!rep->passed) {
        return InvalidArgument(fmt::format("the gate failed: mean KL {:.3g} (max {}), top-1 agreement {:.2f}% (min {}%)",
                                           rep->rows[0].mean_kl, s->max_kl, rep->rows[0].top_agreement, s->min_top));
      }
      return Status::Ok();
    };
  });
}

}  // namespace graft::cli

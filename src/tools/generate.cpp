#include "tools/generate.h"

#include <fmt/core.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "util/seconds.h"

namespace graft {
namespace {

// generation_config.json's eos ids (an integer or a list): ids outside [0, vocab) — a float, or
// 2^32 + 2, which get<int32_t> would have wrapped into token 2 — are not tokens and are skipped,
// as anything else that is not an integer.
void AddIds(const nlohmann::json& v, int64_t vocab, std::set<int32_t>& out) {
  auto add = [&](const nlohmann::json& e) {
    // Read as int64: an unsigned past 2^63 - 1 comes out negative and is skipped with the rest.
    if (const int64_t id = e.is_number_integer() ? e.get<int64_t>() : -1; id >= 0 && id < vocab) {
      out.insert(static_cast<int32_t>(id));
    }
  };
  if (v.is_array()) {
    for (const auto& e : v) add(e);
  } else {
    add(v);
  }
}


}  // namespace

std::set<int32_t> StopTokens(const std::string& model_dir, const ModelConfig& cfg, const Tokenizer& tok,
                             const ChatTemplate* tmpl) {
  std::set<int32_t> stop(cfg.eos_token_ids.begin(), cfg.eos_token_ids.end());
  std::ifstream in(std::filesystem::path(model_dir) / "generation_config.json");
  if (in) {
    nlohmann::json g = nlohmann::json::parse(in, nullptr, false);
    if (g.is_object() && g.contains("eos_token_id")) AddIds(g["eos_token_id"], cfg.vocab_size, stop);
  }
  if (tmpl && !tmpl->eos_token().empty()) {
    if (auto id = tok.TokenToId(tmpl->eos_token())) stop.insert(*id);
  }
  return stop;
}

Result<GenerateResult> RunGenerate(const Model& model, Ops& ops, const Tokenizer& tok, const ChatTemplate* tmpl,
                                   const std::set<int32_t>& stop, const GenerateJob& job,
                                   const std::function<void(const std::string&)>& on_text,
                                   const AdapterSet& adapters) {
  GRAFT_RETURN_IF_ERROR(ValidateSamplingParams(job.sampling, model.config().vocab_size));
  if (job.max_tokens < 1) return InvalidArgument(fmt::format("max_tokens {} must be >= 1", job.max_tokens));
  if (job.min_tokens < 0 || job.min_tokens > job.max_tokens) {
    return InvalidArgument(fmt::format("min_tokens {} must be in [0, max_tokens = {}]", job.min_tokens, job.max_tokens));
  }
  std::string prompt = job.prompt;
  if (!job.raw) {
    if (!tmpl) return InvalidArgument("the model has no chat template: pass --chat-template FILE or --raw");
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    if (!job.system.empty()) messages.push_back({{"role", "system"}, {"content", job.system}});
    messages.push_back({{"role", "user"}, {"content", job.prompt}});
    GRAFT_ASSIGN_OR_RETURN(prompt, tmpl->Render(messages, job.chat));
  }
  GRAFT_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tok.Encode(prompt));
  if (ids.empty()) return InvalidArgument("the prompt encodes to no tokens");
  const ModelConfig& c = model.config();
  if (tok.vocab_size() > c.vocab_size) {
    return InvalidArgument(fmt::format("the tokenizer has {} tokens but the model only {}", tok.vocab_size(), c.vocab_size));
  }
  const int ctx = c.max_position_embeddings > 0 ? c.max_position_embeddings : 1 << 30;
  if (static_cast<int>(ids.size()) >= ctx) {
    return InvalidArgument(fmt::format("the prompt has {} tokens; the model's context is {}", ids.size(), ctx));
  }
  GenerateResult r;
  r.prompt_tokens = static_cast<int>(ids.size());
  GRAFT_ASSIGN_OR_RETURN(SequenceState st, model.NewState(ops));
  std::vector<float> logits(static_cast<size_t>(c.vocab_size));  // the prompt's last row only
  auto t0 = std::chrono::steady_clock::now();
  GRAFT_RETURN_IF_ERROR(model.Forward(ops, ids.data(), static_cast<int>(ids.size()), st, logits.data(), job.adapter_slot,
                                      &adapters, LogitRows::Only({static_cast<int32_t>(ids.size() - 1)})));
  r.prefill_seconds = SecondsSince(t0);
  const float* last = logits.data();
  Sampler sampler(job.sampling, ids);
  if (job.min_tokens > 0 && !job.ignore_eos) sampler.BanUntil({stop.begin(), stop.end()}, job.min_tokens);
  StreamDecoder dec(tok);
  std::vector<float> step(static_cast<size_t>(c.vocab_size));
  t0 = std::chrono::steady_clock::now();
  r.stop_reason = "max_tokens";
  for (int i = 0; i < job.max_tokens; ++i) {
    int32_t next = sampler.Sample(last, c.vocab_size);
    if (!job.ignore_eos && stop.count(next)) {
      r.stop_reason = "eos";
      break;
    }
    ++r.generated_tokens;
    sampler.Accept(next);
    on_text(dec.Push(next));
    if (i + 1 == job.max_tokens) break;
    if (st.pos + 1 > ctx) {
      r.stop_reason = "context";
      break;
    }
    GRAFT_RETURN_IF_ERROR(model.Forward(ops, &next, 1, st, step.data(), job.adapter_slot, &adapters));
    last = step.data();
  }
  on_text(dec.Flush());
  r.decode_seconds = SecondsSince(t0);
  return r;
}

}  // namespace graft

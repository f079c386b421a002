#include "server/api.h"

#include "server/structured_output.h"
#include "util/json_depth.h"

#include <fmt/core.h>

#include <algorithm>
#include <random>

namespace graft {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

constexpr size_t kMaxChoices = 128;  // prompts x n in one request

ApiError Bad(const std::string& message, const std::string& param, int status = 400) {
  return ApiError{status, message, "invalid_request_error", param};
}

// An assistant turn's tool calls as OpenAI sends them back (function.arguments a JSON string)
// into what the templates iterate (an object), as vLLM does before rendering.
std::optional<ApiError> ParseToolCallArguments(nlohmann::ordered_json* messages) {
  for (size_t i = 0; i < messages->size(); ++i) {
    auto& msg = (*messages)[i];
    auto calls = msg.find("tool_calls");
    if (calls == msg.end() || calls->is_null()) continue;
    if (!calls->is_array()) return Bad(fmt::format("messages[{}].tool_calls must be an array", i), "messages");
    for (size_t j = 0; j < calls->size(); ++j) {
      auto& call = (*calls)[j];
      const std::string at = fmt::format("messages[{}].tool_calls[{}]", i, j);
      if (!call.is_object()) return Bad(at + " must be an object", "messages");
      auto f = call.find("function");
      if (f == call.end() || !f->is_object() || !f->contains("name") || !(*f)["name"].is_string()) {
        return Bad(at + " needs a 'function' object with a string 'name'", "messages");
      }
      auto args = f->find("arguments");
      if (args == f->end() || args->is_null()) {
        (*f)["arguments"] = nlohmann::ordered_json::object();
      } else if (args->is_string()) {
        auto parsed = nlohmann::ordered_json::parse(args->get<std::string>(), nullptr, /*allow_exceptions=*/false);
        if (parsed.is_discarded() || !parsed.is_object()) {
          return Bad(at + ".function.arguments must be a JSON object (as a string or an object)", "messages");
        }
        *args = std::move(parsed);
      } else if (!args->is_object()) {
        return Bad(at + ".function.arguments must be a JSON object (as a string or an object)", "messages");
      }
    }
  }
  return std::nullopt;
}

// A chat body's messages (with its tools and chat_template_kwargs) through the template.
std::optional<ApiError> RenderMessages(const json& body, const ChatTemplate& tmpl, bool add_generation_prompt,
                                       std::string* out) {
  auto m = body.find("messages");
  if (m == body.end() || !m->is_array()) return Bad("'messages' must be an array", "messages");
  if (m->empty()) return Bad("'messages' is empty", "messages");
  for (size_t i = 0; i < m->size(); ++i) {
    const json& msg = (*m)[i];
    if (!msg.is_object() || !msg.contains("role") || !msg["role"].is_string()) {
      return Bad(fmt::format("messages[{}] needs a string 'role'", i), "messages");
    }
    if (msg.contains("content") && !msg["content"].is_string() && !msg["content"].is_array() && !msg["content"].is_null()) {
      return Bad(fmt::format("messages[{}].content must be a string or an array of parts", i), "messages");
    }
  }
  ChatOptions opt;
  opt.add_generation_prompt = add_generation_prompt;
  if (body.contains("tools") && !body["tools"].is_null()) {
    if (!body["tools"].is_array()) return Bad("'tools' must be an array", "tools");
    opt.tools = nlohmann::ordered_json::parse(body["tools"].dump());
  }
  auto kw = body.find("chat_template_kwargs");
  if (kw != body.end() && !kw->is_null()) {
    if (!kw->is_object()) return Bad("'chat_template_kwargs' must be an object", "chat_template_kwargs");
    // Names the server itself gives the template (the validated messages and tools, the special
    // tokens) and the template's built-in functions cannot be replaced from a request.
    for (const char* reserved : {"messages", "tools", "add_generation_prompt", "documents", "continue_final_message",
                                 "bos_token", "eos_token", "pad_token", "unk_token", "raise_exception", "strftime_now",
                                 "namespace", "range", "dict", "lipsum", "cycler", "joiner"}) {
      if (kw->contains(reserved)) {
        return Bad(fmt::format("chat_template_kwargs: '{}' is set by the server and cannot be given here", reserved),
                   "chat_template_kwargs");
      }
    }
    opt.extra = nlohmann::ordered_json::parse(kw->dump());
    if (kw->contains("enable_thinking") && (*kw)["enable_thinking"].is_boolean()) {
      opt.enable_thinking = (*kw)["enable_thinking"].get<bool>();
      opt.extra.erase("enable_thinking");
    }
  }
  auto messages = nlohmann::ordered_json::parse(m->dump());
  if (auto e = ParseToolCallArguments(&messages)) return e;
  auto rendered = tmpl.Render(messages, opt);
  if (!rendered.ok()) return Bad(rendered.status().message(), "messages");
  *out = rendered.value();
  return std::nullopt;
}

// Where a chat's next turn will part from `prompt` (its tokens): the template renders the same
// body with an assistant reply and a user turn after its messages, and the two agree up to
// there — Qwen's templates, for one, render a past assistant turn without the empty think block
// the generation prompt holds. At most the prompt's length less one (its last token runs for the
// first token's logits); 0 when they agree on nothing or the longer rendering fails (the request
// itself is unaffected).
int NextTurnPart(const json& body, const ChatTemplate& tmpl, const Tokenizer& tok, const std::vector<int32_t>& prompt) {
  json next = body;
  next["messages"].push_back({{"role", "assistant"}, {"content", "."}});
  next["messages"].push_back({{"role", "user"}, {"content", "."}});
  std::string text;
  if (RenderMessages(next, tmpl, /*add_generation_prompt=*/true, &text)) return 0;
  auto ids = tok.Encode(text);
  if (!ids.ok()) return 0;
  const auto n = std::mismatch(prompt.begin(), prompt.end(), ids->begin(), ids->end()).first - prompt.begin();
  return static_cast<int>(std::min<std::ptrdiff_t>(n, static_cast<std::ptrdiff_t>(prompt.size()) - 1));
}

// A JSON array of token ids (each an integer below the tokenizer's vocabulary) into ids; an
// error names the field and the index. `integer_rule` words the type error.
std::optional<ApiError> TokenIds(const json& a, const char* field, const char* integer_rule, const Tokenizer& tok,
                                 std::vector<int32_t>* ids) {
  ids->reserve(ids->size() + a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].is_number_integer()) return Bad(fmt::format("{}[{}] must be {}", field, i, integer_rule), field);
    const int64_t id = a[i].get<int64_t>();
    if (id < 0 || id >= tok.vocab_size()) {
      return Bad(fmt::format("{}[{}] = {} is outside the tokenizer's vocabulary (0..{})", field, i, id, tok.vocab_size() - 1),
                 field);
    }
    ids->push_back(static_cast<int32_t>(id));
  }
  return std::nullopt;
}

}  // namespace

ojson ApiError::Json() const {
  // code: the HTTP status, as vLLM's error objects carry it.
  return {{"error", {{"message", message}, {"type", type}, {"param", param.empty() ? ojson(nullptr) : ojson(param)},
                     {"code", status}}}};
}

std::optional<ApiError> ParseJsonBody(const std::string& text, nlohmann::json* body) {
  // Before parsing: the walks of a parsed body (dump, the template's values) recurse a level
  // at a time, and one request nested 100,000 deep would overflow this thread's stack.
  if (Status depth = CheckJsonDepth(text, "the request body"); !depth.ok()) {
    return ApiError{400, depth.message(), "invalid_request_error", ""};
  }
  try {
    *body = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return ApiError{400, fmt::format("the request body is not valid JSON: {}", e.what()), "invalid_request_error", ""};
  }
  return std::nullopt;
}

Result<int> ServedContext(int requested, int model_context, int64_t kv_tokens) {
  if (requested < 0) return InvalidArgument(fmt::format("--max-model-len {}: must be positive (0: automatic)", requested));
  if (model_context > 0 && requested > model_context) {
    return InvalidArgument(fmt::format("--max-model-len {} is over the model's context of {} tokens "
                                       "(max_position_embeddings)",
                                       requested, model_context));
  }
  if (kv_tokens > 0 && requested > kv_tokens) {
    return InvalidArgument(fmt::format("--max-model-len {}: one sequence of that length needs {} tokens of KV, but the "
                                       "KV pool (--kv-tokens) is {}; raise --kv-tokens or lower --max-model-len",
                                       requested, requested, kv_tokens));
  }
  if (requested > 0) return requested;
  int64_t c = model_context > 0 ? model_context : kv_tokens;
  if (kv_tokens > 0) c = std::min<int64_t>(c, kv_tokens);
  return static_cast<int>(c);
}

std::optional<ApiError> ServedModels::Resolve(const json& body, int32_t* slot, std::string* name, std::string* mode) const {
  std::string want;
  if (auto m = body.find("mode"); m != body.end() && !m->is_null()) {
    if (!m->is_string()) return Bad("'mode' must be \"lora\" or \"exact\"", "mode");
    want = m->get<std::string>();
    if (Status st = CheckMode(want); !st.ok()) return Bad(st.message(), "mode");
  }
  if (mode) mode->clear();
  auto it = body.find("model");
  if (it == body.end() || it->is_null() || (it->is_string() && it->get<std::string>() == base_name)) {
    *slot = 0;
    *name = base_name;
    return std::nullopt;  // the base is its own exact arithmetic: either mode serves it
  }
  if (!it->is_string()) return Bad("'model' must be a string", "model");
  const std::string m = it->get<std::string>();
  auto a = adapters.find(m);
  if (a == adapters.end()) {
    return ApiError{404, fmt::format("The model '{}' does not exist; GET /v1/models lists the base and every adapter", m),
                    "not_found_error", "model"};
  }
  auto s = a->second.slots.Select(want, m);
  if (!s.ok()) return Bad(s.status().message(), "mode");
  *slot = s.value();
  *name = m;
  if (mode) *mode = *slot == a->second.slots.exact ? "exact" : "lora";
  return std::nullopt;
}

std::optional<ApiError> ParseGenerationRequest(const json& body, bool chat, const ServedModels& models, const Tokenizer& tok,
                                               const ChatTemplate& tmpl, const std::set<int32_t>& stop_tokens,
                                               GenerationApiRequest* out, const std::string* raw_body) {
  if (!body.is_object()) return Bad("the request body must be a JSON object", "");
  out->chat = chat;
  if (auto e = models.Resolve(body, &out->slot, &out->model)) return e;
  auto number = [&](const char* key, double lo, double hi, double* v) -> std::optional<ApiError> {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) return std::nullopt;
    if (!it->is_number()) return Bad(fmt::format("'{}' must be a number", key), key);
    const double x = it->get<double>();
    if (!(x >= lo && x <= hi)) return Bad(fmt::format("'{}' = {} is outside [{}, {}]", key, x, lo, hi), key);
    *v = x;
    return std::nullopt;
  };
  auto integer = [&](const char* key, int64_t lo, int64_t hi, int64_t* v) -> std::optional<ApiError> {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) return std::nullopt;
    if (!it->is_number_integer()) return Bad(fmt::format("'{}' must be an integer", key), key);
    const int64_t x = it->get<int64_t>();
    if (x < lo || x > hi) return Bad(fmt::format("'{}' = {} is outside [{}, {}]", key, x, lo, hi), key);
    *v = x;
    return std::nullopt;
  };
  auto boolean = [&](const char* key, bool* v) -> std::optional<ApiError> {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) return std::nullopt;
    if (!it->is_boolean()) return Bad(fmt::format("'{}' must be true or false", key), key);
    *v = it->get<bool>();
    return std::nullopt;
  };
  // Prompt.
  std::vector<std::vector<int32_t>> prompts;
  if (chat) {
    if (auto e = RenderMessages(body, tmpl, /*add_generation_prompt=*/true, &out->prompt_text)) return e;
    auto ids = tok.Encode(out->prompt_text);
    if (!ids.ok()) return Bad(ids.status().message(), "messages");
    if (ids->empty()) return Bad("the prompt encodes to no tokens", "messages");
    if (models.turn_snapshots) out->gen.snapshot_at = NextTurnPart(body, tmpl, tok, *ids);
    prompts.push_back(std::move(ids).value());
  } else {
    // OpenAI's forms: a string, token ids, or an array of either (one batch of prompts).
    auto p = body.find("prompt");
    if (p == body.end()) return Bad("missing required field 'prompt'", "prompt");
    auto one = [&](const json& x, const std::string& where) -> std::optional<ApiError> {
      std::vector<int32_t> ids;
      if (x.is_string()) {
        auto enc = tok.Encode(x.get<std::string>());
        if (!enc.ok()) return Bad(where + ": " + enc.status().message(), "prompt");
        ids = std::move(enc).value();
        if (ids.empty()) return Bad(where + " encodes to no tokens", "prompt");
      } else if (x.is_array() && !x.empty() && x[0].is_number()) {
        if (auto e = TokenIds(x, where.c_str(), "a token id (an integer)", tok, &ids)) return e;
      } else {
        return Bad(where + " must be a string or an array of token ids", "prompt");
      }
      prompts.push_back(std::move(ids));
      return std::nullopt;
    };
    if (p->is_string() || (p->is_array() && !p->empty() && (*p)[0].is_number())) {
      if (auto e = one(*p, "prompt")) return e;
    } else if (p->is_array() && !p->empty()) {
      if (p->size() > kMaxChoices) return Bad(fmt::format("'prompt' holds {} prompts; at most {}", p->size(), kMaxChoices), "prompt");
      for (size_t i = 0; i < p->size(); ++i) {
        if (auto e = one((*p)[i], fmt::format("prompt[{}]", i))) return e;
      }
    } else {
      return Bad("'prompt' must be a string, token ids, or a non-empty array of strings or of token-id arrays", "prompt");
    }
    out->prompt_text = tok.Decode(prompts[0]);
    if (body.contains("suffix") && !body["suffix"].is_null()) return Bad("'suffix' is not supported", "suffix");
  }
  if (auto e = boolean("echo", &out->echo)) return e;
  if (out->echo && chat) return Bad("'echo' is a /v1/completions option", "echo");
  out->gen.prompt = prompts[0];
  out->gen.adapter_slot = out->slot;
  // Sampling and limits.
  // Defaults: the model's generation_config.json where it sets them (as vLLM applies them), else
  // OpenAI's; the request's own values win.
  const SamplingDefaults& dflt = models.defaults;
  double temperature = dflt.temperature.value_or(1.0), top_p = dflt.top_p.value_or(1.0), min_p = dflt.min_p.value_or(0),
         presence = 0, frequency = 0, repetition = dflt.repetition_penalty.value_or(1.0);
  // No seed (or null): a fresh one, as OpenAI and vLLM draw one; a given seed stays reproducible.
  std::random_device rd;
  int64_t top_k = dflt.top_k.value_or(0), seed = static_cast<int64_t>((uint64_t{rd()} << 32) | rd()), n = 1, top_logprobs = -1;
  int64_t max_tokens = -1;
  if (auto e = number("temperature", 0, 2, &temperature)) return e;
  if (auto e = number("top_p", 1e-9, 1, &top_p)) return e;
  if (auto e = integer("top_k", -1, 1 << 30, &top_k)) return e;
  if (auto e = number("min_p", 0, 1, &min_p)) return e;
  if (auto e = integer("seed", INT64_MIN, INT64_MAX, &seed)) return e;
  if (auto e = integer("n", 1, kMaxChoices, &n)) return e;
  if (prompts.size() * static_cast<size_t>(n) > kMaxChoices) {
    return Bad(fmt::format("{} prompts with n = {} make {} choices; at most {}", prompts.size(), n, prompts.size() * n,
                           kMaxChoices),
               "n");
  }
  if (auto e = number("presence_penalty", -2, 2, &presence)) return e;
  if (auto e = number("frequency_penalty", -2, 2, &frequency)) return e;
  if (auto e = number("repetition_penalty", 0, 1e6, &repetition)) return e;
  if (!(repetition > 0)) return Bad("'repetition_penalty' must be > 0 (1 disables it)", "repetition_penalty");
  // logit_bias: {"token id": bias in [-100, 100]} (OpenAI's shape; ids are the model's).
  if (auto lb = body.find("logit_bias"); lb != body.end() && !lb->is_null()) {
    if (!lb->is_object()) return Bad("'logit_bias' must be an object mapping token ids to biases", "logit_bias");
    for (const auto& [key, value] : lb->items()) {
      const bool digits = !key.empty() && key.size() <= 9 && key.find_first_not_of("0123456789") == std::string::npos;
      if (!digits) {
        return Bad(fmt::format("logit_bias: key '{}' is not a token id (a non-negative integer written as a string)",
                               key.substr(0, 40)),
                   "logit_bias");
      }
      if (!value.is_number()) return Bad(fmt::format("logit_bias: the bias for token {} must be a number", key), "logit_bias");
      const double b = value.get<double>();
      if (!(b >= -100 && b <= 100)) {
        return Bad(fmt::format("logit_bias: the bias {} for token {} is outside [-100, 100]", b, key), "logit_bias");
      }
      out->gen.sampling.logit_bias.emplace_back(std::stoi(key), static_cast<float>(b));
    }
  }
  if (auto e = integer("max_tokens", 1, 1 << 24, &max_tokens)) return e;
  if (auto e = integer("max_completion_tokens", 1, 1 << 24, &max_tokens)) return e;
  if (auto e = boolean("stream", &out->stream)) return e;
  if (chat) {
    if (auto e = boolean("logprobs", &out->logprobs)) return e;
    if (auto e = integer("top_logprobs", 0, 20, &top_logprobs)) return e;
    if (top_logprobs >= 0 && !out->logprobs) return Bad("'top_logprobs' needs 'logprobs': true", "top_logprobs");
    if (out->logprobs && top_logprobs < 0) top_logprobs = 0;
  } else {
    int64_t lp = -1;
    if (auto e = integer("logprobs", 0, 20, &lp)) return e;
    out->logprobs = lp >= 0;
    top_logprobs = lp;
  }
  if (chat) {  // how the output splits (server/chat_output.h)
    out->output.reasoning = models.reasoning_parser;
    out->output.think_open = PromptOpensThinking(out->prompt_text);
    auto tools = body.find("tools");
    auto tc = body.find("tool_choice");
    const bool none = tc != body.end() && tc->is_string() && *tc == "none";
    out->output.tools = tools != body.end() && tools->is_array() && !tools->empty() && !none;
    if (out->output.tools) out->output.tools_schema = *tools;
  }
  // Structured output: the grammar holds the answer — after the reasoning when the prompt opened
  // a thinking block and the reasoning parser splits it off, as vLLM does.
  if (auto e = ParseStructuredOutput(body, raw_body, &out->gen.grammar)) return e;
  std::shared_ptr<const Grammar> forced;  // tool_choice "required" or a named function
  if (auto e = ParseToolChoice(body, raw_body, chat, &forced)) return e;
  if (forced && out->gen.grammar) {
    return Bad("tool_choice forcing a call and a structured-output constraint cannot be combined", "tool_choice");
  }
  if (forced) out->gen.grammar = std::move(forced);
  if (out->gen.grammar && chat && out->output.reasoning && out->output.think_open) out->gen.grammar_gate = "</think>";
  auto so = body.find("stream_options");
  if (so != body.end() && so->is_object() && so->contains("include_usage") && (*so)["include_usage"].is_boolean()) {
    out->include_usage = (*so)["include_usage"].get<bool>();
  }
  auto stop = body.find("stop");
  if (stop != body.end() && !stop->is_null()) {
    if (stop->is_string()) {
      out->gen.stop_strings.push_back(stop->get<std::string>());
    } else if (stop->is_array() && stop->size() <= 4) {
      for (const auto& s : *stop) {
        if (!s.is_string()) return Bad("'stop' entries must be strings", "stop");
        out->gen.stop_strings.push_back(s.get<std::string>());
      }
    } else {
      return Bad("'stop' must be a string or an array of at most 4 strings", "stop");
    }
    for (const auto& s : out->gen.stop_strings) if (s.empty()) return Bad("'stop' strings must not be empty", "stop");
  }
  // vLLM's extensions: stop_token_ids (beside the model's end tokens, which ignore_eos drops)
  // and min_tokens (no stop of any kind before that many tokens).
  bool ignore_eos = false;
  int64_t min_tokens = 0;
  if (auto e = boolean("ignore_eos", &ignore_eos)) return e;
  if (auto e = integer("min_tokens", 0, 1 << 24, &min_tokens)) return e;
  out->gen.stop_tokens = ignore_eos ? std::set<int32_t>{} : stop_tokens;
  if (auto ids = body.find("stop_token_ids"); ids != body.end() && !ids->is_null()) {
    if (!ids->is_array() || ids->size() > 1024) {
      return Bad("'stop_token_ids' must be an array of at most 1024 token ids", "stop_token_ids");
    }
    for (const auto& id : *ids) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
        return Bad(fmt::format("'stop_token_ids' entries must be token ids (non-negative integers); got {}",
                               id.dump().substr(0, 40)),
                   "stop_token_ids");
      }
      out->gen.stop_tokens.insert(static_cast<int32_t>(id.get<int64_t>()));
    }
  }
  const int64_t asked = max_tokens;
  // Per prompt: no max_tokens is the rest of the context, as vLLM — or of the KV budget when that is
  // smaller (a request reserves its KV up front), or generation_config's max_new_tokens when less.
  auto limit = [&](int64_t prompt, int64_t* mt) -> std::optional<ApiError> {
    *mt = asked;
    if (*mt < 0) {
      int64_t room = int64_t{1} << 24;
      if (models.context > 0) room = std::min<int64_t>(room, models.context - prompt);
      if (models.kv_tokens > 0) room = std::min<int64_t>(room, models.kv_tokens - prompt);
      *mt = std::max<int64_t>(room, 1);
      if (dflt.max_tokens) *mt = std::min(*mt, *dflt.max_tokens);
    }
    if (models.context > 0 && prompt + *mt > models.context) {
      return Bad(fmt::format("This model's maximum context length is {} tokens. However, you requested {} tokens ({} in "
                             "the prompt, {} for the completion). Please reduce the prompt or max_tokens.",
                             models.context, prompt + *mt, prompt, *mt),
                 chat ? "messages" : "prompt");
    }
    if (min_tokens > *mt) return Bad(fmt::format("'min_tokens' ({}) exceeds max_tokens ({})", min_tokens, *mt), "min_tokens");
    return std::nullopt;
  };
  if (auto e = limit(static_cast<int64_t>(out->gen.prompt.size()), &max_tokens)) return e;
  out->gen.max_tokens = static_cast<int>(max_tokens);
  out->gen.min_tokens = static_cast<int>(min_tokens);
  out->gen.sampling.temperature = static_cast<float>(temperature);
  out->gen.sampling.top_p = static_cast<float>(top_p);
  out->gen.sampling.top_k = top_k < 0 ? 0 : static_cast<int>(top_k);
  out->gen.sampling.min_p = static_cast<float>(min_p);
  out->gen.sampling.presence_penalty = static_cast<float>(presence);
  out->gen.sampling.frequency_penalty = static_cast<float>(frequency);
  out->gen.sampling.repetition_penalty = static_cast<float>(repetition);
  out->gen.sampling.seed = static_cast<uint64_t>(seed);
  out->gen.top_logprobs = static_cast<int>(top_logprobs);
  out->gen.prompt_logprobs = out->echo && out->logprobs;
  // The choices: prompt-major, n each; choice j of a prompt draws with seed + j (so a seeded
  // request repeats every choice, and its choices differ).
  out->choices.clear();
  out->n = static_cast<int>(n);
  for (const auto& ids : prompts) {
    int64_t mt = 0;
    if (auto e = limit(static_cast<int64_t>(ids.size()), &mt)) return e;
    for (int64_t j = 0; j < n; ++j) {
      GenerationRequest g = out->gen;
      g.prompt = ids;
      g.max_tokens = static_cast<int>(mt);
      g.sampling.seed = static_cast<uint64_t>(seed) + static_cast<uint64_t>(j);
      out->choices.push_back(std::move(g));
      if (out->echo) out->echo_texts.push_back(tok.Decode(ids));
    }
  }
  return std::nullopt;
}

std::optional<ApiError> ParseTokenizeRequest(const json& body, const ServedModels& models, const Tokenizer& tok,
                                             const ChatTemplate& tmpl, std::vector<int32_t>* ids) {
  if (!body.is_object()) return Bad("the request body must be a JSON object", "");
  int32_t slot = 0;
  std::string name;
  if (auto e = models.Resolve(body, &slot, &name)) return e;
  for (const char* flag : {"add_generation_prompt", "add_special_tokens", "continue_final_message"}) {
    if (auto it = body.find(flag); it != body.end() && !it->is_null() && !it->is_boolean()) {
      return Bad(fmt::format("'{}' must be true or false", flag), flag);
    }
  }
  if (auto it = body.find("return_token_strs"); it != body.end() && it->is_boolean() && it->get<bool>()) {
    return Bad("'return_token_strs' is not supported", "return_token_strs");
  }
  if (auto it = body.find("continue_final_message"); it != body.end() && it->is_boolean() && it->get<bool>()) {
    return Bad("'continue_final_message' is not supported", "continue_final_message");
  }
  const bool has_messages = body.contains("messages"), has_prompt = body.contains("prompt");
  if (has_messages == has_prompt) return Bad("give exactly one of 'prompt' and 'messages'", has_prompt ? "prompt" : "messages");
  std::string text;
  if (has_messages) {
    const auto ag = body.find("add_generation_prompt");  // a boolean or null (checked above); null is the default
    const bool add = ag == body.end() || ag->is_null() || ag->get<bool>();
    if (auto e = RenderMessages(body, tmpl, add, &text)) return e;
  } else {
    const json& p = body["prompt"];
    if (!p.is_string()) return Bad("'prompt' must be a string", "prompt");
    text = p.get<std::string>();
  }
  auto encoded = tok.Encode(text);
  if (!encoded.ok()) return Bad(encoded.status().message(), has_messages ? "messages" : "prompt");
  *ids = std::move(encoded).value();
  return std::nullopt;
}

std::optional<ApiError> ParseDetokenizeRequest(const json& body, const ServedModels& models, const Tokenizer& tok,
                                               std::string* text) {
  if (!body.is_object()) return Bad("the request body must be a JSON object", "");
  int32_t slot = 0;
  std::string name;
  if (auto e = models.Resolve(body, &slot, &name)) return e;
  auto it = body.find("tokens");
  if (it == body.end() || !it->is_array()) return Bad("'tokens' must be an array of token ids", "tokens");
  std::vector<int32_t> ids;
  if (auto e = TokenIds(*it, "tokens", "an integer", tok, &ids)) return e;
  *text = tok.Decode(ids);
  return std::nullopt;
}

ojson LogprobsJson(const std::vector<TokenLogprob>& lps, bool chat) {
  if (chat) {
    ojson content = ojson::array();
    for (const auto& t : lps) {
      ojson top = ojson::array();
      for (const auto& [text, lp] : t.top) {
        top.push_back({{"token", text}, {"logprob", lp}, {"bytes", std::vector<uint8_t>(text.begin(), text.end())}});
      }
      content.push_back({{"token", t.text}, {"logprob", t.logprob}, {"bytes", std::vector<uint8_t>(t.text.begin(), t.text.end())},
                         {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  ojson tokens = ojson::array(), lp = ojson::array(), top = ojson::array();
  for (const auto& t : lps) {
    tokens.push_back(t.text);
    if (!t.known) {  // an echoed prompt's first token: nothing predicts it
      lp.push_back(nullptr);
      top.push_back(nullptr);
      continue;
    }
    lp.push_back(t.logprob);
    ojson m = ojson::object();
    for (const auto& [text, v] : t.top) m[text] = v;
    top.push_back(m);
  }
  return {{"tokens", tokens}, {"token_logprobs", lp}, {"top_logprobs", top}};
}

namespace {

ojson ToolCallsJson(const std::vector<ToolCall>& calls, int first) {
  ojson a = ojson::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    a.push_back({{"index", first + static_cast<int>(i)}, {"id", calls[i].id}, {"type", "function"},
                 {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}});
  }
  return a;
}

bool Blank(const std::string& s) { return s.find_first_not_of(" \n\r\t") == std::string::npos; }

}  // namespace

ojson UsageJson(int prompt_tokens, int completion_tokens, int cached_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
}

ojson CompletionJson(const GenerationApiRequest& r, const std::string& id, int64_t created,
                     const std::vector<ChoiceResult>& choices, int prompt_tokens, int completion_tokens,
                     int cached_tokens) {
  ojson list = ojson::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChatOutput& out = choices[i].out;
    ojson choice;
    choice["index"] = i;
    const bool calls = !out.tool_calls.empty();
    if (r.chat) {
      ojson m = {{"role", "assistant"}, {"content", calls && Blank(out.content) ? ojson(nullptr) : ojson(out.content)}};
      if (!out.reasoning.empty()) m["reasoning_content"] = out.reasoning;
      if (calls) m["tool_calls"] = ToolCallsJson(out.tool_calls, 0);
      choice["message"] = m;
    } else {
      choice["text"] = out.content;
    }
    choice["logprobs"] = r.logprobs ? LogprobsJson(choices[i].logprobs, r.chat) : ojson(nullptr);
    choice["finish_reason"] = calls ? "tool_calls" : choices[i].finish_reason;
    list.push_back(std::move(choice));
  }
  return {{"id", id},
          {"object", r.chat ? "chat.completion" : "text_completion"},
          {"created", created},
          {"model", r.model},
          {"choices", list},
          {"usage", UsageJson(prompt_tokens, completion_tokens, cached_tokens)}};
}

ojson ChunkJson(const GenerationApiRequest& r, const std::string& id, int64_t created, int index,
                const std::string* role, const ChatOutput& out, int first_call, const std::vector<TokenLogprob>* lps,
                const std::string* finish_reason) {
  ojson choice;
  choice["index"] = index;
  if (r.chat) {
    ojson delta = ojson::object();
    if (role) delta["role"] = *role;
    const bool other = !out.reasoning.empty() || !out.tool_calls.empty();
    if (!out.content.empty() || (!role && !finish_reason && !other)) delta["content"] = out.content;
    if (!out.reasoning.empty()) delta["reasoning_content"] = out.reasoning;
    if (!out.tool_calls.empty()) delta["tool_calls"] = ToolCallsJson(out.tool_calls, first_call);
    choice["delta"] = delta;
  } else {
    choice["text"] = out.content;
  }
  choice["logprobs"] = (r.logprobs && lps) ? LogprobsJson(*lps, r.chat) : ojson(nullptr);
  choice["finish_reason"] = finish_reason ? ojson(*finish_reason) : ojson(nullptr);
  return {{"id", id},
          {"object", r.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created},
          {"model", r.model},
          {"choices", ojson::array({choice})}};
}

}  // namespace graft

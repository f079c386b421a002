#include "server/responses.h"

#include <fmt/core.h>

#include <set>

namespace graft {
namespace {

using ojson = nlohmann::ordered_json;

ApiError Bad(const std::string& message, const std::string& param) { return {400, message, "invalid_request_error", param}; }

// A message's content as text: a string, or input_text / output_text parts joined.
std::optional<ApiError> ContentText(const ojson& content, size_t index, std::string* text) {
  if (content.is_string()) {
    *text = content.get<std::string>();
    return std::nullopt;
  }
  if (!content.is_array()) return Bad(fmt::format("input[{}].content must be text or an array of parts", index), "input");
  for (const auto& part : content) {
    const std::string type = part.is_object() ? part.value("type", "") : "";
    if ((type != "input_text" && type != "output_text") || !part.contains("text") || !part["text"].is_string()) {
      return Bad(fmt::format("input[{}].content: only input_text and output_text parts are supported (got '{}')", index,
                             type.substr(0, 40)),
                 "input");
    }
    *text += part["text"].get<std::string>();
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ResponsesToChat(const std::string& raw_body, std::string* chat_raw, bool* stream,
                                        ojson* metadata) {
  const ojson body = ojson::parse(raw_body, nullptr, false);
  if (!body.is_object()) return Bad("the request body must be a JSON object", "");
  static const std::set<std::string> kRefused = {"previous_response_id", "tools", "tool_choice", "reasoning", "include",
                                                 "top_logprobs", "prompt", "conversation", "parallel_tool_calls"};
  static const std::set<std::string> kKnown = {"model", "input", "instructions", "max_output_tokens", "temperature",
                                               "top_p", "text", "stream", "store", "metadata", "user", "truncation",
                                               "background", "service_tier", "chat_template_kwargs"};
  for (const auto& [k, v] : body.items()) {
    if (v.is_null()) continue;
    if (kRefused.count(k)) return Bad(fmt::format("'{}' is not supported by graft's /v1/responses", k), k);
    if (!kKnown.count(k)) return Bad(fmt::format("unknown field '{}'", k.substr(0, 64)), k);
  }
  if (auto s = body.find("store"); s != body.end() && s->is_boolean() && s->get<bool>()) {
    return Bad("'store': true — graft keeps no responses (send false or leave it out)", "store");
  }
  if (auto b = body.find("background"); b != body.end() && b->is_boolean() && b->get<bool>()) {
    return Bad("'background': true is not supported", "background");
  }
  if (auto t = body.find("truncation"); t != body.end() && !t->is_null() && *t != "disabled") {
    return Bad("'truncation': only \"disabled\"", "truncation");
  }
  if (auto t = body.find("service_tier"); t != body.end() && !t->is_null() && *t != "auto" && *t != "default") {
    return Bad("'service_tier': only \"auto\" or \"default\"", "service_tier");
  }
  ojson chat = ojson::object();
  if (body.contains("model")) chat["model"] = body["model"];
  ojson messages = ojson::array();
  if (auto ins = body.find("instructions"); ins != body.end() && !ins->is_null()) {
    if (!ins->is_string()) return Bad("'instructions' must be a string", "instructions");
    messages.push_back({{"role", "system"}, {"content", *ins}});
  }
  auto input = body.find("input");
  if (input == body.end() || input->is_null()) return Bad("'input' is required", "input");
  if (input->is_string()) {
    messages.push_back({{"role", "user"}, {"content", *input}});
  } else if (input->is_array()) {
    for (size_t i = 0; i < input->size(); ++i) {
      const ojson& item = (*input)[i];
      if (!item.is_object()) return Bad(fmt::format("input[{}] must be a message object", i), "input");
      const std::string type = item.value("type", "message");
      if (type != "message") {
        return Bad(fmt::format("input[{}]: items of type '{}' are not supported (messages only)", i, type.substr(0, 40)),
                   "input");
      }
      const std::string role = item.value("role", "");
      if (role != "user" && role != "assistant" && role != "system" && role != "developer") {
        return Bad(fmt::format("input[{}].role must be user, assistant, system or developer", i), "input");
      }
      std::string text;
      if (auto e = ContentText(item.value("content", ojson()), i, &text)) return e;
      messages.push_back({{"role", role == "developer" ? "system" : role}, {"content", text}});
    }
  } else {
    return Bad("'input' must be text or an array of messages", "input");
  }
  chat["messages"] = std::move(messages);
  if (body.contains("max_output_tokens") && !body["max_output_tokens"].is_null()) {
    chat["max_tokens"] = body["max_output_tokens"];
  }
  for (const char* k : {"temperature", "top_p", "user", "chat_template_kwargs"}) {
    if (body.contains(k) && !body[k].is_null()) chat[k] = body[k];
  }
  if (auto text = body.find("text"); text != body.end() && !text->is_null()) {
    if (!text->is_object()) return Bad("'text' must be an object", "text");
    for (const auto& [k, v] : text->items()) {
      if (k != "format" && k != "verbosity") return Bad(fmt::format("text.{} is not supported", k.substr(0, 40)), "text");
      if (k == "verbosity" && !v.is_null()) return Bad("text.verbosity is not supported", "text");
    }
    if (auto f = text->find("format"); f != text->end() && !f->is_null()) {
      if (!f->is_object() || !f->contains("type") || !(*f)["type"].is_string()) {
        return Bad("text.format must be an object with a string 'type'", "text");
      }
      const std::string type = (*f)["type"];
      if (type == "json_schema") {  // the Responses API flattens chat's json_schema object
        ojson js = ojson::object();
        for (const char* k : {"name", "schema", "strict", "description"}) {
          if (f->contains(k)) js[k] = (*f)[k];
        }
        chat["response_format"] = {{"type", "json_schema"}, {"json_schema", js}};
      } else {
        chat["response_format"] = {{"type", type}};
      }
    }
  }
  *stream = false;
  if (auto s = body.find("stream"); s != body.end() && !s->is_null()) {
    if (!s->is_boolean()) return Bad("'stream' must be true or false", "stream");
    *stream = s->get<bool>();
  }
  chat["stream"] = *stream;
  *metadata = ojson::object();
  if (auto m = body.find("metadata"); m != body.end() && !m->is_null()) {
    if (!m->is_object() || m->size() > 16) return Bad("'metadata' must be an object of at most 16 keys", "metadata");
    for (const auto& [k, v] : m->items()) {
      if (!v.is_string()) return Bad(fmt::format("metadata.{} must be a string", k.substr(0, 40)), "metadata");
    }
    *metadata = *m;
  }
  *chat_raw = chat.dump();
  return std::nullopt;
}

ojson ResponseJson(const ResponseHead& h, const std::string& status, const ChatOutput* out, int input_tokens,
                   int output_tokens, int cached_tokens) {
  ojson output = ojson::array();
  if (out) {
    if (!out->reasoning.empty()) {
      output.push_back({{"type", "reasoning"},
                        {"id", "rs_" + h.item_id.substr(4)},
                        {"summary", ojson::array()},
                        {"content", ojson::array({{{"type", "reasoning_text"}, {"text", out->reasoning}}})}});
    }
    output.push_back({{"type", "message"},
                      {"id", h.item_id},
                      {"status", status == "incomplete" ? "incomplete" : "completed"},
                      {"role", "assistant"},
                      {"content", ojson::array({{{"type", "output_text"}, {"text", out->content}, {"annotations", ojson::array()}}})}});
  }
  ojson r = {{"id", h.id},
             {"object", "response"},
             {"created_at", h.created},
             {"status", status},
             {"error", nullptr},
             {"incomplete_details", status == "incomplete" ? ojson{{"reason", "max_output_tokens"}} : ojson()},
             {"model", h.model},
             {"output", output},
             {"parallel_tool_calls", false},
             {"store", false},
             {"metadata", h.metadata}};
  r["usage"] = out ? ojson{{"input_tokens", input_tokens},
                           {"input_tokens_details", {{"cached_tokens", cached_tokens}}},
                           {"output_tokens", output_tokens},
                           {"total_tokens", input_tokens + output_tokens}}
                   : ojson();
  return r;
}

std::string ResponseEvent(const std::string& type, ojson payload, int* sequence) {
  ojson e = {{"type", type}, {"sequence_number", (*sequence)++}};
  for (auto& [k, v] : payload.items()) e[k] = v;
  return "event: " + type + "\ndata: " + e.dump(-1, ' ', false, ojson::error_handler_t::replace) + "\n\n";
}

}  // namespace graft

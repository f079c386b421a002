#include "server/structured_output.h"

#include <fmt/core.h>

#include <optional>

#include "grammar/json_schema.h"
#include "grammar/regex.h"
#include "server/api.h"

namespace graft {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

ApiError Bad(const std::string& message, const std::string& param) { return {400, message, "invalid_request_error", param}; }

// The request body with its keys in written order, parsed from the raw text once, when first asked.
class OrderedBody {
 public:
  explicit OrderedBody(const std::string* raw) : raw_(raw) {}
  // The value at `path` (object keys, or array indices as numbers) in written order; `value`'s
  // own (alphabetical) order where the raw text is missing or does not hold the path.
  ojson At(const json& value, const std::vector<std::string>& path) {
    if (raw_ && !whole_) whole_ = ojson::parse(*raw_, nullptr, false);
    if (!whole_) return ojson::parse(value.dump());
    const ojson* at = &*whole_;
    for (const std::string& k : path) {
      if (at->is_object() && at->contains(k)) {
        at = &(*at)[k];
      } else if (at->is_array() && !k.empty() && k.find_first_not_of("0123456789") == std::string::npos &&
                 std::stoul(k) < at->size()) {
        at = &(*at)[std::stoul(k)];
      } else {
        return ojson::parse(value.dump());
      }
    }
    return *at;
  }

 private:
  const std::string* raw_;
  std::optional<ojson> whole_;
};

std::optional<ApiError> Schema(const json& schema, OrderedBody& ordered, const std::vector<std::string>& path,
                               const std::string& param, std::shared_ptr<const Grammar>* grammar) {
  ojson s;
  if (schema.is_string()) {  // guided_json may carry the schema as JSON text
    s = ojson::parse(schema.get<std::string>(), nullptr, false);
    if (s.is_discarded()) return Bad(fmt::format("'{}' is a string that is not JSON", param), param);
  } else if (schema.is_object() || schema.is_boolean()) {
    s = ordered.At(schema, path);
  } else {
    return Bad(fmt::format("'{}' must be a JSON schema (an object)", param), param);
  }
  auto g = JsonSchemaGrammar(s);
  if (!g.ok()) return Bad(fmt::format("{}: {}", param, g.status().message()), param);
  *grammar = *g;
  return std::nullopt;
}

std::optional<ApiError> Choice(const json& choices, const std::string& param, std::shared_ptr<const Grammar>* grammar) {
  if (!choices.is_array() || choices.empty()) return Bad(fmt::format("'{}' must be a non-empty array of strings", param), param);
  std::vector<std::string> list;
  for (const auto& c : choices) {
    if (!c.is_string()) return Bad(fmt::format("'{}' must be a non-empty array of strings", param), param);
    list.push_back(c.get<std::string>());
  }
  auto g = ChoiceGrammar(list);
  if (!g.ok()) return Bad(fmt::format("{}: {}", param, g.status().message()), param);
  *grammar = *g;
  return std::nullopt;
}

std::optional<ApiError> Regex(const json& pattern, const std::string& param, std::shared_ptr<const Grammar>* grammar) {
  if (!pattern.is_string() || pattern.get<std::string>().empty()) {
    return Bad(fmt::format("'{}' must be a non-empty string (a regular expression)", param), param);
  }
  auto g = RegexGrammar(pattern.get<std::string>());
  if (!g.ok()) return Bad(fmt::format("{}: {}", param, g.status().message()), param);
  *grammar = *g;
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParseToolChoice(const json& body, const std::string* raw_body, bool chat,
                                        std::shared_ptr<const Grammar>* grammar) {
  grammar->reset();
  auto tc = body.find("tool_choice");
  if (tc == body.end() || tc->is_null() || (tc->is_string() && (*tc == "none" || *tc == "auto"))) return std::nullopt;
  const bool required = tc->is_string() && *tc == "required";
  std::string name;
  if (!required) {
    const bool named = tc->is_object() && tc->value("type", json()) == "function" && tc->contains("function") &&
                       (*tc)["function"].is_object() && (*tc)["function"].contains("name") &&
                       (*tc)["function"]["name"].is_string();
    if (!named) {
      return Bad("'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": "
                 "{\"name\": ...}}",
                 "tool_choice");
    }
    name = (*tc)["function"]["name"].get<std::string>();
  }
  if (!chat) return Bad("'tool_choice' is a chat completions option", "tool_choice");
  auto tools = body.find("tools");
  if (tools == body.end() || !tools->is_array() || tools->empty()) {
    return Bad("tool_choice forces a call, but the request lists no tools", "tool_choice");
  }
  std::vector<ToolSpec> specs;
  OrderedBody ordered(raw_body);
  for (size_t i = 0; i < tools->size(); ++i) {
    const json& t = (*tools)[i];
    if (!t.is_object() || !t.contains("function") || !t["function"].is_object() || !t["function"].contains("name") ||
        !t["function"]["name"].is_string()) {
      return Bad(fmt::format("tools[{}] must be {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}", i), "tools");
    }
    const std::string n = t["function"]["name"].get<std::string>();
    if (!required && n != name) continue;
    ToolSpec spec{n, nullptr};
    if (auto p = t["function"].find("parameters"); p != t["function"].end() && !p->is_null()) {
      spec.parameters = ordered.At(*p, {"tools", std::to_string(i), "function", "parameters"});
    }
    specs.push_back(std::move(spec));
  }
  if (specs.empty()) {
    return Bad(fmt::format("tool_choice names the function '{}', which tools does not list", name.substr(0, 64)), "tool_choice");
  }
  auto g = ToolCallGrammar(specs, /*several=*/required);
  if (!g.ok()) return Bad(g.status().message(), "tools");
  *grammar = *g;
  return std::nullopt;
}

std::optional<ApiError> ParseStructuredOutput(const json& body, const std::string* raw_body,
                                              std::shared_ptr<const Grammar>* grammar) {
  grammar->reset();
  OrderedBody ordered(raw_body);
  std::vector<std::string> given;  // the constraints the request names
  auto present = [&](const char* key) {
    auto it = body.find(key);
    return it != body.end() && !it->is_null();
  };
  if (present("guided_grammar")) {
    return Bad("'guided_grammar' is not supported (JSON schemas, regular expressions and choices are)", "guided_grammar");
  }
  if (present("guided_decoding_backend")) {
    const json& b = body["guided_decoding_backend"];
    if (!b.is_string() || b != "auto") {
      return Bad("'guided_decoding_backend': graft has one structured-output backend of its own; only \"auto\"",
                 "guided_decoding_backend");
    }
  }
  if (present("response_format")) {
    const json& rf = body["response_format"];
    if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string()) {
      return Bad("'response_format' must be an object with a string 'type'", "response_format");
    }
    const std::string type = rf["type"].get<std::string>();
    if (type == "json_object") {
      *grammar = JsonObjectGrammar();
      given.push_back("response_format");
    } else if (type == "json_schema") {
      auto js = rf.find("json_schema");
      if (js == rf.end() || !js->is_object() || !js->contains("schema")) {
        return Bad("response_format json_schema needs 'json_schema': {\"name\": ..., \"schema\": {...}}", "response_format");
      }
      if (auto st = js->find("strict"); st != js->end() && !st->is_null() && !st->is_boolean()) {
        return Bad("response_format.json_schema.strict must be true or false", "response_format");
      }
      if (auto e = Schema((*js)["schema"], ordered, {"response_format", "json_schema", "schema"}, "response_format", grammar)) {
        return e;
      }
      given.push_back("response_format");
    } else if (type != "text") {
      return Bad(fmt::format("response_format type '{}' is not supported ('text', 'json_object' or 'json_schema')",
                             type.substr(0, 40)),
                 "response_format");
    }
  }
  if (present("guided_json")) {
    if (auto e = Schema(body["guided_json"], ordered, {"guided_json"}, "guided_json", grammar)) return e;
    given.push_back("guided_json");
  }
  if (present("guided_regex")) {
    if (auto e = Regex(body["guided_regex"], "guided_regex", grammar)) return e;
    given.push_back("guided_regex");
  }
  if (present("guided_choice")) {
    if (auto e = Choice(body["guided_choice"], "guided_choice", grammar)) return e;
    given.push_back("guided_choice");
  }
  if (present("structured_outputs")) {
    const json& so = body["structured_outputs"];
    if (!so.is_object()) return Bad("'structured_outputs' must be an object", "structured_outputs");
    for (const auto& [k, v] : so.items()) {
      if (v.is_null()) continue;
      if (k == "json") {
        if (auto e = Schema(v, ordered, {"structured_outputs", "json"}, "structured_outputs.json", grammar)) return e;
      } else if (k == "choice") {
        if (auto e = Choice(v, "structured_outputs.choice", grammar)) return e;
      } else if (k == "regex") {
        if (auto e = Regex(v, "structured_outputs.regex", grammar)) return e;
      } else if (k == "json_object") {
        if (!v.is_boolean()) return Bad("structured_outputs.json_object must be true or false", "structured_outputs");
        if (!v.get<bool>()) continue;
        *grammar = JsonObjectGrammar();
      } else {
        return Bad(fmt::format("structured_outputs.{} is not supported (json, regex, choice or json_object)", k.substr(0, 40)),
                   "structured_outputs");
      }
      given.push_back("structured_outputs." + k);
    }
  }
  if (given.size() > 1) {
    return Bad(fmt::format("one structured-output constraint a request; this one names {} and {}", given[0], given[1]),
               given[1]);
  }
  return std::nullopt;
}

}  // namespace graft

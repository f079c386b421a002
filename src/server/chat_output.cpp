#include "server/chat_output.h"

#include <random>

namespace graft {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

constexpr std::string_view kThink = "<think>", kThinkEnd = "</think>";
constexpr std::string_view kCall = "<tool_call>", kCallEnd = "</tool_call>";
constexpr std::string_view kFunction = "<function=", kFunctionEnd = "</function>";
constexpr std::string_view kParam = "<parameter=", kParamEnd = "</parameter>";

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

// The length of the longest proper prefix of `tag` that `s` ends with: text that may yet become
// the tag, so it is held back.
size_t PartialTag(std::string_view s, std::string_view tag) {
  for (size_t k = std::min(s.size(), tag.size() - 1); k > 0; --k) {
    if (s.substr(s.size() - k) == tag.substr(0, k)) return k;
  }
  return 0;
}

std::string Dump(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

std::string NewCallId() {
  static constexpr char kHex[] = "0123456789abcdef";
  std::random_device rd;
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kHex[rd() % 16];
  return id;
}

// The JSON-schema type of tool `name`'s parameter `param` ("" when the tools do not say).
std::vector<std::string> ParamTypes(const json& tools, std::string_view name, std::string_view param) {
  if (!tools.is_array()) return {};
  for (const auto& t : tools) {
    if (!t.is_object() || !t.contains("function") || !t["function"].is_object()) continue;
    const json& f = t["function"];
    if (!f.contains("name") || !f["name"].is_string() || f["name"].get<std::string>() != name) continue;
    const json* p = f.contains("parameters") ? &f["parameters"] : nullptr;
    if (!p || !p->is_object() || !p->contains("properties") || !(*p)["properties"].is_object()) return {};
    auto it = (*p)["properties"].find(std::string(param));
    if (it == (*p)["properties"].end() || !it->is_object() || !it->contains("type")) return {};
    const json& ty = (*it)["type"];
    std::vector<std::string> out;
    if (ty.is_string()) out.push_back(ty.get<std::string>());
    if (ty.is_array()) {
      for (const auto& x : ty) if (x.is_string()) out.push_back(x.get<std::string>());
    }
    return out;
  }
  return {};
}

// An XML-style parameter's value as its schema types say: text for strings (or no schema),
// otherwise JSON where it parses (Python's True / False for booleans too), else the text.
ojson ParamValue(const std::string& text, const std::vector<std::string>& types) {
  bool as_text = types.empty();
  for (const auto& t : types) as_text = as_text || t == "string";
  if (as_text) return text;
  ojson v = ojson::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!v.is_discarded()) return v;
  for (const auto& t : types) {
    if (t == "boolean" && (text == "True" || text == "False")) return text == "True";
  }
  return text;
}

}  // namespace

void ChatOutput::Append(ChatOutput more) {
  reasoning += more.reasoning;
  content += more.content;
  for (auto& c : more.tool_calls) tool_calls.push_back(std::move(c));
}

bool PromptOpensThinking(std::string_view prompt) {
  const std::string_view t = Trim(prompt);
  return t.size() >= kThink.size() && t.substr(t.size() - kThink.size()) == kThink;
}

ChatOutputParser::ChatOutputParser(ChatOutputOptions o) : o_(std::move(o)) {
  mode_ = !o_.reasoning ? Mode::kContent : o_.think_open ? Mode::kReasoning : Mode::kStart;
}

ChatOutput ChatOutputParser::Feed(std::string_view text) {
  buf_.append(text);
  ChatOutput out;
  Run(false, &out);
  return out;
}

ChatOutput ChatOutputParser::Finish() {
  ChatOutput out;
  Run(true, &out);
  return out;
}

void ChatOutputParser::Run(bool final, ChatOutput* out) {
  while (true) {
    switch (mode_) {
      case Mode::kStart: {  // the output may open its own <think>
        const size_t n = std::min(buf_.size(), kThink.size());
        if (buf_.compare(0, n, kThink.substr(0, n)) == 0 && n < kThink.size() && !final) return;
        if (buf_.compare(0, kThink.size(), kThink) == 0) {
          buf_.erase(0, kThink.size());
          mode_ = Mode::kReasoning;
        } else {
          mode_ = Mode::kContent;
        }
        break;
      }
      case Mode::kReasoning: {
        const size_t end = buf_.find(kThinkEnd);
        if (end == std::string::npos) {
          const size_t keep = final ? 0 : PartialTag(buf_, kThinkEnd);
          out->reasoning.append(buf_, 0, buf_.size() - keep);
          buf_.erase(0, buf_.size() - keep);
          return;
        }
        out->reasoning.append(buf_, 0, end);
        buf_.erase(0, end + kThinkEnd.size());
        mode_ = Mode::kContent;
        drop_newlines_ = true;
        break;
      }
      case Mode::kContent: {
        // Newlines after </think>, whitespace after a tool call: dropped until other text comes.
        size_t lead = 0;
        while (lead < buf_.size() && (after_call_ ? IsSpace(buf_[lead]) : drop_newlines_ && buf_[lead] == '\n')) ++lead;
        buf_.erase(0, lead);
        if (buf_.empty()) return;
        drop_newlines_ = false;
        if (!o_.tools) {
          after_call_ = false;
          out->content.append(buf_);
          buf_.clear();
          return;
        }
        const size_t start = buf_.find(kCall);
        if (start == std::string::npos) {
          const size_t keep = final ? 0 : PartialTag(buf_, kCall);
          if (keep < buf_.size()) after_call_ = false;
          out->content.append(std::string_view(buf_).substr(0, buf_.size() - keep));
          buf_.erase(0, buf_.size() - keep);
          return;
        }
        if (start > 0) after_call_ = false;
        out->content.append(std::string_view(buf_).substr(0, start));
        buf_.erase(0, start + kCall.size());
        mode_ = Mode::kToolCall;
        break;
      }
      case Mode::kToolCall: {
        const size_t end = buf_.find(kCallEnd);
        if (end == std::string::npos) {
          if (!final) return;  // the whole block is held until it closes
          after_call_ = false;
          out->content.append(std::string(kCall) + buf_);  // unterminated: it stays text
          buf_.clear();
          return;
        }
        ToolCall call;
        if (ParseCall(std::string_view(buf_).substr(0, end), &call)) {
          out->tool_calls.push_back(std::move(call));
          after_call_ = true;
        } else {
          after_call_ = false;
          out->content.append(std::string(kCall) + buf_.substr(0, end + kCallEnd.size()));
        }
        buf_.erase(0, end + kCallEnd.size());
        mode_ = Mode::kContent;
        break;
      }
    }
  }
}

bool ChatOutputParser::ParseCall(std::string_view raw, ToolCall* call) const {
  const std::string_view body = Trim(raw);
  ojson args = ojson::object();
  if (!body.empty() && body.front() == '{') {  // Qwen3: {"name": ..., "arguments": {...}}
    const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
    call->name = j["name"].get<std::string>();
    const json* a = j.contains("arguments") ? &j["arguments"] : j.contains("parameters") ? &j["parameters"] : nullptr;
    if (a && a->is_string()) {
      const ojson parsed = ojson::parse(a->get<std::string>(), nullptr, false);
      if (parsed.is_discarded() || !parsed.is_object()) return false;
      args = parsed;
    } else if (a && a->is_object()) {
      args = ojson::parse(a->dump());
    } else if (a && !a->is_null()) {
      return false;
    }
  } else if (body.substr(0, kFunction.size()) == kFunction) {  // Qwen3.5: <function=NAME> <parameter=P>V</parameter>
    const size_t close = body.find('>');
    if (close == std::string_view::npos) return false;
    call->name = std::string(Trim(body.substr(kFunction.size(), close - kFunction.size())));
    std::string_view rest = body.substr(close + 1);
    if (const size_t fend = rest.rfind(kFunctionEnd); fend != std::string_view::npos) {
      if (!Trim(rest.substr(fend + kFunctionEnd.size())).empty()) return false;
      rest = rest.substr(0, fend);
    }
    while (true) {
      const size_t p = rest.find(kParam);
      if (p == std::string_view::npos) {
        if (!Trim(rest).empty()) return false;
        break;
      }
      if (!Trim(rest.substr(0, p)).empty()) return false;
      rest = rest.substr(p + kParam.size());
      const size_t pclose = rest.find('>');
      if (pclose == std::string_view::npos) return false;
      const std::string pname(Trim(rest.substr(0, pclose)));
      if (pname.empty()) return false;
      rest = rest.substr(pclose + 1);
      size_t vend = rest.find(kParamEnd);
      const size_t skip = vend == std::string_view::npos ? 0 : kParamEnd.size();
      if (vend == std::string_view::npos) vend = std::min(rest.find(kParam), rest.size());
      std::string_view value = rest.substr(0, vend);
      if (!value.empty() && value.front() == '\n') value.remove_prefix(1);
      if (!value.empty() && value.back() == '\n') value.remove_suffix(1);
      args[pname] = ParamValue(std::string(value), ParamTypes(o_.tools_schema, call->name, pname));
      rest = rest.substr(vend + skip);
    }
  } else {
    return false;
  }
  if (call->name.empty()) return false;
  call->arguments = Dump(args);
  call->id = NewCallId();
  return true;
}

}  // namespace graft

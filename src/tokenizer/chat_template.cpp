#include "tokenizer/chat_template.h"

#include <fmt/core.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "template/interpreter.h"
#include "template/parser.h"
#include "util/file.h"
#include "util/json_depth.h"

namespace graft {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kMaxTemplateBytes = 4u << 20;

std::string TokenText(const nlohmann::ordered_json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return "";
}

}  // namespace

ChatTemplate::~ChatTemplate() = default;

Result<std::shared_ptr<const ChatTemplate>> ChatTemplate::FromText(const std::string& text, const std::string& source) {
  auto parsed = jinja::Parse(text);
  if (!parsed.ok()) return parsed.status().WithContext("chat template " + source);
  auto t = std::shared_ptr<ChatTemplate>(new ChatTemplate());
  t->source_ = source;
  t->tmpl_ = std::move(parsed).value();
  t->special_ = nlohmann::ordered_json::object();
  return std::shared_ptr<const ChatTemplate>(t);
}

Result<std::shared_ptr<const ChatTemplate>> ChatTemplate::Load(const std::string& dir, const std::string& override_file) {
  nlohmann::ordered_json cfg = nlohmann::ordered_json::object();
  const std::string cfg_path = (fs::path(dir) / "tokenizer_config.json").string();
  std::error_code ec;
  if (fs::exists(cfg_path, ec)) {
    GRAFT_ASSIGN_OR_RETURN(std::string text, ReadFileLimited(cfg_path, 64u << 20));
    GRAFT_RETURN_IF_ERROR(CheckJsonDepth(text, cfg_path));
    cfg = nlohmann::ordered_json::parse(text, nullptr, false);
    if (cfg.is_discarded() || !cfg.is_object()) return InvalidArgument(cfg_path + ": not a JSON object");
  }
  std::string text, source;
  const std::string jinja_path = (fs::path(dir) / "chat_template.jinja").string();
  if (!override_file.empty()) {
    GRAFT_ASSIGN_OR_RETURN(text, ReadFileLimited(override_file, kMaxTemplateBytes));
    source = override_file;
  } else if (fs::exists(jinja_path, ec)) {
    GRAFT_ASSIGN_OR_RETURN(text, ReadFileLimited(jinja_path, kMaxTemplateBytes));
    source = jinja_path;
  } else {
    auto ct = cfg.find("chat_template");
    if (ct == cfg.end()) {
      return NotFound(fmt::format("{}: no chat template (no chat_template.jinja, no \"chat_template\" in "
                                  "tokenizer_config.json); pass --chat-template FILE", dir));
    }
    if (ct->is_string()) {
      text = ct->get<std::string>();
    } else if (ct->is_array()) {
      for (const auto& e : *ct) {
        if (e.is_object() && e.contains("name") && e["name"] == "default" && e.contains("template") &&
            e["template"].is_string()) {
          text = e["template"].get<std::string>();
        }
      }
      if (text.empty()) return InvalidArgument(cfg_path + ": \"chat_template\" list has no \"default\" entry");
    } else {
      return InvalidArgument(cfg_path + ": \"chat_template\" must be a string or a list");
    }
    source = cfg_path;
  }
  GRAFT_ASSIGN_OR_RETURN(auto t, FromText(text, source));
  auto mt = std::const_pointer_cast<ChatTemplate>(t);
  for (const char* k : {"bos_token", "eos_token", "pad_token", "unk_token"}) {
    auto it = cfg.find(k);
    if (it != cfg.end() && !TokenText(*it).empty()) mt->special_[k] = TokenText(*it);
  }
  mt->eos_token_ = mt->special_.value("eos_token", "");
  return t;
}

Result<std::string> ChatTemplate::Render(const nlohmann::ordered_json& messages, const ChatOptions& opt) const {
  if (!messages.is_array()) return InvalidArgument("messages must be a JSON array");
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      return InvalidArgument(fmt::format("messages[{}] must be an object with a string \"role\"", i));
    }
  }
  jinja::Dict g;
  for (const auto& [k, v] : special_.items()) g.Set(k, jinja::Value::FromJson(v));
  g.Set("messages", jinja::Value::FromJson(messages));
  g.Set("add_generation_prompt", jinja::Value(opt.add_generation_prompt));
  if (opt.enable_thinking) g.Set("enable_thinking", jinja::Value(*opt.enable_thinking));
  if (!opt.tools.is_null()) g.Set("tools", jinja::Value::FromJson(opt.tools));
  if (opt.extra.is_object()) for (const auto& [k, v] : opt.extra.items()) g.Set(k, jinja::Value::FromJson(v));
  auto out = jinja::Render(*tmpl_, g);
  // The file's name only: this message reaches clients, the server's paths do not.
  if (!out.ok()) return out.status().WithContext("chat template " + fs::path(source_).filename().string());
  return out;
}

}  // namespace graft

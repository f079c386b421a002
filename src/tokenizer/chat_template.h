// ChatTemplate: a model's chat template (Jinja) and the special tokens it refers to.
//
// Sources, first found wins: an explicit template file (--chat-template), DIR/chat_template.jinja,
// then "chat_template" in DIR/tokenizer_config.json (a string, or a list of {name, template}
// of which "default" is used). bos_token / eos_token / pad_token / unk_token come from
// tokenizer_config.json and are visible to the template.
//
// Thread-safety: immutable after loading; Render may run concurrently.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "util/status.h"

namespace graft {

namespace jinja {
struct Template;
}

struct ChatOptions {
  bool add_generation_prompt = true;
  std::optional<bool> enable_thinking;  // unset: the template's own default
  nlohmann::ordered_json tools;         // null: no tools
  nlohmann::ordered_json extra;         // more template variables (an object), or null
};

class ChatTemplate {
 public:
  static Result<std::shared_ptr<const ChatTemplate>> FromText(const std::string& text, const std::string& source);
  // override_file may be empty.
  static Result<std::shared_ptr<const ChatTemplate>> Load(const std::string& model_dir, const std::string& override_file);
  ~ChatTemplate();

  // messages: a JSON array of {"role": ..., "content": ...} objects.
  Result<std::string> Render(const nlohmann::ordered_json& messages, const ChatOptions& opt) const;
  const std::string& source() const { return source_; }
  // eos_token from tokenizer_config.json ("" when absent).
  const std::string& eos_token() const { return eos_token_; }

 private:
  ChatTemplate() = default;
  std::string source_;
  std::unique_ptr<jinja::Template> tmpl_;
  nlohmann::ordered_json special_;  // bos_token, eos_token, ... as strings
  std::string eos_token_;
};

}  // namespace graft

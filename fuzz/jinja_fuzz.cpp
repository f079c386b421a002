// libFuzzer target for the chat-template engine (a template is a file from the checkpoint):
// any byte string must parse to a template or a parse error, and a template must render to
// text or a render error — never a crash, an overflowed stack or a hang.
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "template/interpreter.h"
#include "template/parser.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string src(reinterpret_cast<const char*>(data), size);
  auto t = graft::jinja::Parse(src);
  if (!t.ok()) return 0;
  // What a chat template sees: messages with string and list contents, tools, flags.
  static const graft::jinja::Value context = graft::jinja::Value::FromJson(nlohmann::ordered_json::parse(R"({
    "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                 {"role": "assistant", "content": "a", "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1}}}]}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    "add_generation_prompt": true, "enable_thinking": false, "bos_token": "<s>", "eos_token": "</s>"})"));
  (void)graft::jinja::Render(**t, context.as_dict());
  return 0;
}

// ChatOutputParser: splits a chat completion's text, as it streams, into what OpenAI clients
// expect — reasoning_content (Qwen3's thinking format), content, and tool calls (Qwen3's JSON in
// <tool_call>, Qwen3.5's XML-style <tool_call><function=…>), as vLLM's qwen3 reasoning parser
// and its hermes / qwen3_coder tool parsers do.
//
// Contract:
// - Reasoning (when on): the text between an open <think> — left open by the prompt (the Qwen3.5
//   template's generation prompt ends in "<think>\n"), or at the start of the output — and
//   </think>. A generation that ends before </think> is all reasoning. Newlines right after
//   </think> are dropped (the templates drop them when they render the turn back).
// - Tool calls (when on): each <tool_call>…</tool_call> block whose body parses — a JSON object
//   {"name", "arguments" (or "parameters")}, or <function=NAME> with <parameter=P>VALUE</parameter>
//   entries — becomes a call; VALUE keeps its text where the tool's schema says "string" (or says
//   nothing) and is read as JSON otherwise. A block that does not parse stays content, as does an
//   unterminated one at the end. Whitespace after a call is dropped.
// - Feeding the text in any pieces gives the same result as feeding it whole: Feed releases only
//   what no later text can change (it holds back a possible partial tag), Finish the rest.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace graft {

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // a JSON object's text, as OpenAI sends it
};

struct ChatOutput {
  std::string reasoning;
  std::string content;
  std::vector<ToolCall> tool_calls;
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
  void Append(ChatOutput more);
};

struct ChatOutputOptions {
  bool reasoning = false;   // split reasoning out (--reasoning-parser qwen3)
  bool think_open = false;  // the prompt ends inside an open <think>
  bool tools = false;       // parse tool calls (the request has tools and tool_choice is not "none")
  nlohmann::json tools_schema = nlohmann::json::array();  // the request's tools: parameter types
};

class ChatOutputParser {
 public:
  explicit ChatOutputParser(ChatOutputOptions o);
  ChatOutput Feed(std::string_view text);
  ChatOutput Finish();

 private:
  enum class Mode { kStart, kReasoning, kContent, kToolCall };
  void Run(bool final, ChatOutput* out);
  bool ParseCall(std::string_view body, ToolCall* call) const;

  ChatOutputOptions o_;
  Mode mode_;
  std::string buf_;             // text not yet released
  bool drop_newlines_ = false;  // right after </think>
  bool after_call_ = false;     // whitespace after a tool call is dropped
};

// Whether a rendered chat prompt leaves a <think> block open (its last tag is <think>).
bool PromptOpensThinking(std::string_view prompt);

}  // namespace graft

// ChatOutputParser: reasoning, content and tool calls out of Qwen3 / Qwen3.5 chat output, the
// same whether the text arrives whole or in any pieces.
#include "server/chat_output.h"

#include <gtest/gtest.h>

#include <random>

namespace graft {
namespace {

using json = nlohmann::json;

ChatOutputOptions Opts(bool reasoning, bool think_open, bool tools, json schema = json::array()) {
  ChatOutputOptions o;
  o.reasoning = reasoning;
  o.think_open = think_open;
  o.tools = tools;
  o.tools_schema = std::move(schema);
  return o;
}

ChatOutput Whole(const ChatOutputOptions& o, const std::string& text) {
  ChatOutputParser p(o);
  ChatOutput out = p.Feed(text);
  out.Append(p.Finish());
  return out;
}

// Everything but the calls' ids (random).
std::string Show(const ChatOutput& o) {
  json calls = json::array();
  for (const auto& c : o.tool_calls) calls.push_back({c.name, json::parse(c.arguments)});
  return json{{"reasoning", o.reasoning}, {"content", o.content}, {"calls", calls}}.dump();
}

// The text in every split into two pieces, one character at a time and in random pieces: each
// the same as the text whole; and what Feed released never shrinks into Finish's.
void ExpectPieceInvariant(const ChatOutputOptions& o, const std::string& text) {
  const std::string whole = Show(Whole(o, text));
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    ChatOutputParser p(o);
    ChatOutput out = p.Feed(text.substr(0, cut));
    out.Append(p.Feed(text.substr(cut)));
    out.Append(p.Finish());
    ASSERT_EQ(Show(out), whole) << "cut at " << cut << " of " << text;
  }
  ChatOutputParser p(o);
  ChatOutput out;
  for (char c : text) out.Append(p.Feed(std::string(1, c)));
  out.Append(p.Finish());
  EXPECT_EQ(Show(out), whole) << "a character at a time: " << text;
  std::mt19937 rng(3);
  for (int trial = 0; trial < 20; ++trial) {
    ChatOutputParser q(o);
    ChatOutput o2;
    for (size_t at = 0; at < text.size();) {
      const size_t n = std::min(text.size() - at, static_cast<size_t>(rng() % 7));
      o2.Append(q.Feed(text.substr(at, n)));
      at += n;
    }
    o2.Append(q.Finish());
    EXPECT_EQ(Show(o2), whole);
  }
}

TEST(ChatOutput, ReasoningOpenedByThePrompt) {
  const auto o = Opts(true, true, false);
  const ChatOutput a = Whole(o, "Let me think.\n</think>\n\nThe answer is 4.");
  EXPECT_EQ(a.reasoning, "Let me think.\n");
  EXPECT_EQ(a.content, "The answer is 4.");
  // Cut off before </think>: all of it is reasoning.
  const ChatOutput b = Whole(o, "Still thinking <");
  EXPECT_EQ(b.reasoning, "Still thinking <");
  EXPECT_EQ(b.content, "");
  ExpectPieceInvariant(o, "Let me think.\n</think>\n\nThe answer is 4.");
  ExpectPieceInvariant(o, "a </thin b </think>c");
}

TEST(ChatOutput, ReasoningOpenedByTheOutputOrNotAtAll) {
  const auto o = Opts(true, false, false);
  const ChatOutput a = Whole(o, "<think>\nhmm\n</think>\n\nHi");
  EXPECT_EQ(a.reasoning, "\nhmm\n");
  EXPECT_EQ(a.content, "Hi");
  const ChatOutput b = Whole(o, "Hi <think> there");
  EXPECT_EQ(b.reasoning, "");
  EXPECT_EQ(b.content, "Hi <think> there");
  EXPECT_EQ(Whole(o, "<thi").content, "<thi");
  ExpectPieceInvariant(o, "<think>\nhmm\n</think>\n\nHi");
  ExpectPieceInvariant(o, "<thin>x");
  // The parser off: everything is content.
  EXPECT_EQ(Whole(Opts(false, true, false), "a</think>b").content, "a</think>b");
}

TEST(ChatOutput, Qwen3JsonToolCalls) {
  const auto o = Opts(true, true, true);
  const std::string text =
      "I should look.</think>\n\nChecking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
      "\"days\": 2}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": \"{}\"}\n</tool_call>\n";
  const ChatOutput a = Whole(o, text);
  EXPECT_EQ(a.reasoning, "I should look.");
  EXPECT_EQ(a.content, "Checking.\n");
  ASSERT_EQ(a.tool_calls.size(), 2u);
  EXPECT_EQ(a.tool_calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(a.tool_calls[0].arguments), json::parse(R"({"city": "Paris", "days": 2})"));
  EXPECT_EQ(a.tool_calls[1].name, "now");
  EXPECT_EQ(a.tool_calls[1].arguments, "{}");
  EXPECT_EQ(a.tool_calls[0].id.substr(0, 5), "call_");
  EXPECT_NE(a.tool_calls[0].id, a.tool_calls[1].id);
  ExpectPieceInvariant(o, text);
  // Tools off (none offered, or tool_choice "none"): the block is text.
  EXPECT_EQ(Whole(Opts(false, false, false), "<tool_call>{\"name\": \"f\"}</tool_call>").content,
            "<tool_call>{\"name\": \"f\"}</tool_call>");
}

TEST(ChatOutput, Qwen35XmlToolCallsTakeTheSchemaTypes) {
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "add", "parameters": {"type": "object",
      "properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": ["number", "null"]},
                     "d": {"type": "boolean"}, "e": {"type": "object"}}}}}])");
  const auto o = Opts(false, false, true, tools);
  const std::string text =
      "<tool_call>\n<function=add>\n<parameter=a>\n3\n</parameter>\n<parameter=b>\n42\n</parameter>\n<parameter=c>\n2.5\n"
      "</parameter>\n<parameter=d>\nTrue\n</parameter>\n<parameter=e>\n{\"x\": [1]}\n</parameter>\n<parameter=f>\nfree "
      "text\nover lines\n</parameter>\n</function>\n</tool_call>";
  const ChatOutput a = Whole(o, text);
  ASSERT_EQ(a.tool_calls.size(), 1u) << a.content;
  EXPECT_EQ(a.tool_calls[0].name, "add");
  EXPECT_EQ(json::parse(a.tool_calls[0].arguments),
            json::parse(R"({"a": 3, "b": "42", "c": 2.5, "d": true, "e": {"x": [1]}, "f": "free text\nover lines"})"));
  EXPECT_EQ(a.content, "");
  ExpectPieceInvariant(o, text);
  // A value that does not parse as its type stays text.
  const ChatOutput b = Whole(o, "<tool_call><function=add><parameter=a>three</parameter></function></tool_call>");
  ASSERT_EQ(b.tool_calls.size(), 1u);
  EXPECT_EQ(json::parse(b.tool_calls[0].arguments), json::parse(R"({"a": "three"})"));
}

TEST(ChatOutput, BlocksThatDoNotParseStayText) {
  const auto o = Opts(false, false, true);
  for (const std::string bad : {"<tool_call>{\"arguments\": {}}</tool_call>", "<tool_call>{not json}</tool_call>",
                                "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>",
                                "<tool_call><function=>x</function></tool_call>",
                                "<tool_call><function=f><parameter=>1</parameter></function></tool_call>",
                                "<tool_call><function=f>stray<parameter=a>1</parameter></function></tool_call>",
                                "<tool_call>plain words</tool_call>"}) {
    const ChatOutput a = Whole(o, "x " + bad);
    EXPECT_TRUE(a.tool_calls.empty()) << bad;
    EXPECT_EQ(a.content, "x " + bad);
  }
  // Unterminated at the end: text too, and nothing of it leaks before the end.
  ChatOutputParser p(o);
  EXPECT_EQ(p.Feed("ok <tool_call>{\"name\": \"f\"").content, "ok ");
  EXPECT_EQ(p.Finish().content, "<tool_call>{\"name\": \"f\"");
  ExpectPieceInvariant(o, "a <tool_call>{\"name\": \"f\"} b");
  ExpectPieceInvariant(o, "a <tool_ca b <tool_call>{\"name\": \"f\"}</tool_call>  tail");
}

TEST(ChatOutput, PromptOpensThinking) {
  EXPECT_TRUE(PromptOpensThinking("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(PromptOpensThinking("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(PromptOpensThinking("<|im_start|>assistant\n"));
  EXPECT_FALSE(PromptOpensThinking(""));
}

}  // namespace
}  // namespace graft

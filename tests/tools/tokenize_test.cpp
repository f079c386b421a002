#include "tools/tokenize.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace graft {
namespace {

TEST(TokenizeJob, RoundTripsAndRejectsBadInput) {
  auto tok = Tokenizer::FromFile(test::Fixture("qwen3-tiny/tokenizer.json"));
  ASSERT_TRUE(tok.ok());
  test::TempDir d;
  test::WriteText(d.File("in.json"), R"(["hello world", "<|im_start|>user\nhi<|im_end|>", ""])");
  ASSERT_TRUE(RunTokenize(**tok, d.File("in.json"), d.File("ids.json"), false).ok());
  auto ids = nlohmann::json::parse(test::ReadText(d.File("ids.json")));
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[1][0], 496);  // <|im_start|> in the small tokenizer
  EXPECT_TRUE(ids[2].empty());
  ASSERT_TRUE(RunTokenize(**tok, d.File("ids.json"), d.File("back.json"), true).ok());
  EXPECT_EQ(nlohmann::json::parse(test::ReadText(d.File("back.json"))),
            nlohmann::json::parse(R"(["hello world", "<|im_start|>user\nhi<|im_end|>", ""])"));

  test::WriteText(d.File("bad1.json"), R"({"not": "an array"})");
  EXPECT_NE(RunTokenize(**tok, d.File("bad1.json"), d.File("o.json"), false).message().find("must be a JSON array"),
            std::string::npos);
  test::WriteText(d.File("bad2.json"), R"(["ok", 5])");
  EXPECT_NE(RunTokenize(**tok, d.File("bad2.json"), d.File("o.json"), false).message().find("element 1 is not a string"),
            std::string::npos);
  test::WriteText(d.File("bad3.json"), R"([[1, 2], [9999]])");
  EXPECT_NE(RunTokenize(**tok, d.File("bad3.json"), d.File("o.json"), true).message().find("element 1 holds 9999"),
            std::string::npos);
  test::WriteText(d.File("bad4.json"), "[\"\xff\"]");
  EXPECT_FALSE(RunTokenize(**tok, d.File("bad4.json"), d.File("o.json"), false).ok());
}

}  // namespace
}  // namespace graft

// generation_config.json's sampling defaults: read where present, refused by key when wrong.
#include "io/generation_config.h"

#include <gtest/gtest.h>

#include <fstream>

#include "test_util.h"

namespace graft {
namespace {

void Write(const std::string& dir, const std::string& text) { std::ofstream(dir + "/generation_config.json") << text; }

TEST(GenerationConfig, ReadsTheSamplingKeysAndRefusesBadOnes) {
  test::TempDir dir;
  auto none = LoadGenerationConfig(dir.path());
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty()) << "no file: no defaults";
  // Qwen3's own file: the ids and do_sample are not sampling defaults.
  Write(dir.path(), R"({"bos_token_id": 151643, "do_sample": true, "eos_token_id": [151645, 151643],
                        "pad_token_id": 151643, "temperature": 0.6, "top_k": 20, "top_p": 0.95,
                        "transformers_version": "4.51.0"})");
  auto qwen = LoadGenerationConfig(dir.path());
  ASSERT_TRUE(qwen.ok()) << qwen.status().ToString();
  EXPECT_EQ(qwen->temperature, 0.6);
  EXPECT_EQ(qwen->top_k, 20);
  EXPECT_EQ(qwen->top_p, 0.95);
  EXPECT_FALSE(qwen->min_p);
  EXPECT_FALSE(qwen->max_tokens);
  EXPECT_EQ(qwen->Describe(), "temperature 0.6, top_p 0.95, top_k 20");
  Write(dir.path(), R"({"max_new_tokens": 100, "repetition_penalty": 1.05, "min_p": 0})");
  auto more = LoadGenerationConfig(dir.path());
  ASSERT_TRUE(more.ok());
  EXPECT_EQ(more->max_tokens, 100);
  EXPECT_EQ(more->repetition_penalty, 1.05);
  EXPECT_EQ(more->min_p, 0.0);
  struct Bad {
    const char* text;
    const char* expect;
  };
  for (const Bad& b : {Bad{R"({"temperature": "hot"})", "\"temperature\" must be a number in [0, 2]"},
                       Bad{R"({"temperature": 3})", "\"temperature\" must be a number"},
                       Bad{R"({"top_p": 0})", "\"top_p\" must be a number in (0, 1]"},
                       Bad{R"({"repetition_penalty": 0})", "\"repetition_penalty\""},
                       Bad{R"({"top_k": 1.5})", "\"top_k\" must be an integer"},
                       Bad{R"({"max_new_tokens": 0})", "\"max_new_tokens\" must be an integer in [1"},
                       Bad{R"([1, 2])", "not a JSON object"}, Bad{"{oops", "not a JSON object"}}) {
    Write(dir.path(), b.text);
    auto r = LoadGenerationConfig(dir.path());
    ASSERT_FALSE(r.ok()) << b.text;
    EXPECT_NE(r.status().message().find(b.expect), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("generation_config.json"), std::string::npos);
  }
}

}  // namespace
}  // namespace graft

#include "util/json_depth.h"

#include <gtest/gtest.h>

#include <string>

namespace graft {
namespace {

std::string Nested(int depth, char open = '[', char close = ']') {
  return std::string(static_cast<size_t>(depth), open) + std::string(static_cast<size_t>(depth), close);
}

TEST(JsonDepth, AcceptsUpToTheLimitAndNamesWhatAndWhereBeyondIt) {
  EXPECT_TRUE(CheckJsonDepth(Nested(kMaxJsonDepth), "x").ok());
  const Status st = CheckJsonDepth(Nested(kMaxJsonDepth + 1), "config.json");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(), "config.json: JSON nested deeper than 128 levels (at byte 128)");
  EXPECT_FALSE(CheckJsonDepth(Nested(100000, '{', '}'), "x").ok());
  // Objects and arrays count alike; siblings do not add up.
  EXPECT_TRUE(CheckJsonDepth(R"({"a": [1, {"b": [2]}], "c": [[3]]})", "x", 4).ok());
  EXPECT_FALSE(CheckJsonDepth(R"({"a": [1, {"b": [2]}]})", "x", 3).ok());
}

TEST(JsonDepth, BracketsInsideStringsDoNotCount) {
  const std::string deep_text = "[\"" + Nested(1000) + "\"]";
  EXPECT_TRUE(CheckJsonDepth(deep_text, "x", 1).ok());
  // An escaped quote does not end the string; an escaped backslash before the quote does.
  EXPECT_TRUE(CheckJsonDepth(R"(["a\"[[[[", 1])", "x", 1).ok());
  EXPECT_FALSE(CheckJsonDepth(R"(["a\\", [[1]]])", "x", 2).ok());
}

}  // namespace
}  // namespace graft

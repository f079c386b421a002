#include "util/status.h"

#include <gtest/gtest.h>

namespace graft {
namespace {

Result<int> Half(int x) {
  if (x % 2) return InvalidArgument("odd");
  return x / 2;
}

Result<int> Quarter(int x) {
  GRAFT_ASSIGN_OR_RETURN(int h, Half(x));
  GRAFT_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

TEST(Status, PropagatesFirstErrorWithContext) {
  EXPECT_EQ(Quarter(8).value(), 2);
  auto r = Quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().WithContext("file.json").ToString(), "invalid argument: file.json: odd");
}

}  // namespace
}  // namespace graft

#include "util/bf16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace graft {
namespace {

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly half-way between 1 and 1 + 2^-7: ties to even (1.0).
  EXPECT_EQ(FloatToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  // 1 + 3*2^-8 is half-way between 1+2^-7 (odd) and 1+2^-6 (even): rounds up.
  EXPECT_EQ(FloatToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ(Bf16ToFloat(0xc000), -2.0f);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(NAN))));
  EXPECT_TRUE(std::isinf(RoundBf16(std::numeric_limits<float>::max())));  // overflows to infinity, as PyTorch does
}

TEST(F16, DecodesNormalSubnormalAndSpecial) {
  EXPECT_EQ(F16ToFloat(0x3c00), 1.0f);
  EXPECT_EQ(F16ToFloat(0xc000), -2.0f);
  EXPECT_EQ(F16ToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isinf(F16ToFloat(0x7c00)));
  EXPECT_EQ(F16ToFloat(0x7bff), 65504.0f);
}

}  // namespace
}  // namespace graft

#include "util/bf16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

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


TEST(Bf16, SplitIntoThreePiecesIsExact) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> mag(-40.0f, 40.0f);
  std::uniform_int_distribution<uint32_t> bits;
  auto check = [](float f) {
    uint16_t p[3];
    SplitBf16x3(f, p);
    // The pieces sum to f exactly (in double, where the sum cannot round).
    const double sum = double(Bf16ToFloat(p[0])) + double(Bf16ToFloat(p[1])) + double(Bf16ToFloat(p[2]));
    ASSERT_EQ(sum, double(f)) << f;
    // And in fp32, summed hi first (the order the tensor cores see them).
    ASSERT_EQ((Bf16ToFloat(p[0]) + Bf16ToFloat(p[1])) + Bf16ToFloat(p[2]), f) << f;
  };
  for (int i = 0; i < 200000; ++i) check(std::ldexp(std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng), int(mag(rng))));
  for (int i = 0; i < 200000; ++i) {
    const uint32_t u = bits(rng);
    float f;
    std::memcpy(&f, &u, 4);
    if (std::isfinite(f) && std::fabs(f) > 1e-30f) check(f);
  }
  for (float f : {0.0f, -0.0f, 1.0f, -3.0f, 3.4028235e38f, -3.4028235e38f, 1.1754944e-38f, 0.1f, 1.0f / 3.0f}) check(f);
  uint16_t p[3];
  SplitBf16x3(std::numeric_limits<float>::infinity(), p);
  EXPECT_EQ(Bf16ToFloat(p[0]), std::numeric_limits<float>::infinity());
  EXPECT_EQ(p[1], 0);
  EXPECT_EQ(p[2], 0);
}

}  // namespace
}  // namespace graft

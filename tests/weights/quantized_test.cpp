// The CPU reference dequantization of every quantized format graft will load, against values
// worked out by hand from the format definitions (checkpoint-formats.md §3): the minifloat
// decoders, each format's scale indexing and nibble order, and the size checks that keep a
// hostile file from reading out of bounds.
#include "weights/quantized.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "util/minifloat.h"

namespace graft {
namespace {

TEST(Minifloat, E4M3DecodesByHand) {
  EXPECT_EQ(Fp8E4M3ToFloat(0x38), 1.0f);     // exponent 7 (bias 7), mantissa 0
  EXPECT_EQ(Fp8E4M3ToFloat(0x40), 2.0f);
  EXPECT_EQ(Fp8E4M3ToFloat(0x3C), 1.5f);     // mantissa 4/8
  EXPECT_EQ(Fp8E4M3ToFloat(0x30), 0.5f);
  EXPECT_EQ(Fp8E4M3ToFloat(0x7E), 448.0f);   // the largest: 1.75 · 2^8
  EXPECT_EQ(Fp8E4M3ToFloat(0xB8), -1.0f);
  EXPECT_EQ(Fp8E4M3ToFloat(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(Fp8E4M3ToFloat(0x01), std::ldexp(1.0f, -9));  // smallest subnormal: 1/8 · 2^-6
  EXPECT_EQ(Fp8E4M3ToFloat(0x07), 7 * std::ldexp(1.0f, -9));
  EXPECT_EQ(Fp8E4M3ToFloat(0x00), 0.0f);
  EXPECT_TRUE(std::isnan(Fp8E4M3ToFloat(0x7F)));
  EXPECT_TRUE(std::isnan(Fp8E4M3ToFloat(0xFF)));
  EXPECT_EQ(Fp8E4M3ToFloat(0x78), 256.0f);   // exponent 15 is a normal exponent in e4m3fn
}

TEST(Minifloat, E2M1DecodesByHand) {
  const float want[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int i = 0; i < 16; ++i) EXPECT_EQ(Fp4E2M1ToFloat(static_cast<uint8_t>(i)), want[i]) << i;
}

TEST(Minifloat, EncodersRoundTripEveryCodeAndRoundHalfToEven) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;  // NaN
    EXPECT_EQ(FloatToFp8E4M3(Fp8E4M3ToFloat(static_cast<uint8_t>(c))), c) << c;
  }
  EXPECT_EQ(FloatToFp8E4M3(1.0625f), 0x38);   // halfway 1 .. 1.125: the even code (1.0)
  EXPECT_EQ(FloatToFp8E4M3(1.1875f), 0x3A);   // halfway 1.125 .. 1.25: 1.25
  EXPECT_EQ(FloatToFp8E4M3(1.07f), 0x39);
  EXPECT_EQ(FloatToFp8E4M3(std::ldexp(1.0f, -10)), 0x00);  // halfway 0 .. smallest subnormal
  EXPECT_EQ(FloatToFp8E4M3(1000.0f), 0x7E);   // saturates at 448
  EXPECT_EQ(FloatToFp8E4M3(-1000.0f), 0xFE);
  EXPECT_EQ(FloatToFp8E4M3(std::nanf("")), 0x7F);
  for (int c = 0; c < 16; ++c) EXPECT_EQ(FloatToFp4E2M1(Fp4E2M1ToFloat(static_cast<uint8_t>(c))), c) << c;
  EXPECT_EQ(FloatToFp4E2M1(0.25f), 0x0);  // ties to the even index
  EXPECT_EQ(FloatToFp4E2M1(0.75f), 0x2);
  EXPECT_EQ(FloatToFp4E2M1(2.5f), 0x4);
  EXPECT_EQ(FloatToFp4E2M1(5.0f), 0x6);
  EXPECT_EQ(FloatToFp4E2M1(-7.0f), 0xF);  // saturates at -6
  EXPECT_EQ(FloatToFp4E2M1(1.3f), 0x3);
}

// The plain search the encoders are checked against: of codes 0 .. count-1 (non-negative,
// increasing), the one whose value is nearest to a >= 0, ties to the even code.
template <typename Decode>
int NearestCode(float a, int count, Decode decode) {
  int best = 0;
  for (int c = 1; c < count; ++c) {
    const float d = std::fabs(decode(static_cast<uint8_t>(c)) - a), db = std::fabs(decode(static_cast<uint8_t>(best)) - a);
    if (d < db || (d == db && c % 2 == 0)) best = c;
  }
  return best;
}

// The e2m1 encoder against a plain search over its eight values (nearest, ties to the even
// code), at every value, every midpoint and one float step either side, and a million random
// magnitudes up to past the saturation point, with both signs.
TEST(Minifloat, E2m1EncoderIsTheNearestCode) {
  auto nearest = [](float f) {
    const int best = NearestCode(std::fabs(f), 8, Fp4E2M1ToFloat);
    return static_cast<uint8_t>(std::signbit(f) ? best | 0x8 : best);
  };
  std::vector<float> probes;
  for (int c = 0; c < 8; ++c) {
    const float v = Fp4E2M1ToFloat(static_cast<uint8_t>(c));
    probes.insert(probes.end(), {v, std::nextafter(v, 0.0f), std::nextafter(v, 100.0f)});
    if (c < 7) {
      const float mid = (v + Fp4E2M1ToFloat(static_cast<uint8_t>(c + 1))) / 2;
      probes.insert(probes.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 100.0f)});
    }
  }
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> ud(0.0f, 8.0f);
  for (int i = 0; i < 1000000; ++i) probes.push_back(ud(rng));
  for (float p : probes) {
    for (float f : {p, -p}) ASSERT_EQ(FloatToFp4E2M1(f), nearest(f)) << f;
  }
  EXPECT_EQ(FloatToFp4E2M1(std::nanf("")), 0);
  EXPECT_EQ(FloatToFp4E2M1(-0.0f), 0x8);  // the sign of a zero is kept
}

// The e4m3 encoder against a plain search: the code whose value is nearest, ties to the even
// code, at every code's value, at every midpoint and one float step either side of it, and at
// a million random magnitudes across the whole range (and their negatives).
TEST(Minifloat, E4m3EncoderIsTheNearestCode) {
  auto nearest = [](float f) {
    const float a = std::fabs(f);
    int best = NearestCode(a, 127, Fp8E4M3ToFloat);
    if (a >= 448.0f) best = 0x7E;
    return static_cast<uint8_t>(std::signbit(f) ? best | 0x80 : best);
  };
  std::vector<float> probes;
  for (int c = 0; c < 126; ++c) {
    const float lo = Fp8E4M3ToFloat(static_cast<uint8_t>(c)), hi = Fp8E4M3ToFloat(static_cast<uint8_t>(c + 1));
    const float mid = (lo + hi) / 2;  // exact: both have few bits
    for (float p : {lo, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) probes.push_back(p);
  }
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> ex(-14.0f, 10.0f), mant(1.0f, 2.0f);
  for (int i = 0; i < 1000000; ++i) probes.push_back(std::ldexp(mant(rng), static_cast<int>(ex(rng))));
  for (float p : {448.0f, 464.0f, 1e30f, std::numeric_limits<float>::infinity(), 0.0f, 1e-30f}) probes.push_back(p);
  for (float p : probes) {
    ASSERT_EQ(FloatToFp8E4M3(p), nearest(p)) << p;
    ASSERT_EQ(FloatToFp8E4M3(-p), nearest(-p)) << -p;
  }
}

std::vector<float> All(const QuantizedWeight& w) {
  EXPECT_TRUE(ValidateQuantized(w).ok()) << ValidateQuantized(w).ToString();
  std::vector<float> out(static_cast<size_t>(w.rows * w.cols));
  DequantizeRows(w, 0, w.rows, out.data());
  return out;
}

TEST(Quantized, Fp8BlockScalesBy128x128Blocks) {
  QuantizedWeight w;
  w.format = QuantFormat::kFp8Block;
  w.rows = 130, w.cols = 260, w.group = 128;
  w.codes.assign(130 * 260, 0x38);  // 1.0 everywhere
  w.codes[5 * 260 + 7] = 0xC0;      // -2.0
  w.scale = {1, 2, 3, 4, 5, 6};     // [2 row blocks][3 column blocks]
  const auto W = All(w);
  EXPECT_EQ(W[0], 1.0f);
  EXPECT_EQ(W[5 * 260 + 7], -2.0f);
  EXPECT_EQ(W[127 * 260 + 127], 1.0f);
  EXPECT_EQ(W[127 * 260 + 128], 2.0f);   // column block 1
  EXPECT_EQ(W[0 * 260 + 259], 3.0f);     // column block 2 (partial)
  EXPECT_EQ(W[128 * 260 + 0], 4.0f);     // row block 1 (partial)
  EXPECT_EQ(W[129 * 260 + 259], 6.0f);
  // Rows from the middle: the same values.
  std::vector<float> part(2 * 260);
  DequantizeRows(w, 127, 129, part.data());
  EXPECT_EQ(part[128], 2.0f);
  EXPECT_EQ(part[260 + 128], 5.0f);
}

TEST(Quantized, Fp8ChannelScalesByRow) {
  QuantizedWeight w;
  w.format = QuantFormat::kFp8Channel;
  w.rows = 2, w.cols = 3;
  w.codes = {0x38, 0x40, 0x30, 0xB8, 0x7E, 0x00};
  w.scale = {0.5f, 2.0f};
  EXPECT_EQ(All(w), (std::vector<float>{0.5f, 1.0f, 0.25f, -2.0f, 896.0f, 0.0f}));
}

TEST(Quantized, Int4GroupNibblesLsbFirstOffsetByEight) {
  QuantizedWeight w;
  w.format = QuantFormat::kInt4Group;
  w.rows = 9, w.cols = 256, w.group = 128;
  std::vector<int> q(9 * 256);
  for (int n = 0; n < 9; ++n)
    for (int c = 0; c < 256; ++c) q[n * 256 + c] = (n * 7 + c * 3) % 16 - 8;  // -8..7
  w.words.assign(9 * 32, 0);
  for (int n = 0; n < 9; ++n)
    for (int c = 0; c < 256; ++c)
      w.words[n * 32 + c / 8] = static_cast<int32_t>(static_cast<uint32_t>(w.words[n * 32 + c / 8]) |
                                                     (static_cast<uint32_t>(q[n * 256 + c] + 8) << (4 * (c % 8))));
  for (int n = 0; n < 9; ++n)
    for (int g = 0; g < 2; ++g) w.scale.push_back(0.5f + n + 0.25f * g);
  auto W = All(w);
  for (int n = 0; n < 9; ++n)
    for (int c = 0; c < 256; ++c)
      ASSERT_EQ(W[n * 256 + c], static_cast<float>(q[n * 256 + c]) * (0.5f + n + 0.25f * (c / 128))) << n << "," << c;
  // Zero points: packed along rows, nibble n % 8 of word [n / 8][group].
  w.zero_words.assign(2 * 2, 0);
  auto zp = [](int n, int g) { return (n + 5 * g) % 16; };
  for (int n = 0; n < 9; ++n)
    for (int g = 0; g < 2; ++g)
      w.zero_words[(n / 8) * 2 + g] = static_cast<int32_t>(static_cast<uint32_t>(w.zero_words[(n / 8) * 2 + g]) |
                                                           (static_cast<uint32_t>(zp(n, g)) << (4 * (n % 8))));
  W = All(w);
  for (int n = 0; n < 9; ++n)
    for (int c = 0; c < 256; ++c)
      ASSERT_EQ(W[n * 256 + c], static_cast<float>(q[n * 256 + c] + 8 - zp(n, c / 128)) * (0.5f + n + 0.25f * (c / 128)));
}

TEST(Quantized, Nvfp4LowNibbleFirstWithE4M3GroupScalesAndAGlobalScale) {
  QuantizedWeight w;
  w.format = QuantFormat::kNvfp4;
  w.rows = 2, w.cols = 32, w.group = 16;
  w.codes.assign(32, 0);
  w.codes[0] = 0x71;   // k=0: nibble 1 (0.5), k=1: nibble 7 (6)
  w.codes[8] = 0x9F;   // k=16: -6, k=17: -0.5
  w.codes[16] = 0x25;  // row 1, k=0: 3, k=1: 1
  w.scale_fp8 = {0x38, 0x40, 0x30, 0x7E};  // row 0: 1, 2; row 1: 0.5, 448
  w.global = 0.25f;
  const auto W = All(w);
  EXPECT_EQ(W[0], 0.5f * 1 * 0.25f);
  EXPECT_EQ(W[1], 6.0f * 1 * 0.25f);
  EXPECT_EQ(W[16], -6.0f * 2 * 0.25f);
  EXPECT_EQ(W[17], -0.5f * 2 * 0.25f);
  EXPECT_EQ(W[32], 3.0f * 0.5f * 0.25f);
  EXPECT_EQ(W[33], 1.0f * 0.5f * 0.25f);
  EXPECT_EQ(W[2], 0.0f);
}

// Quantize then dequantize random weights: every element within the format's rounding step
// of its scale; the producers' scale conventions (amax / 448, amax / 7.5, amax / (6 · 448)).
TEST(Quantized, QuantizeThenDequantizeStaysWithinEachFormatsStep) {
  std::mt19937 rng(4);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  const int64_t n = 200, k = 256;
  std::vector<float> w(static_cast<size_t>(n * k));
  for (auto& v : w) v = nd(rng);
  w[77] = 0.5f;  // an outlier sets its block's / group's scale
  for (QuantFormat f : {QuantFormat::kFp8Block, QuantFormat::kFp8Channel, QuantFormat::kInt4Group, QuantFormat::kNvfp4}) {
    auto q = Quantize(w.data(), n, k, f);
    ASSERT_TRUE(q.ok()) << q.status().ToString();
    const auto d = All(q.value());
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t c = 0; c < k; ++c) {
        const float x = w[static_cast<size_t>(r * k + c)], y = d[static_cast<size_t>(r * k + c)];
        float bound = 0;
        switch (f) {
          case QuantFormat::kFp8Block:  // half an e4m3 step (2^-4 relative) or half the subnormal step
            bound = std::max(std::fabs(x) / 16, q->scale[static_cast<size_t>((r / 128) * 2 + c / 128)] * std::ldexp(1.0f, -10));
            break;
          case QuantFormat::kFp8Channel:
            bound = std::max(std::fabs(x) / 16, q->scale[static_cast<size_t>(r)] * std::ldexp(1.0f, -10));
            break;
          case QuantFormat::kInt4Group: {  // half a step inside [-8s, 7s]; the top of a group clips at 7s
            const float sc = q->scale[static_cast<size_t>(r * 2 + c / 128)];
            bound = std::max(sc / 2, x - 7 * sc);
            break;
          }
          case QuantFormat::kNvfp4:  // e2m1 steps are at most 2 (between 4 and 6): half is 1 scale unit
            bound = Fp8E4M3ToFloat(q->scale_fp8[static_cast<size_t>(r * 16 + c / 16)]) * q->global;
            break;
        }
        ASSERT_LE(std::fabs(x - y), bound * 1.0001f) << QuantFormatName(f) << " at " << r << "," << c << ": " << x << " -> " << y;
      }
    }
    EXPECT_NEAR(d[77], 0.5f, 0.5f / 15) << QuantFormatName(f) << ": the outlier survives";
  }
  EXPECT_EQ(Quantize(w.data(), n, k, QuantFormat::kFp8Block)->scale[0], 0.5f / 448) << "amax / 448";
  EXPECT_FALSE(Quantize(w.data(), n, 200, QuantFormat::kInt4Group).ok());
  w[3] = std::nanf("");
  EXPECT_FALSE(Quantize(w.data(), n, k, QuantFormat::kFp8Block).ok());
}

TEST(Quantized, WrongSizesAreRefusedWithTheArrayNamed) {
  QuantizedWeight w;
  w.format = QuantFormat::kFp8Block;
  w.rows = 130, w.cols = 260, w.group = 128;
  w.codes.assign(130 * 260, 0);
  w.scale.assign(5, 1.0f);
  Status s = ValidateQuantized(w);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("scale has 5 elements, expected 6"), std::string::npos) << s.ToString();
  QuantizedWeight q;
  q.format = QuantFormat::kInt4Group;
  q.rows = 4, q.cols = 100, q.group = 128;
  EXPECT_NE(ValidateQuantized(q).message().find("not a multiple of 8"), std::string::npos);
  q.cols = 256, q.group = 100;
  EXPECT_NE(ValidateQuantized(q).message().find("does not divide"), std::string::npos);
  QuantizedWeight f;
  f.format = QuantFormat::kNvfp4;
  f.rows = 1, f.cols = 24;
  EXPECT_NE(ValidateQuantized(f).message().find("multiple of 16"), std::string::npos);
  f.cols = 32;
  f.codes.assign(15, 0);
  EXPECT_NE(ValidateQuantized(f).message().find("codes has 15 elements, expected 16"), std::string::npos);
}

}  // namespace
}  // namespace graft

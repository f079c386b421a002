// The small float formats of quantized checkpoints, decoded exactly to float.
//   e4m3 (OCP FP8 E4M3 "fn"): sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinities,
//        S.1111.111 is NaN; subnormals at exponent 0 (m/8 · 2^-6); largest 448.
//   e2m1 (FP4): sign (bit 3) and an index into {0, 0.5, 1, 1.5, 2, 3, 4, 6}.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

namespace graft {

inline float Fp8E4M3ToFloat(uint8_t v) {
  const bool neg = v & 0x80;
  const int e = (v >> 3) & 0xf, m = v & 0x7;
  float f;
  if (e == 0xf && m == 0x7) return std::numeric_limits<float>::quiet_NaN();
  if (e == 0) f = std::ldexp(static_cast<float>(m), -9);  // m/8 · 2^-6
  else f = std::ldexp(1.0f + static_cast<float>(m) / 8.0f, e - 7);
  return neg ? -f : f;
}

inline float Fp4E2M1ToFloat(uint8_t nibble) {
  static constexpr float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float f = kMag[nibble & 0x7];
  return (nibble & 0x8) ? -f : f;
}

// float -> e4m3 code: the nearest e4m3 value, ties to the even code; magnitudes past 448
// saturate to ±448 (quantizers scale into range first); NaN -> 0x7F.
uint8_t FloatToFp8E4M3(float f);
// float -> e2m1 nibble: the nearest of {0, 0.5, 1, 1.5, 2, 3, 4, 6}, ties to the even index;
// past 6 saturates; the sign in bit 3 (NaN -> 0).
uint8_t FloatToFp4E2M1(float f);

}  // namespace graft

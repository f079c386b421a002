// bfloat16 <-> float conversions (round to nearest, ties to even; NaN stays NaN), and the
// activation rounding used by the CPU reference.
#pragma once

#include <cstdint>
#include <cstring>

namespace graft {

inline float Bf16ToFloat(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline uint16_t FloatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) {
    return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN, sign kept
  }
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// The float nearest to f that bf16 can hold (what storing f in a bf16 tensor keeps).
inline float RoundBf16(float f) { return Bf16ToFloat(FloatToBf16(f)); }

// f as three bf16 pieces whose sum is exactly f: each piece the leading 16 bits of what the
// ones before it leave (hi = f truncated, mid = (f − hi) truncated, lo = f − hi − mid), so
// products of bf16 values with f can run as three bf16 products summed in fp32 (fp32 LoRA
// factors on bf16 tensor cores). Exact for every finite f whose last bits are not below bf16's
// smallest subnormal (2^-133); inf and NaN give (f, 0, 0).
void SplitBf16x3(float f, uint16_t out[3]);

// IEEE half -> float (exact).
float F16ToFloat(uint16_t h);

}  // namespace graft

#include "util/bf16.h"

#include <cmath>

namespace graft {

namespace {
uint16_t Truncated(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return static_cast<uint16_t>(u >> 16);
}
}  // namespace

void SplitBf16x3(float f, uint16_t out[3]) {
  if (!std::isfinite(f)) {
    out[0] = FloatToBf16(f);
    out[1] = out[2] = 0;
    return;
  }
  out[0] = Truncated(f);
  const float r1 = f - Bf16ToFloat(out[0]);  // exact: the low 16 bits of f's significand
  out[1] = Truncated(r1);
  out[2] = FloatToBf16(r1 - Bf16ToFloat(out[1]));  // exact: at most 8 significant bits remain
}

float F16ToFloat(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1u;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(man), -24);  // subnormal or zero
  } else if (exp == 31) {
    v = man ? NAN : INFINITY;
  } else {
    v = std::ldexp(static_cast<float>(man | 0x400u), static_cast<int>(exp) - 25);
  }
  return sign ? -v : v;
}

}  // namespace graft

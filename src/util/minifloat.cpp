#include "util/minifloat.h"

#include <algorithm>
#include <cmath>

namespace graft {

// Directly from the float: subnormals count in steps of 2^-9, normals keep 3 mantissa bits
// rounded half to even (the even code: its low bit is the mantissa's); a carry out of the
// mantissa moves to the next exponent, as the code order does. Every step is exact in float
// except the one rounding, so this is the nearest code (tested against a search of all codes).
uint8_t FloatToFp8E4M3(float f) {
  if (std::isnan(f)) return 0x7F;
  const float a = std::fabs(f);
  uint8_t c;
  if (a >= 448.0f) {
    c = 0x7E;
  } else if (a < 0.015625f) {  // below the smallest normal, 2^-6
    c = static_cast<uint8_t>(std::nearbyint(a * 512.0f));  // 0..8; 8 is the smallest normal's code
  } else {
    int e = 0;
    const float frac = std::frexp(a, &e);  // a = frac · 2^e, frac in [0.5, 1)
    const int m = static_cast<int>(std::nearbyint((frac * 2.0f - 1.0f) * 8.0f));  // 0..8
    c = static_cast<uint8_t>(((e - 1 + 7) << 3) + m);  // m == 8 carries into the exponent
    if (c > 0x7E) c = 0x7E;
  }
  return std::signbit(f) ? static_cast<uint8_t>(c | 0x80) : c;
}

// The codes' values are 0, .5, 1, 1.5, 2, 3, 4, 6: the nearest code counts the midpoints
// below |f|, each midpoint itself going to the even code of its two (so > where the code below
// is even, >= where the one above is) — a plain search's answer without the search (NVFP4
// quantization of a 27B model calls this 27e9 times). NaN compares false: code 0.
uint8_t FloatToFp4E2M1(float f) {
  const float a = std::fabs(f);
  const uint8_t c = static_cast<uint8_t>((a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) +
                                         (a >= 3.5f) + (a > 5.0f));
  if (std::isnan(f)) return 0;
  return std::signbit(f) ? static_cast<uint8_t>(c | 0x8) : c;
}

}  // namespace graft

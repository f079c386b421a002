#include "util/minifloat.h"

#include <algorithm>
#include <array>

namespace graft {
namespace {

// The non-negative values of codes 0..n-1 (increasing with the code), and the nearest code to
// |f| among them: ties go to the even code.
template <size_t N>
uint8_t Nearest(const std::array<float, N>& v, float a) {
  if (a >= v[N - 1]) return static_cast<uint8_t>(N - 1);
  // v[hi - 1] < a <= v[hi] (a > v[0] = 0 here, or a == 0 with hi = 1)
  const size_t hi = std::max<size_t>(1, static_cast<size_t>(std::lower_bound(v.begin(), v.end(), a) - v.begin()));
  const float below = a - v[hi - 1], above = v[hi] - a;
  if (below < above) return static_cast<uint8_t>(hi - 1);
  if (above < below) return static_cast<uint8_t>(hi);
  return static_cast<uint8_t>((hi - 1) % 2 == 0 ? hi - 1 : hi);
}

}  // namespace

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

uint8_t FloatToFp4E2M1(float f) {
  static const std::array<float, 8> v = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  if (std::isnan(f)) return 0;
  const uint8_t c = Nearest(v, std::fabs(f));
  return std::signbit(f) ? static_cast<uint8_t>(c | 0x8) : c;
}

}  // namespace graft

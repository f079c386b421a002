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

const std::array<float, 127>& E4M3Values() {  // codes 0x00..0x7E
  static const std::array<float, 127> v = [] {
    std::array<float, 127> t{};
    for (int c = 0; c < 127; ++c) t[static_cast<size_t>(c)] = Fp8E4M3ToFloat(static_cast<uint8_t>(c));
    return t;
  }();
  return v;
}

}  // namespace

uint8_t FloatToFp8E4M3(float f) {
  if (std::isnan(f)) return 0x7F;
  const uint8_t c = Nearest(E4M3Values(), std::fabs(f));
  return std::signbit(f) ? static_cast<uint8_t>(c | 0x80) : c;
}

uint8_t FloatToFp4E2M1(float f) {
  static const std::array<float, 8> v = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  if (std::isnan(f)) return 0;
  const uint8_t c = Nearest(v, std::fabs(f));
  return std::signbit(f) ? static_cast<uint8_t>(c | 0x8) : c;
}

}  // namespace graft

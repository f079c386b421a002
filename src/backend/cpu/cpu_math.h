// Scalar helpers shared by the CPU reference ops (fp32, PyTorch's definitions).
#pragma once

#include <cmath>
#include <cstdint>

namespace graft::cpu {

inline float Silu(float u) { return u / (1.0f + std::exp(-u)); }
inline float Sigmoid(float u) { return 1.0f / (1.0f + std::exp(-u)); }
inline float Softplus(float u) { return u > 20.0f ? u : std::log1p(std::exp(u)); }  // PyTorch threshold 20

// Σ a[i]·load(i) over i < k: 16 partial sums over i mod 16, then a fixed pairwise tree.
template <typename Load>
inline float Dot16(const float* a, Load load, int64_t k) {
  float acc[16] = {0};
  int64_t i = 0;
  for (; i + 16 <= k; i += 16) {
    for (int l = 0; l < 16; ++l) acc[l] += a[i + l] * load(i + l);
  }
  for (int l = 0; i < k; ++i, ++l) acc[l] += a[i] * load(i);
  for (int s = 8; s > 0; s >>= 1) {
    for (int l = 0; l < s; ++l) acc[l] += acc[l + s];
  }
  return acc[0];
}

// Σ x[i]² in the same order.
inline float SumSquares(const float* x, int64_t k) {
  return Dot16(x, [x](int64_t i) { return x[i]; }, k);
}

}  // namespace graft::cpu

// Scalar helpers shared by the CPU reference ops (fp32, PyTorch's definitions).
#pragma once

#include <cmath>
#include <cstdint>

#include "util/bf16.h"

namespace graft::cpu {

// An op's output v [n] also into its twin (backend/ops.h) when one is asked for.
inline void WriteTwin(const float* v, int64_t n, uint16_t* twin) {
  if (twin == nullptr) return;
  for (int64_t i = 0; i < n; ++i) twin[i] = FloatToBf16(v[i]);
}

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

// Dot16 for two float arrays, with the 16 partial sums held in four 4-lane registers (GCC
// vector extensions) instead of memory: lane l of register v is partial sum 4v + l, each lane
// does the same multiply-then-add as Dot16, so the result is bit-identical to it.
inline float Dot16F32(const float* a, const float* b, int64_t k) {
  typedef float V4 __attribute__((vector_size(16)));
  V4 s0 = {0, 0, 0, 0}, s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  auto load = [](const float* p) {
    V4 v;
    __builtin_memcpy(&v, p, sizeof v);
    return v;
  };
  for (; i + 16 <= k; i += 16) {
    s0 += load(a + i) * load(b + i);
    s1 += load(a + i + 4) * load(b + i + 4);
    s2 += load(a + i + 8) * load(b + i + 8);
    s3 += load(a + i + 12) * load(b + i + 12);
  }
  float acc[16];
  __builtin_memcpy(acc, &s0, 16);
  __builtin_memcpy(acc + 4, &s1, 16);
  __builtin_memcpy(acc + 8, &s2, 16);
  __builtin_memcpy(acc + 12, &s3, 16);
  for (int l = 0; i < k; ++i, ++l) acc[l] += a[i] * b[i];
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

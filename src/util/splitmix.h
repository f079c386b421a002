// SplitMix64: a seeded, stateless stream of pseudo-random bits (Steele, Lea and Flood), for
// filling dummy weights and adapters in parallel: value i depends only on (seed, i).
#pragma once

#include <cstdint>

namespace graft {

// The SplitMix64 finaliser of z.
inline uint64_t SplitMix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Uniform in [-1, 1) from the top 24 bits of SplitMix64(z).
inline float SymmetricUniform(uint64_t z) {
  return static_cast<float>(SplitMix64(z) >> 40) * 0x1.0p-24f * 2.0f - 1.0f;
}

}  // namespace graft

// NVFP4 dequantization by table (the W4A16 decode form, gemm_decode_w4.cu): for one tensor's
// global scale, each e4m3 group-scale code s has an entry holding the bf16 bits of the eight
// magnitudes QuantAt reads,
//
//   v(c, s) = bf16(fp32(fp32(e2m1(c) · e4m3(s)) · global))      c = 0..7 (the code without sign)
//
// low bytes first (lo0 = c 0..3, lo1 = c 4..7), then the high bytes (hi0, hi1). A signed code
// c | 8 is v(c, s) with its sign bit flipped: round-to-nearest is symmetric and the products'
// zeros take their signs from the factors, so that is QuantAt's value bit for bit (zeros and
// negative scales included). With NVFP4 bytes in the int4 lane order (int4_lanes.h: the same
// nibble order as int4 words), one lane word of a row holds the eight weights of two K16 steps —
// steps h = 0 and 1 are two 16-column groups, two scales — and Nvfp4Fragments turns it into the
// four bf16x2 fragment registers with byte permutes (PRMT): per group two lookups (low bytes,
// high bytes), two interleaves, then the signs. Plain C++ (the host builds the table, tests
// check the fragments) and CUDA.
#pragma once

#include <cstdint>
#include <cstring>

#include "backend/cuda/int4_lanes.h"
#include "util/bf16.h"
#include "util/minifloat.h"

namespace graft::cuda {

struct alignas(16) Nvfp4Entry {
  uint32_t lo0, lo1, hi0, hi1;
};
constexpr int kNvfp4TableEntries = 256;  // one per e4m3 code

// The table for a tensor with global scale `global` (QuantAt's arithmetic, on the host).
inline void BuildNvfp4Table(float global, Nvfp4Entry* table /*[kNvfp4TableEntries]*/) {
  for (int s = 0; s < kNvfp4TableEntries; ++s) {
    uint8_t lo[8], hi[8];
    for (int c = 0; c < 8; ++c) {
      const float p = Fp4E2M1ToFloat(static_cast<uint8_t>(c)) * Fp8E4M3ToFloat(static_cast<uint8_t>(s));
      const uint16_t b = FloatToBf16(p * global);
      lo[c] = static_cast<uint8_t>(b & 0xff);
      hi[c] = static_cast<uint8_t>(b >> 8);
    }
    std::memcpy(&table[s].lo0, lo, 4);
    std::memcpy(&table[s].lo1, lo + 4, 4);
    std::memcpy(&table[s].hi0, hi, 4);
    std::memcpy(&table[s].hi1, hi + 4, 4);
  }
}

// PRMT without its sign-replicating mode (selector nibbles 0..7): byte i of the result is byte
// sel[4i .. 4i+2] of the eight bytes {a, b}.
GRAFT_HOST_DEVICE inline uint32_t BytePerm(uint32_t a, uint32_t b, uint32_t sel) {
#ifdef __CUDA_ARCH__
  return __byte_perm(a, b, sel);
#else
  const uint64_t v = a | static_cast<uint64_t>(b) << 32;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= static_cast<uint32_t>((v >> (8 * ((sel >> (4 * i)) & 7))) & 0xff) << (8 * i);
  return r;
#endif
}

// One row's lane word (int4_lanes.h order) -> frag[h][q]: the bf16x2 A fragment of K16 step h
// (group scale entry e0 for h = 0, e1 for h = 1), columns 16h + 8q + 2t (low half) and + 1.
// Nibble 2h + q is the low half, 2h + q + 4 the high one; the codes' bit 3 (their signs) must
// not reach PRMT's selector (its sign mode), hence the 0x7 mask.
GRAFT_HOST_DEVICE inline void Nvfp4Fragments(uint32_t word, const Nvfp4Entry& e0, const Nvfp4Entry& e1,
                                             uint32_t (&frag)[2][2]) {
  const uint32_t mag = word & 0x77777777u;
  // Selectors: step 0's nibbles 0, 1, 4, 5 (bytes 0 and 2), step 1's 2, 3, 6, 7 (bytes 1 and 3).
  const uint32_t sel[2] = {BytePerm(mag, 0, 0x0020), BytePerm(mag, 0, 0x0031)};
  const Nvfp4Entry* e[2] = {&e0, &e1};
  for (int h = 0; h < 2; ++h) {
    const uint32_t lo = BytePerm(e[h]->lo0, e[h]->lo1, sel[h]);  // low bytes of nibbles [2h, 2h+1, 2h+4, 2h+5]
    const uint32_t hi = BytePerm(e[h]->hi0, e[h]->hi1, sel[h]);
    frag[h][0] = BytePerm(lo, hi, 0x6240);  // nibbles 2h (low half) and 2h + 4
    frag[h][1] = BytePerm(lo, hi, 0x7351);  // 2h + 1 and 2h + 5
  }
  // Signs: nibble i's bit 3 to bit 15 and nibble i + 4's to bit 31, a shift of 12 - 4i.
  frag[0][0] ^= (word << 12) & 0x80008000u;
  frag[0][1] ^= (word << 8) & 0x80008000u;
  frag[1][0] ^= (word << 4) & 0x80008000u;
  frag[1][1] ^= word & 0x80008000u;
}

}  // namespace graft::cuda

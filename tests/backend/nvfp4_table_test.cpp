// NVFP4 dequantization by table (backend/cuda/nvfp4_table.h), on the host: for every e4m3 scale
// code (zero, subnormal, negative and the largest included), every signed e2m1 code and several
// global scales, a lane word's fragment registers hold exactly the bf16 bits of the CPU
// reference's dequantization (weights/quantized.h, then WeightRows' bf16 rounding) of the columns
// the lane order puts there — what the W4A16 decode form multiplies. Pure host code.
#include "backend/cuda/nvfp4_table.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "util/bf16.h"
#include "util/minifloat.h"

namespace graft {
namespace {

using cuda::Nvfp4Entry;

// The reference: bf16 bits of e2m1(code) · e4m3(scale) · global, products in fp32.
uint16_t Reference(uint32_t code, int scale, float global) {
  return FloatToBf16(Fp4E2M1ToFloat(static_cast<uint8_t>(code)) * Fp8E4M3ToFloat(static_cast<uint8_t>(scale)) * global);
}

bool SameValue(uint16_t got, uint16_t want) {
  const bool nan_got = std::isnan(Bf16ToFloat(got)), nan_want = std::isnan(Bf16ToFloat(want));
  return nan_got || nan_want ? nan_got && nan_want : got == want;  // a NaN scale: NaN, whatever its sign
}

TEST(Nvfp4Table, FragmentsHoldTheReferenceValuesOfTheirColumns) {
  std::mt19937 rng(7);
  for (float global : {1.0f, 0.000137f, 3.7e-5f * 1.3703f, 1.0f / 2688.0f, -0.25f, 2.5e-38f}) {
    std::vector<Nvfp4Entry> table(cuda::kNvfp4TableEntries);
    cuda::BuildNvfp4Table(global, table.data());
    for (int s0 = 0; s0 < cuda::kNvfp4TableEntries; ++s0) {
      const int s1 = static_cast<int>(rng() % cuda::kNvfp4TableEntries);
      for (int trial = 0; trial < 8; ++trial) {
        // Trial 0 holds every code in both halves over the two steps' nibbles; the rest random.
        const uint32_t word = trial == 0 ? 0xfedcba98u ^ static_cast<uint32_t>(s0 % 2 ? 0x88888888u : 0u)
                                         : static_cast<uint32_t>(rng());
        uint32_t frag[2][2];
        cuda::Nvfp4Fragments(word, table[s0], table[s1], frag);
        for (int h = 0; h < 2; ++h) {
          for (int q = 0; q < 2; ++q) {
            for (int e = 0; e < 2; ++e) {  // int4_lanes.h: nibble 4e + 2h + q, the register's half e
              const uint32_t code = (word >> (4 * (4 * e + 2 * h + q))) & 0xfu;
              const uint16_t got = static_cast<uint16_t>(frag[h][q] >> (16 * e));
              const uint16_t want = Reference(code, h == 0 ? s0 : s1, global);
              ASSERT_TRUE(SameValue(got, want)) << "global " << global << " scale code " << (h == 0 ? s0 : s1) << " code "
                                                << code << ": got 0x" << std::hex << got << " want 0x" << want;
            }
          }
        }
      }
    }
  }
}

// The host PRMT is the instruction's default mode: byte i of the result is byte sel_i of {a, b}.
TEST(Nvfp4Table, BytePermPicksTheSelectedBytes) {
  EXPECT_EQ(cuda::BytePerm(0x33221100u, 0x77665544u, 0x7531), 0x77553311u);
  EXPECT_EQ(cuda::BytePerm(0x33221100u, 0x77665544u, 0x0246), 0x00224466u);
  EXPECT_EQ(cuda::BytePerm(0x33221100u, 0x77665544u, 0xffff0020u), 0x00002200u) << "selector bits past 16 are ignored";
}

}  // namespace
}  // namespace graft

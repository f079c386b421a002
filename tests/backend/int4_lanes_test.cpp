// The device copy's int4 lane order (backend/cuda/int4_lanes.h): every column of a 128-column
// block has one place, and lane t's word of 32-column step b (word 4t + b: a lane's four words
// side by side), shifted by 4(2h + q) and masked with 0x000F000F, holds exactly the two weights
// of mma fragment b_q of K16 step h (columns 32b + 16h + 8q + 2t and the next) in bits 0..3 and
// 16..19 — what the W4A16 decode form relies on. Pure host code.
#include "backend/cuda/int4_lanes.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <vector>

namespace graft {
namespace {

using cuda::Int4LaneOf;
using cuda::Int4ToLaneOrder;

TEST(Int4Lanes, EveryColumnOfABlockHasItsOwnPlace) {
  std::set<std::pair<int, int>> seen;
  for (int j = 0; j < cuda::kInt4LaneBlock; ++j) {
    const auto p = Int4LaneOf(j);
    ASSERT_GE(p.word, 0);
    ASSERT_LT(p.word, cuda::kInt4LaneWords);
    ASSERT_GE(p.nibble, 0);
    ASSERT_LT(p.nibble, 8);
    EXPECT_TRUE(seen.insert({p.word, p.nibble}).second) << "column " << j << " shares its place";
  }
}

TEST(Int4Lanes, TheBlockRewriteMovesEachColumnToItsPlace) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 100; ++trial) {
    uint32_t in[cuda::kInt4LaneWords], out[cuda::kInt4LaneWords];
    for (uint32_t& w : in) w = static_cast<uint32_t>(rng());
    cuda::Int4BlockToLaneOrder(in, out);
    for (int j = 0; j < cuda::kInt4LaneBlock; ++j) {
      const auto p = Int4LaneOf(j);
      EXPECT_EQ((out[p.word] >> (4 * p.nibble)) & 0xfu, (in[j / 8] >> (4 * (j % 8))) & 0xfu) << "column " << j;
    }
  }
}

TEST(Int4Lanes, ALanesWordShiftedHoldsItsFragmentPairs) {
  std::mt19937 rng(11);
  const int64_t rows = 3, cols = 384;  // three blocks a row
  std::vector<int32_t> words(static_cast<size_t>(rows * cols / 8));
  for (auto& w : words) w = static_cast<int32_t>(rng());
  auto nibble = [&](int64_t r, int64_t c) {
    return (static_cast<uint32_t>(words[static_cast<size_t>(r * cols / 8 + c / 8)]) >> (4 * (c % 8))) & 0xfu;
  };
  std::vector<int32_t> lanes(words.size());
  Int4ToLaneOrder(words.data(), 0, rows * cols / cuda::kInt4LaneBlock, lanes.data());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < cols / 32; ++b) {  // 32-column steps; four a block
      for (int t = 0; t < 4; ++t) {
        const int64_t word = r * cols / 8 + (b / 4) * cuda::kInt4LaneWords + 4 * t + b % 4;
        const uint32_t w = static_cast<uint32_t>(lanes[static_cast<size_t>(word)]);
        for (int h = 0; h < 2; ++h) {
          for (int q = 0; q < 2; ++q) {
            const uint32_t pair = (w >> (4 * (2 * h + q))) & 0x000F000Fu;
            const int64_t c = 32 * b + 16 * h + 8 * q + 2 * t;
            EXPECT_EQ(pair & 0xfu, nibble(r, c)) << "row " << r << " column " << c;
            EXPECT_EQ(pair >> 16, nibble(r, c + 1)) << "row " << r << " column " << c + 1;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace graft

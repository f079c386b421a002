// Which LoRA A factors run as one stacked product (cuda/lora_stack.h), and the refusals of the sum
// that splits a stacked product's t into blocks (matmul.h): host only, runs without a GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/device_weight.h"
#include "backend/cuda/lora_stack.h"
#include "backend/cuda/matmul.h"

namespace graft {
namespace {

using cuda::FactorSpan;
using Runs = std::vector<std::pair<size_t, size_t>>;

TEST(LoraStack, RunsAreFactorsOneAfterAnotherInMemory) {
  const int64_t k = 264;
  std::vector<char> block(1 << 20);
  char* at = block.data();
  auto next = [&](int64_t rank) {  // a factor right after the last one
    const FactorSpan f{at, rank, k, true};
    at += rank * k * 2;
    return f;
  };
  const FactorSpan q = next(64), kk = next(16), v = next(8);
  EXPECT_EQ(cuda::StackedRuns({q, kk, v}, k, 8), (Runs{{0, 3}})) << "q|k|v uploaded as one block";
  EXPECT_EQ(cuda::StackedRuns({q}, k, 8), (Runs{{0, 1}}));
  EXPECT_EQ(cuda::StackedRuns({}, k, 8), Runs{});
  EXPECT_EQ(cuda::StackedRuns({q, kk, v}, k, 2), (Runs{{0, 2}, {2, 3}})) << "at most max_run a run";
  EXPECT_EQ(cuda::StackedRuns({q, v}, k, 8), (Runs{{0, 1}, {1, 2}})) << "a gap between them (k's factor)";
  EXPECT_EQ(cuda::StackedRuns({kk, q}, k, 8), (Runs{{0, 1}, {1, 2}})) << "out of memory order";
  FactorSpan f32 = kk;
  f32.bf16 = false;
  EXPECT_EQ(cuda::StackedRuns({q, f32, v}, k, 8), (Runs{{0, 1}, {1, 2}, {2, 3}})) << "an fp32 factor";
  // A rank of 12 (its t blocks would not stay 16-byte aligned) and another K break a run.
  const FactorSpan odd = next(12), after_odd = next(16);
  EXPECT_EQ(cuda::StackedRuns({odd, after_odd}, k, 8), (Runs{{0, 1}, {1, 2}}));
  EXPECT_EQ(cuda::StackedRuns({q, kk}, k + 8, 8), (Runs{{0, 1}, {1, 2}})) << "another K";
}

// Blocks that do not tile the stacked weight's rows are refused by name before anything runs.
TEST(LoraStack, BlocksThatDoNotTileTheRowsAreRefused) {
  cuda::DevWeight w;
  w.rows = 32;
  w.cols = 64;
  w.bf16 = true;
  struct Case {
    std::vector<int64_t> starts;
    int blocks;
    const char* what;
  };
  for (const Case& c : std::vector<Case>{{{0, 32}, 0, "1 to 8 blocks"},
                                         {{0, 4, 8, 12, 16, 20, 24, 28, 30, 32}, 9, "1 to 8 blocks"},
                                         {{8, 32}, 1, "from row 0"},
                                         {{0, 16, 24}, 2, "to the weight's last"},
                                         {{0, 16, 16, 32}, 3, "out of order or empty"}}) {
    const Status st = cuda::SumSplitsBf16Blocks(nullptr, 4, w, c.starts.data(), c.blocks, nullptr, nullptr);
    EXPECT_FALSE(st.ok()) << c.what;
    EXPECT_NE(st.message().find("SumSplitsBf16Blocks"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find(c.what), std::string::npos) << st.message();
  }
}

}  // namespace
}  // namespace graft

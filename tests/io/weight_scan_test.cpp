#include "io/weight_scan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "io/safetensors_writer.h"
#include "test_util.h"

namespace graft {
namespace {

// Each floating dtype's NaN / infinity codes are found (count and first index); finite values,
// integer tensors and FP8 E4M3's largest finite code are not.
TEST(WeightScan, FindsEveryNonFiniteValueByTensor) {
  test::TempDir d;
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<TensorToWrite> t;
  t.push_back(test::Bf16Tensor("a.bf16", {4}, {1.0f, nan, 2.0f, -inf}));
  t.push_back(test::F32Tensor("b.f32", {3}, {0.5f, -0.0f, 3e38f}));
  t.push_back(test::F32Tensor("c.f32", {3}, {1.0f, 2.0f, inf}));
  t.push_back({"d.f8", DType::kF8E4M3, {3}, {0x7e, 0xff, 0x00}});  // 448 (finite), NaN, 0
  t.push_back({"e.i16", DType::kI16, {2}, {0xff, 0xff, 0x80, 0x7f}});  // integers hold no NaN
  t.push_back({"f.f16", DType::kF16, {2}, {0x00, 0x7c, 0x00, 0x3c}});  // +inf, 1.0
  ASSERT_TRUE(WriteSafetensors(d.File("model.safetensors"), std::move(t)).ok());
  auto ck = Checkpoint::Open(d.path());
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  const WeightScan scan = ScanNonFinite(*ck, 2);
  EXPECT_EQ(scan.tensors, 5u);
  ASSERT_EQ(scan.bad.size(), 4u);
  std::map<std::string, std::pair<uint64_t, uint64_t>> got;
  for (const auto& b : scan.bad) got[b.name] = {b.count, b.first};
  EXPECT_EQ(got["a.bf16"], std::make_pair(uint64_t{2}, uint64_t{1}));
  EXPECT_EQ(got["c.f32"], std::make_pair(uint64_t{1}, uint64_t{2}));
  EXPECT_EQ(got["d.f8"], std::make_pair(uint64_t{1}, uint64_t{1}));
  EXPECT_EQ(got["f.f16"], std::make_pair(uint64_t{1}, uint64_t{0}));
  EXPECT_EQ(got.count("b.f32"), 0u);
  const Status s = NonFiniteError(*ck, scan);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("weights hold NaN or infinity — a.bf16: 2 non-finite values (the first at element 1)"),
            std::string::npos) << s.message();
  // A fixture checkpoint is all finite.
  auto fixture = Checkpoint::Open(test::Fixture("qwen3-tiny"));
  ASSERT_TRUE(fixture.ok());
  const WeightScan clean = ScanNonFinite(*fixture, 2);
  EXPECT_GT(clean.tensors, 10u);
  EXPECT_TRUE(clean.bad.empty());
  EXPECT_TRUE(NonFiniteError(*fixture, clean).ok());
}

}  // namespace
}  // namespace graft

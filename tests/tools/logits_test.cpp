#include "tools/logits.h"

#include "io/safetensors.h"

#include <gtest/gtest.h>

#include "backend/cpu/cpu_ops.h"
#include "test_util.h"

namespace graft {
namespace {

TEST(LogitsJob, WritesOneFloatTensorPerSequenceUnderTheSameName) {
  auto model = test::LoadFixtureModel("qwen3-tiny");
  ASSERT_NE(model, nullptr);
  test::TempDir d;
  TensorToWrite a{"alpha", DType::kI32, {3}, std::vector<uint8_t>(12)};
  TensorToWrite b{"beta", DType::kI32, {1}, std::vector<uint8_t>(4)};
  a.bytes[0] = 7;
  b.bytes[0] = 9;
  ASSERT_TRUE(WriteSafetensors(d.File("in.safetensors"), {a, b}).ok());
  CpuOps ops(ActDtype::kF32, 2);
  ASSERT_TRUE(RunLogits(*model, ops, {d.File("in.safetensors"), d.File("out.safetensors")}).ok());
  auto f = SafetensorsFile::Open(d.File("out.safetensors"));
  ASSERT_TRUE(f.ok());
  ASSERT_EQ(f->tensors().size(), 2u);
  EXPECT_EQ(f->Find("alpha")->shape, (std::vector<int64_t>{3, 512}));
  EXPECT_EQ(f->Find("beta")->shape, (std::vector<int64_t>{1, 512}));
  EXPECT_EQ(f->Find("beta")->dtype, DType::kF32);
  // Each sequence starts from an empty cache: "beta" = [9] equals a lone run of token 9.
  auto out = test::ReadFloatTensors(d.File("out.safetensors"));
  auto lone = test::RunChunks(*model, ops, {9}, {});
  EXPECT_EQ(out.at("beta"), lone);
}

TEST(LogitsJob, RejectsBadInputsWithTheTensorName) {
  auto model = test::LoadFixtureModel("qwen3-tiny");
  ASSERT_NE(model, nullptr);
  test::TempDir d;
  CpuOps ops(ActDtype::kF32, 1);
  struct Case {
    TensorToWrite t;
    std::string expect;
  };
  std::vector<Case> cases = {
      {{"f", DType::kF32, {2}, std::vector<uint8_t>(8)}, "tensor 'f' must be a non-empty 1-D I32"},
      {{"m", DType::kI32, {2, 2}, std::vector<uint8_t>(16)}, "tensor 'm' must be a non-empty 1-D I32"},
      {{"e", DType::kI32, {0}, {}}, "tensor 'e' must be a non-empty 1-D I32"},
      {{"big", DType::kI32, {1}, {0xff, 0xff, 0, 0}}, "sequence 'big': token 65535 at index 0 is outside the vocabulary"},
  };
  for (auto& c : cases) {
    ASSERT_TRUE(WriteSafetensors(d.File("in.safetensors"), {c.t}).ok());
    Status s = RunLogits(*model, ops, {d.File("in.safetensors"), d.File("out.safetensors")});
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find(c.expect), std::string::npos) << s.ToString();
  }
  ASSERT_TRUE(WriteSafetensors(d.File("none.safetensors"), {}).ok());
  EXPECT_FALSE(RunLogits(*model, ops, {d.File("none.safetensors"), d.File("out.safetensors")}).ok());
}

}  // namespace
}  // namespace graft

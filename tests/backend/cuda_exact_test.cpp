// Exact mode on the CUDA backend: the reconstructed weight is the CPU reference's bits (odd
// shapes, fp32 and bf16 factors, residuals over many chunks); served adapters give the merged
// checkpoint's logits bit for bit on every bf16 fixture, beside base and LoRA rows; the memory
// table counts the residuals and the scratch; a weight larger than the reserved scratch is a
// named error. Skips where no device is present.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "adapters/lora_loader.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda_test_util.h"
#include "test_util.h"

namespace graft {
namespace {

// The k×k identity as an f32 table (kept alive as long as the ops that upload it).
Weight Identity(int64_t k) {
  Weight t;
  t.name = "identity";
  t.rows = k;
  t.cols = k;
  t.f32.assign(static_cast<size_t>(k * k), 0.0f);
  for (int64_t i = 0; i < k; ++i) t.f32[static_cast<size_t>(i * k + i)] = 1.0f;
  return t;
}

// Reads a bf16 weight [n, k] back through MatMul in f32 mode: x = the identity (embedded
// from `eye`) gives y[i][r] = W[r][i] exactly (one product by 1, the rest exact zeros).
std::vector<float> ReadBack(Ops& ops, const Weight& w, const Weight& eye) {
  const int64_t n = w.rows, k = w.cols;
  const size_t mark = ops.Mark();
  float* x = ops.Alloc(k * k);
  float* y = ops.Alloc(k * n);
  std::vector<int32_t> ids(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  ops.Embed(eye, ids.data(), static_cast<int>(k), x);
  ops.MatMul(x, k, w, y, false);
  std::vector<float> out(static_cast<size_t>(k * n));
  ops.ToHost(y, k * n, out.data());
  ops.Release(mark);
  std::vector<float> wt(static_cast<size_t>(n * k));
  for (int64_t i = 0; i < k; ++i)
    for (int64_t r = 0; r < n; ++r) wt[static_cast<size_t>(r * k + i)] = out[static_cast<size_t>(i * n + r)];
  return wt;
}


// Random modules on a random fused weight, odd shapes: the device's reconstruction is the
// CPU's, element for element.
TEST(CudaExact, ReconstructionIsTheCpuBits) {
  REQUIRE_GPU();
  std::mt19937 rng(3);
  for (bool bf16_factors : {false, true}) {
    const int64_t n = 301, k = 203;
    Weight base = test::RandomWeight(n, k, true, 0.05f, rng);
    std::vector<LoraModule> mods(2);
    const int64_t offs[2] = {0, 170}, rows[2] = {150, 131};
    const int ranks[2] = {37, 5};
    for (int i = 0; i < 2; ++i) {
      LoraModule& m = mods[static_cast<size_t>(i)];
      m.name = "m" + std::to_string(i);
      m.row_offset = offs[i];
      m.rank = ranks[i];
      m.a = test::RandomWeight(ranks[i], k, bf16_factors, 0.02f, rng);
      m.b = test::RandomWeight(rows[i], ranks[i], bf16_factors, 0.02f, rng);
      // A residual of ~3000 values (12 chunks) at random places.
      std::vector<uint16_t> rec(static_cast<size_t>(rows[i] * k), 0), target = rec;
      for (int v = 0; v < 3000; ++v) target[rng() % target.size()] = static_cast<uint16_t>(0x3c00 + rng() % 512);
      m.exact = std::make_shared<const IndexedResidual>(IndexResidual(EncodeResidual(rec, target.data(), rows[i] * k), rows[i] * k).value());
    }
    LoraAdapter holder;  // for Upload
    holder.name = "random";
    holder.layers.resize(1);
    holder.layers[0].targets[0] = mods;
    const Weight eye = Identity(k);
    CpuOps cpu(ActDtype::kF32, 2);
    const std::vector<float> want = ReadBack(cpu, cpu.ExactWeight(base, holder.layers[0].targets[0]), eye);
    auto gpu = test::MakeCuda(ActDtype::kF32);
    ASSERT_TRUE(gpu);
    ASSERT_TRUE(gpu->Upload(holder).ok());
    ASSERT_TRUE(gpu->ReserveExact(n * k).ok());
    const std::vector<float> got = ReadBack(*gpu, gpu->ExactWeight(base, holder.layers[0].targets[0]), eye);
    ASSERT_TRUE(gpu->TakeError().ok()) << gpu->TakeError().ToString();
    int64_t diff = 0;
    for (size_t i = 0; i < want.size(); ++i) diff += want[i] != got[i];
    EXPECT_EQ(diff, 0) << "of " << want.size() << " elements (bf16 factors " << bf16_factors << ")";
    // The untouched rows (150..169) are the base's.
    EXPECT_EQ(got[static_cast<size_t>(160 * k + 7)], Bf16ToFloat(base.bf16[static_cast<size_t>(160 * k + 7)]));
    // Memory: residuals (+ tables) and the scratch are counted as exact memory.
    EXPECT_EQ(gpu->memory().exact, holder.exact_bytes() + n * k * 2);
    // A weight bigger than the reserved scratch: a named error, nothing written.
    Weight big = test::RandomWeight(n + 1, k, true, 0.05f, rng);
    gpu->ExactWeight(big, holder.layers[0].targets[0]);
    Status e = gpu->TakeError();
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.message().find("were reserved at start-up"), std::string::npos) << e.ToString();
  }
}

class CudaExactModel : public ::testing::TestWithParam<test::MergedFixture> {};

// Served exactly on the GPU, base + adapter is the merged checkpoint on the GPU, bit for bit,
// in bf16 and f32 activations, also beside base and LoRA rows in one step.
TEST_P(CudaExactModel, LogitsEqualTheMergedCheckpointBitForBit) {
  REQUIRE_GPU();
  const test::MergedFixture& p = GetParam();
  test::TempDir d;
  test::ExtractExactAdapter(test::Fixture(p.merged), test::Fixture(p.base), p.rank, d.path());
  auto base = test::LoadFixtureModel(p.base);
  auto merged = test::LoadFixtureModel(p.merged);
  auto a = LoadLoraAdapter(d.path(), base->config(), {"ft", false, nullptr});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  AdapterSet set;
  const int32_t lora = set.Add(&a.value(), false), exact = set.Add(&a.value(), true);
  const AdapterSet none;
  auto inputs = test::ReadIntTensors(test::Fixture(p.base + "/inputs.safetensors"));
  const int vocab = base->config().vocab_size;
  for (ActDtype act : {ActDtype::kBF16, ActDtype::kF32}) {
    auto ops = test::MakeCuda(act);
    ASSERT_TRUE(ops);
    ASSERT_TRUE(ops->Upload(base->weights()).ok());
    ASSERT_TRUE(ops->Upload(merged->weights()).ok());
    ASSERT_TRUE(ops->Upload(a.value()).ok());
    ASSERT_TRUE(ops->ReserveExact(base->ExactScratchElements(set).value()).ok());
    for (const auto& [name, ids] : inputs) {
      const int n = static_cast<int>(ids.size());
      std::vector<float> want(static_cast<size_t>(n) * vocab), got(want.size()), lo(want.size()), b0(want.size());
      auto s1 = merged->NewState(*ops).value();
      ASSERT_TRUE(merged->Forward(*ops, ids.data(), n, s1, want.data(), 0, &none).ok());
      // One step: a base sequence, the exact one, a LoRA one.
      auto sb = base->NewState(*ops).value();
      auto se = base->NewState(*ops).value();
      auto sl = base->NewState(*ops).value();
      StepBatch b;
      b.Add(&sb, ids.data(), n, 0);
      b.Add(&se, ids.data(), n, exact);
      b.Add(&sl, ids.data(), n, lora);
      std::vector<float> all(static_cast<size_t>(3 * n) * vocab);
      Status st = base->Forward(*ops, b, set, all.data());
      ASSERT_TRUE(st.ok()) << st.ToString();
      std::memcpy(got.data(), all.data() + int64_t{n} * vocab, got.size() * 4);
      std::memcpy(lo.data(), all.data() + int64_t{2 * n} * vocab, lo.size() * 4);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0) << p.merged << " " << name << " act " << (act == ActDtype::kBF16 ? "bf16" : "f32");
      EXPECT_NE(std::memcmp(lo.data(), want.data(), want.size() * 4), 0) << "LoRA rows matched the merged bits: the test cannot fail";
      // The base sequence is what the base computes alone.
      auto s0 = base->NewState(*ops).value();
      ASSERT_TRUE(base->Forward(*ops, ids.data(), n, s0, b0.data(), 0, &none).ok());
      EXPECT_EQ(std::memcmp(all.data(), b0.data(), b0.size() * 4), 0) << "a base row changed beside exact rows";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaExactModel, ::testing::ValuesIn(test::Bf16MergedFixtures()),
                         [](const auto& info) { return test::MergedFixtureName(info.param); });

// --exact-base on the GPU: a float32-stored base serves exact rows from the uploaded bf16 copy
// of the touched projections. In f32 activations every matmul of both models runs the same
// kernel, so the whole logits are the merged checkpoint's bits; the copy is exact memory.
TEST(CudaExactBase, A32BitBaseServesExactlyFromTheBf16Copy) {
  REQUIRE_GPU();
  test::TempDir f32dir, adir;
  test::WriteFloat32Copy("qwen3-tiny", f32dir.path());
  test::ExtractExactAdapter(test::Fixture("adapters/qwen3-tiny-lora-mixed-merged"), test::Fixture("qwen3-tiny"), 16,
                            adir.path());
  auto served = LoadModel(f32dir.path()).value();
  auto merged = test::LoadFixtureModel("adapters/qwen3-tiny-lora-mixed-merged");
  auto a = LoadLoraAdapter(adir.path(), served->config(), {"ft", false, nullptr});
  ASSERT_TRUE(a.ok());
  AdapterSet set;
  const int32_t exact = set.Add(&a.value(), true);
  auto bytes = served->LoadExactBase(test::Fixture("qwen3-tiny"), set);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  auto ops = test::MakeCuda(ActDtype::kF32);
  ASSERT_TRUE(ops);
  ASSERT_TRUE(ops->Upload(served->weights()).ok());
  ASSERT_TRUE(ops->UploadExactBase(*served->exact_base()).ok());
  ASSERT_TRUE(ops->Upload(merged->weights()).ok());
  ASSERT_TRUE(ops->Upload(a.value()).ok());
  const int64_t elements = served->ExactScratchElements(set).value();
  ASSERT_TRUE(ops->ReserveExact(elements).ok());
  EXPECT_EQ(ops->memory().exact, bytes.value() + a->exact_bytes() + elements * 2);
  const AdapterSet none;
  const int vocab = served->config().vocab_size;
  for (const auto& [name, ids] : test::ReadIntTensors(test::Fixture("qwen3-tiny/inputs.safetensors"))) {
    const int n = static_cast<int>(ids.size());
    std::vector<float> want(static_cast<size_t>(n) * vocab), got(want.size());
    auto s1 = merged->NewState(*ops).value();
    auto s2 = served->NewState(*ops).value();
    ASSERT_TRUE(merged->Forward(*ops, ids.data(), n, s1, want.data(), 0, &none).ok());
    ASSERT_TRUE(served->Forward(*ops, ids.data(), n, s2, got.data(), exact, &set).ok());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0) << name;
  }
}

}  // namespace
}  // namespace graft

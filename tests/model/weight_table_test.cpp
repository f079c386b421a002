#include "model/weight_table.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "backend/cpu/cpu_ops.h"
#include "model/model.h"
#include "weights/quantized.h"
#include "test_util.h"

namespace graft {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

// Copies the fixture's single-file checkpoint into `d`, replacing or dropping tensors.
void CopyWith(const std::string& fixture, const TempDir& d, const std::string& drop,
              std::vector<TensorToWrite> extra) {
  fs::copy_file(test::Fixture(fixture) + "/config.json", d.File("config.json"));
  auto f = SafetensorsFile::Open(test::Fixture(fixture) + "/model.safetensors");
  ASSERT_TRUE(f.ok());
  std::vector<TensorToWrite> out;
  for (const auto& t : f->tensors()) {
    if (t.name == drop) continue;
    bool replaced = false;
    for (const auto& e : extra) replaced |= e.name == t.name;
    if (replaced) continue;
    TensorToWrite w{t.name, t.dtype, t.shape, {}};
    w.bytes.assign(f->Data(t), f->Data(t) + t.num_bytes());
    out.push_back(std::move(w));
  }
  for (auto& e : extra) out.push_back(std::move(e));
  ASSERT_TRUE(WriteSafetensors(d.File("model.safetensors"), std::move(out)).ok());
}

std::string LoadError(const TempDir& d) {
  auto cfg = LoadModelConfig(d.path());
  EXPECT_TRUE(cfg.ok());
  auto ck = Checkpoint::Open(d.path());
  EXPECT_TRUE(ck.ok());
  auto w = LoadWeights(*ck, *cfg);
  EXPECT_FALSE(w.ok());
  return w.ok() ? "" : w.status().ToString();
}

TEST(WeightTable, LoadsAndFusesTheWrapperLayout) {
  auto cfg = LoadModelConfig(test::Fixture("qwen3_5-wrapper"));
  ASSERT_TRUE(cfg.ok());
  auto ck = Checkpoint::Open(test::Fixture("qwen3_5-wrapper"));
  ASSERT_TRUE(ck.ok());
  auto w = LoadWeights(*ck, *cfg);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_EQ(w->layers.size(), 4u);
  const auto& gdn = w->layers[0].gdn.in_proj;
  EXPECT_EQ(gdn.rows, cfg->conv_dim() + cfg->value_dim() + 2 * cfg->linear_num_value_heads);
  EXPECT_EQ(gdn.cols, 64);
  EXPECT_TRUE(gdn.is_bf16);
  EXPECT_EQ(w->layers[1].attn.qkv.rows, 4 * 2 * 32 + 2 * 2 * 32);
  EXPECT_EQ(w->layers[0].gdn.conv.cols, 4);
  EXPECT_FALSE(w->lm_head.empty());
}

TEST(WeightTable, MissingTensorIsNamed) {
  TempDir d;
  CopyWith("qwen3-tiny", d, "model.layers.1.mlp.up_proj.weight", {});
  EXPECT_NE(LoadError(d).find("missing tensor 'model.layers.1.mlp.up_proj.weight'"), std::string::npos);
}

TEST(WeightTable, WrongShapeIsNamed) {
  TempDir d;
  CopyWith("qwen3-tiny", d, "", {test::Bf16Tensor("model.layers.0.self_attn.k_proj.weight", {16, 64}, std::vector<float>(16 * 64))});
  const std::string e = LoadError(d);
  EXPECT_NE(e.find("tensor 'model.layers.0.self_attn.k_proj.weight' has shape [16, 64], expected [32, 64]"),
            std::string::npos) << e;
}

TEST(WeightTable, WrongDtypeIsNamed) {
  TempDir d;
  TensorToWrite t{"model.norm.weight", DType::kI32, {64}, std::vector<uint8_t>(256)};
  CopyWith("qwen3-tiny", d, "", {t});
  EXPECT_NE(LoadError(d).find("tensor 'model.norm.weight' has dtype I32"), std::string::npos);
}

TEST(WeightTable, UnclaimedTensorsAreRefused) {
  TempDir d;
  CopyWith("qwen3-tiny", d, "", {test::Bf16Tensor("model.layers.0.self_attn.q_proj.bias", {64}, std::vector<float>(64))});
  EXPECT_NE(LoadError(d).find("tensors that no qwen3 slot claims"), std::string::npos);
}

// --load-format dummy: every slot a checkpoint fills, at the same shapes, without reading
// one; seeded (the same seed gives the same bits); a forward pass on it is finite.
TEST(WeightTable, DummyWeightsHaveTheCheckpointShapesAndRun) {
  for (const char* fixture : {"qwen3-tiny", "qwen3_5-wrapper"}) {
    auto real = LoadModel(test::Fixture(fixture));
    ASSERT_TRUE(real.ok()) << real.status().ToString();
    auto a = LoadDummyModel(test::Fixture(fixture), 1, 2), b = LoadDummyModel(test::Fixture(fixture), 1, 3),
         c = LoadDummyModel(test::Fixture(fixture), 2, 2);
    ASSERT_TRUE(a.ok() && b.ok() && c.ok());
    const ModelWeights &r = (*real)->weights(), &w = (*a)->weights();
    ASSERT_EQ(w.layers.size(), r.layers.size());
    auto same_shape = [&](const Weight& x, const Weight& y) {
      EXPECT_EQ(x.rows, y.rows) << fixture << " " << y.name;
      EXPECT_EQ(x.cols, y.cols) << fixture << " " << y.name;
    };
    same_shape(w.embed, r.embed);
    same_shape(w.final_norm, r.final_norm);
    same_shape(w.head(), r.head());
    for (size_t l = 0; l < w.layers.size(); ++l) {
      const LayerWeights &x = w.layers[l], &y = r.layers[l];
      EXPECT_EQ(x.kind, y.kind);
      for (auto [p, q] : {std::pair{&x.attn.qkv, &y.attn.qkv}, {&x.attn.o, &y.attn.o}, {&x.gdn.in_proj, &y.gdn.in_proj},
                          {&x.gdn.conv, &y.gdn.conv}, {&x.gdn.out, &y.gdn.out}, {&x.gate_up, &y.gate_up},
                          {&x.down, &y.down}, {&x.input_norm, &y.input_norm}}) {
        same_shape(*p, *q);
      }
    }
    EXPECT_EQ(w.embed.bf16, (*b)->weights().embed.bf16) << "the same seed, another thread count: the same bits";
    // Every tensor, not only the large ones split across threads: the small ones are a tensor a
    // thread, and each keeps its own seed whichever thread makes it.
    for (size_t l = 0; l < w.layers.size(); ++l) {
      const LayerWeights &x = w.layers[l], &y = (*b)->weights().layers[l];
      for (auto [p, q] : {std::pair{&x.attn.qkv, &y.attn.qkv}, {&x.gdn.in_proj, &y.gdn.in_proj}, {&x.gdn.conv, &y.gdn.conv},
                          {&x.gate_up, &y.gate_up}, {&x.down, &y.down}, {&x.input_norm, &y.input_norm}}) {
        EXPECT_EQ(p->bf16, q->bf16) << fixture << " layer " << l << " " << p->name;
      }
      EXPECT_NE(x.down.bf16, l > 0 ? w.layers[l - 1].down.bf16 : w.layers[l].gate_up.bf16) << "tensors have their own values";
    }
    EXPECT_NE(w.embed.bf16, (*c)->weights().embed.bf16) << "another seed";
    CpuOps ops(ActDtype::kBF16, 2);
    const std::vector<int32_t> ids = {1, 2, 3, 4, 5};
    auto logits = test::RunChunks(**a, ops, ids, {});
    ASSERT_EQ(logits.size(), ids.size() * static_cast<size_t>((*a)->config().vocab_size));
    for (float v : logits) ASSERT_TRUE(std::isfinite(v));
  }
}

// A mixed fused weight's adjacent dense parts of one storage become one part (one matmul);
// quantized parts apart from each other and parts of another storage stay apart; the rows the
// matmul reads and the CPU matmul's bits do not change.
TEST(WeightTable, AdjacentDensePartsMerge) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 0.1f);
  const int64_t k = 256;  // whole int4 groups of 128
  auto dense = [&](int64_t rows, bool bf16) { return test::RandomWeight(rows, k, bf16, 0.1f, rng); };
  auto quant = [&](int64_t rows) {
    std::vector<float> v(static_cast<size_t>(rows * k));
    for (float& x : v) x = nd(rng);
    Weight w;
    w.name = "int4 part";
    w.rows = rows;
    w.cols = k;
    w.quant = std::make_shared<QuantizedWeight>(Quantize(v.data(), rows, k, QuantFormat::kInt4Group).value());
    return w;
  };
  Weight fused;
  fused.name = "fused";
  fused.cols = k;
  for (Weight p : {quant(16), dense(8, true), dense(8, true), quant(16), dense(8, true), dense(8, false)}) {
    p.name = p.quant ? "int4 part" : (p.is_bf16 ? "bf16 part" : "f32 part");
    fused.rows += p.rows;
    fused.parts.push_back(std::move(p));
  }
  Weight merged = fused;
  MergeParts(merged);
  ASSERT_EQ(merged.parts.size(), 5u) << "only the two adjacent bf16 parts join";
  EXPECT_EQ(merged.parts[1].rows, 16);
  EXPECT_EQ(merged.parts[1].name, "bf16 part+bf16 part");
  EXPECT_TRUE(merged.parts[4].dense() && !merged.parts[4].is_bf16) << "bf16 beside f32 stays apart";
  std::vector<float> a(static_cast<size_t>(fused.rows * k)), b(a.size());
  WeightRows(fused, 0, fused.rows, a.data());
  WeightRows(merged, 0, merged.rows, b.data());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
  CpuOps ops(ActDtype::kBF16, 2);
  const int64_t m = 3;
  float* x = ops.Alloc(m * k);
  for (int64_t i = 0; i < m * k; ++i) x[i] = RoundBf16(nd(rng));
  float* ya = ops.Alloc(m * fused.rows);
  float* yb = ops.Alloc(m * fused.rows);
  ops.MatMul(x, m, fused, ya, true);
  ops.MatMul(x, m, merged, yb, true);
  EXPECT_EQ(std::memcmp(ya, yb, static_cast<size_t>(m * fused.rows) * 4), 0);
}

// Adjacent quantized parts that stack (a checkpoint's gate and up, or q, k and v, in one format)
// become one quantized weight — one matmul, so a decode step launches one kernel where it
// launched two or three — with every row's values and the CPU matmul's bits unchanged; parts
// whose storage would not line up (an FP8 part of rows not whole 128-row blocks followed by
// another, NVFP4 parts of different global scales, two formats) stay apart.
TEST(WeightTable, StackableQuantizedPartsMerge) {
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  const int64_t k = 256;
  auto quant = [&](int64_t rows, QuantFormat f, float shared_amax, const std::string& name) {
    std::vector<float> v(static_cast<size_t>(rows * k));
    for (float& x : v) x = nd(rng);
    Weight w;
    w.name = name;
    w.rows = rows;
    w.cols = k;
    w.quant = std::make_shared<QuantizedWeight>(Quantize(v.data(), rows, k, f, shared_amax).value());
    return w;
  };
  auto fuse = [&](std::vector<Weight> parts) {
    Weight fused;
    fused.name = "fused";
    fused.cols = k;
    for (Weight& p : parts) {
      fused.rows += p.rows;
      fused.parts.push_back(std::move(p));
    }
    return fused;
  };
  auto same_product = [&](const Weight& a, const Weight& b) {
    std::vector<float> ra(static_cast<size_t>(a.rows * k)), rb(ra.size());
    WeightRows(a, 0, a.rows, ra.data());
    WeightRows(b, 0, b.rows, rb.data());
    EXPECT_EQ(std::memcmp(ra.data(), rb.data(), ra.size() * 4), 0) << "rows as the matmul reads them";
    CpuOps ops(ActDtype::kBF16, 2);
    const int64_t m = 3;
    float* x = ops.Alloc(m * k);
    for (int64_t i = 0; i < m * k; ++i) x[i] = RoundBf16(nd(rng) * 20.0f);
    float* ya = ops.Alloc(m * a.rows);
    float* yb = ops.Alloc(m * a.rows);
    ops.MatMul(x, m, a, ya, true);
    ops.MatMul(x, m, b, yb, true);
    EXPECT_EQ(std::memcmp(ya, yb, static_cast<size_t>(m * a.rows) * 4), 0) << "the CPU matmul's bits";
  };
  struct Case {
    QuantFormat format;
    std::vector<int64_t> rows;
  };
  for (const Case& c : {Case{QuantFormat::kFp8Block, {256, 128, 40}}, Case{QuantFormat::kFp8Channel, {40, 24, 8}},
                        Case{QuantFormat::kInt4Group, {24, 16, 5}}, Case{QuantFormat::kNvfp4, {32, 16, 16}}}) {
    SCOPED_TRACE(QuantFormatName(c.format));
    std::vector<Weight> parts;
    for (size_t i = 0; i < c.rows.size(); ++i) parts.push_back(quant(c.rows[i], c.format, 4.0f, "p" + std::to_string(i)));
    const Weight fused = fuse(parts);
    Weight merged = fused;
    MergeParts(merged);
    ASSERT_TRUE(merged.parts.empty()) << merged.storage();
    ASSERT_TRUE(merged.quant);
    EXPECT_EQ(merged.name, "fused");
    EXPECT_EQ(merged.rows, fused.rows);
    EXPECT_EQ(merged.quant->rows, fused.rows);
    EXPECT_TRUE(ValidateQuantized(*merged.quant).ok());
    same_product(fused, merged);
  }
  {  // 100 rows end mid-block: the next part's rows would take that block's scale
    const Weight fused = fuse({quant(100, QuantFormat::kFp8Block, 0, "a"), quant(128, QuantFormat::kFp8Block, 0, "b"),
                               quant(128, QuantFormat::kFp8Block, 0, "c")});
    Weight merged = fused;
    MergeParts(merged);
    ASSERT_EQ(merged.parts.size(), 2u);
    EXPECT_EQ(merged.parts[0].rows, 100);
    EXPECT_EQ(merged.parts[1].name, "b+c");
    same_product(fused, merged);
  }
  {  // NVFP4 parts of their own global scales; then FP8 beside int4
    Weight a = quant(16, QuantFormat::kNvfp4, 0, "a"), b = quant(16, QuantFormat::kNvfp4, 0, "b");
    b.quant = std::make_shared<QuantizedWeight>([&] {
      QuantizedWeight q = *b.quant;
      q.global = a.quant->global * 2.0f;
      return q;
    }());
    Weight merged = fuse({a, b});
    MergeParts(merged);
    EXPECT_EQ(merged.parts.size(), 2u);
    Weight mixed = fuse({quant(128, QuantFormat::kFp8Block, 0, "f"), quant(16, QuantFormat::kInt4Group, 0, "i")});
    MergeParts(mixed);
    EXPECT_EQ(mixed.parts.size(), 2u);
  }
}

}  // namespace
}  // namespace graft

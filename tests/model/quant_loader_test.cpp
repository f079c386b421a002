// Quantized checkpoints load and serve (issue 10): each format's projections stay in their
// stored format and multiply as weights/quantized.h defines — W4A16 (int4, NVFP4) gives exactly
// the logits of a dense model holding the bf16-rounded dequantized weights; FP8 runs W8A8 with
// per-token-group activation scales — and every malformed or contradictory checkpoint is
// refused with an error naming the module and the reason.
#include "model/quant_loader.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_ops.h"
#include "io/safetensors_writer.h"
#include "model/model.h"
#include "model/projections.h"
#include "test_util.h"
#include "tools/quantize.h"
#include "util/minifloat.h"

namespace graft {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string DemoBase() { return fs::path(test::FixturesDir()).parent_path().string() + "/models/base"; }

std::string QuantizeDemo(const test::TempDir& d, const std::string& format) {
  const std::string out = d.path() + "/" + format;
  auto rep = RunQuantize({DemoBase(), out, format, 0, 8, 2});
  EXPECT_TRUE(rep.ok()) << rep.status().ToString();
  return out;
}

// A copy of single-file checkpoint `src` in `dst` with its tensors and config edited.
void Rewrite(const std::string& src, const std::string& dst, const std::function<void(std::vector<TensorToWrite>&)>& tensors,
             const std::function<void(json&)>& config) {
  fs::create_directories(dst);
  auto ck = Checkpoint::Open(src);
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  std::vector<TensorToWrite> all;
  for (const TensorRef& t : ck->All()) {
    all.push_back({t.info->name, t.info->dtype, t.info->shape, std::vector<uint8_t>(t.data(), t.data() + t.info->num_bytes())});
  }
  tensors(all);
  ASSERT_TRUE(WriteSafetensors(dst + "/model.safetensors", std::move(all)).ok());
  json cfg = json::parse(test::ReadText(src + "/config.json"));
  config(cfg);
  test::WriteText(dst + "/config.json", cfg.dump(2));
  fs::copy_file(src + "/tokenizer.json", dst + "/tokenizer.json");
}

TensorToWrite* Named(std::vector<TensorToWrite>& all, const std::string& name) {
  for (auto& t : all) {
    if (t.name == name) return &t;
  }
  ADD_FAILURE() << "no tensor " << name;
  return nullptr;
}

void Drop(std::vector<TensorToWrite>& all, const std::string& name) {
  const auto before = all.size();
  std::erase_if(all, [&](const TensorToWrite& t) { return t.name == name; });
  if (all.size() == before) ADD_FAILURE() << "no tensor " << name;
}

// The model with every projection replaced by a dense float32 copy of WeightRows (what the
// matmul reads).
std::unique_ptr<Model> DenseCopy(const Model& q) {
  ModelWeights w = q.weights();
  auto densify = [](Weight& x) {
    if (x.empty() || x.dense()) return;
    Weight d;
    d.name = x.name;
    d.rows = x.rows;
    d.cols = x.cols;
    d.f32.resize(static_cast<size_t>(x.rows * x.cols));
    WeightRows(x, 0, x.rows, d.f32.data());
    x = std::move(d);
  };
  for (auto& l : w.layers) {
    for (Weight* x : {&l.attn.qkv, &l.attn.o, &l.gdn.in_proj, &l.gdn.out, &l.gate_up, &l.down}) densify(*x);
  }
  densify(w.lm_head);
  auto made = MakeModel(q.config(), std::move(w));
  EXPECT_TRUE(made.ok()) << made.status().ToString();
  return made.ok() ? std::move(made).value() : nullptr;
}

std::vector<float> Logits(const Model& m, ActDtype act, const std::vector<int32_t>& ids) {
  CpuOps ops(act, 2);
  return test::RunChunks(m, ops, ids, {});
}

const std::vector<int32_t> kIds = {5, 901, 17, 4000, 33, 2, 2, 77, 1200, 8000, 64, 3};

class W4a16 : public ::testing::TestWithParam<std::string> {};

TEST_P(W4a16, ServesExactlyTheBf16OfItsDequantizedWeights) {
  test::TempDir d;
  const std::string dir = QuantizeDemo(d, GetParam());
  auto m = LoadModel(dir);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const Model& q = **m;
  const LayerWeights& gdn = q.weights().layers[0];
  ASSERT_EQ(gdn.kind, LayerKind::kLinearAttention);
  // in_proj: qkv and z quantized — stacked into one quantized part (one matmul; graft quantize
  // gives fused NVFP4 tensors one global scale) — and b and a (48-row projections in real
  // models) kept bf16, as one part too.
  ASSERT_EQ(gdn.gdn.in_proj.parts.size(), 2u);
  EXPECT_TRUE(gdn.gdn.in_proj.parts[0].quant);
  EXPECT_EQ(gdn.gdn.in_proj.parts[0].rows, gdn.gdn.in_proj.rows - 2 * q.config().linear_num_value_heads)
      << "qkv and z stacked";
  EXPECT_TRUE(gdn.gdn.in_proj.parts[1].dense() && gdn.gdn.in_proj.parts[1].is_bf16);
  EXPECT_EQ(gdn.gdn.in_proj.parts[1].rows, 2 * q.config().linear_num_value_heads) << "b and a stacked";
  EXPECT_TRUE(gdn.gate_up.quant && gdn.gate_up.parts.empty()) << "gate and up stacked: the slot is one quantized weight";
  EXPECT_TRUE(gdn.down.quant) << "a single-tensor slot is the tensor";
  EXPECT_LT(q.weights().bytes(), LoadModel(DemoBase()).value()->weights().bytes());
  auto dense = DenseCopy(q);
  for (ActDtype act : {ActDtype::kBF16, ActDtype::kF32}) {
    const auto a = Logits(q, act, kIds), b = Logits(*dense, act, kIds);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "logits differ from the dense bf16 weights'";
  }
  // The dequantized weights are bf16 values.
  std::vector<float> rows(static_cast<size_t>(gdn.down.cols * 2));
  WeightRows(gdn.down, 0, 2, rows.data());
  for (float v : rows) ASSERT_EQ(v, RoundBf16(v));
}

INSTANTIATE_TEST_SUITE_P(Formats, W4a16, ::testing::Values("w4a16", "nvfp4"));

// ModelOpt's NVFP4 names (weight, weight_scale, weight_scale_2 = the global factor itself,
// hf_quant_config.json) hold the same numbers as compressed-tensors' (weight_packed,
// weight_scale, weight_global_scale = its reciprocal): the same logits.
TEST(QuantLoader, ModelOptNvfp4MatchesCompressedTensors) {
  test::TempDir d;
  const std::string ct = QuantizeDemo(d, "nvfp4");
  const std::string mo = d.path() + "/modelopt";
  json exclude;
  Rewrite(
      ct, mo,
      [](std::vector<TensorToWrite>& all) {
        for (auto& t : all) {
          const auto cut = [&](const char* s) {
            const std::string suf = s;
            return t.name.size() > suf.size() && t.name.compare(t.name.size() - suf.size(), suf.size(), suf) == 0
                       ? t.name.substr(0, t.name.size() - suf.size())
                       : std::string();
          };
          if (auto m = cut(".weight_packed"); !m.empty()) t.name = m + ".weight";
          if (auto m = cut(".weight_global_scale"); !m.empty()) {
            float g;
            std::memcpy(&g, t.bytes.data(), 4);
            g = 1.0f / g;
            std::memcpy(t.bytes.data(), &g, 4);
            t.name = m + ".weight_scale_2";
            t.shape = {};
          }
        }
      },
      [&](json& cfg) {
        exclude = cfg["quantization_config"]["ignore"];
        cfg.erase("quantization_config");
      });
  test::WriteText(mo + "/hf_quant_config.json",
                  json{{"producer", {{"name", "modelopt"}}},
                       {"quantization", {{"quant_algo", "NVFP4"}, {"group_size", 16}, {"exclude_modules", exclude}}}}
                      .dump());
  auto a = LoadModel(ct), b = LoadModel(mo);
  ASSERT_TRUE(a.ok() && b.ok()) << b.status().ToString();
  const auto la = Logits(**a, ActDtype::kBF16, kIds), lb = Logits(**b, ActDtype::kBF16, kIds);
  EXPECT_EQ(std::memcmp(la.data(), lb.data(), la.size() * 4), 0);
}

// FP8 W8A8 on a case whose every step is exact: activations whose group maximum is 448 (scale
// 1, codes exact) and small e4m3 weights with power-of-two scales, so the result must equal the
// plain product computed in double.
TEST(QuantLoader, Fp8MatMulQuantizesActivationsPerTokenGroup) {
  const int64_t n = 3, k = 256;
  QuantizedWeight w;
  w.format = QuantFormat::kFp8Block;
  w.rows = n, w.cols = k, w.group = 128;
  w.scale = {0.5f, 0.25f};  // [1, 2] blocks
  for (int64_t i = 0; i < n * k; ++i) w.codes.push_back(FloatToFp8E4M3(static_cast<float>(static_cast<int>(i % 7) - 3)));
  Weight wt;
  wt.rows = n, wt.cols = k;
  wt.quant = std::make_shared<QuantizedWeight>(w);
  std::vector<float> x(2 * k);
  for (int64_t c = 0; c < k; ++c) {
    x[c] = static_cast<float>(static_cast<int>(c % 9) - 4);
    x[k + c] = static_cast<float>(static_cast<int>(c % 5) - 2) * 2.0f;
  }
  x[5] = 448.0f, x[133] = 448.0f;            // the maximum of each group: activation scale 1
  x[k + 7] = 448.0f, x[k + 200] = -448.0f;
  CpuOps ops(ActDtype::kF32, 2);
  std::vector<float> y(2 * n), alone(n);
  ops.MatMul(x.data(), 2, wt, y.data(), false);
  for (int r = 0; r < 2; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      double want = 0;
      for (int64_t c = 0; c < k; ++c) {
        want += double{x[r * k + c]} * (static_cast<int>((j * k + c) % 7) - 3) * (c < 128 ? 0.5 : 0.25);
      }
      EXPECT_EQ(y[r * n + j], static_cast<float>(want)) << r << "," << j;
    }
  }
  ops.MatMul(x.data() + k, 1, wt, alone.data(), false);  // a row's bits do not depend on its batch
  EXPECT_EQ(std::memcmp(alone.data(), y.data() + n, n * 4), 0);
  // A row that needs its own scale: its result is the quantized one, near the exact product.
  std::vector<float> z(k);
  for (int64_t c = 0; c < k; ++c) z[c] = 0.001f * static_cast<float>(c) - 0.1f;
  std::vector<float> yz(n);
  ops.MatMul(z.data(), 1, wt, yz.data(), false);
  for (int64_t j = 0; j < n; ++j) {
    double want = 0, mag = 0;
    for (int64_t c = 0; c < k; ++c) {
      const double t = double{z[c]} * (static_cast<int>((j * k + c) % 7) - 3) * (c < 128 ? 0.5 : 0.25);
      want += t, mag += std::fabs(t);
    }
    EXPECT_NEAR(yz[j], want, mag / 16) << "within e4m3's step";
    EXPECT_NE(yz[j], static_cast<float>(want)) << "activations are quantized";
  }
}

TEST(QuantLoader, Fp8CheckpointServesCloseToItsInput) {
  test::TempDir d;
  const std::string dir = QuantizeDemo(d, "fp8-block");
  auto q = LoadModel(dir), base = LoadModel(DemoBase());
  ASSERT_TRUE(q.ok() && base.ok()) << q.status().ToString();
  EXPECT_EQ((*q)->weights().layers[2].attn.qkv.storage(), "fp8 (128x128 blocks)");
  const auto a = Logits(**q, ActDtype::kF32, kIds), b = Logits(**base, ActDtype::kF32, kIds);
  double diff = 0, mag = 0;
  for (size_t i = 0; i < a.size(); ++i) diff += std::fabs(a[i] - b[i]), mag += std::fabs(b[i]);
  EXPECT_GT(diff, 0);
  EXPECT_LT(diff / mag, 0.1) << "fp8 logits stay near the bf16 model's";
  // Chunking does not change a row's bits.
  CpuOps ops(ActDtype::kBF16, 2);
  const auto one = test::RunChunks(**q, ops, kIds, {}), chunked = test::RunChunks(**q, ops, kIds, {5, 4});
  EXPECT_EQ(std::memcmp(one.data(), chunked.data(), one.size() * 4), 0);
}

// Malformed or contradictory checkpoints: each refused, naming the module and the reason.
struct BadCase {
  std::string name, format, want;
  std::function<void(std::vector<TensorToWrite>&)> tensors;
  std::function<void(json&)> config;
};

const std::string kM = "model.layers.2.self_attn.o_proj";

std::vector<BadCase> BadCases() {
  auto none = [](std::vector<TensorToWrite>&) {};
  auto keep = [](json&) {};
  return {
      {"no_config", "fp8-block", "declares no quantization_config", none,
       [](json& c) { c.erase("quantization_config"); }},
      {"skip_list_names_it", "fp8-block", "skip list names it", none,
       [](json& c) { c["quantization_config"]["modules_to_not_convert"].push_back(kM); }},
      {"scale_shape", "fp8-block", "weight_scale_inv' has shape [3, 2]",
       [](std::vector<TensorToWrite>& a) {
         auto* t = Named(a, kM + ".weight_scale_inv");
         t->shape = {3, 2};
         t->bytes.resize(24);
       },
       keep},
      {"nan_scale", "fp8-block", "is not finite",
       [](std::vector<TensorToWrite>& a) {
         const float nan = std::nanf("");
         std::memcpy(Named(a, kM + ".weight_scale_inv")->bytes.data(), &nan, 4);
       },
       keep},
      {"nan_code", "fp8-block", "weight element 3 is an e4m3 NaN",
       [](std::vector<TensorToWrite>& a) { Named(a, kM + ".weight")->bytes[3] = 0xFF; }, keep},
      {"nan_group_scale", "nvfp4", "weight_scale element 0 is an e4m3 NaN",
       [](std::vector<TensorToWrite>& a) { Named(a, kM + ".weight_scale")->bytes[0] = 0x7F; }, keep},
      {"weight_dtype", "fp8-block", "has dtype I8, expected F8_E4M3",
       [](std::vector<TensorToWrite>& a) { Named(a, kM + ".weight")->dtype = DType::kI8; }, keep},
      {"other_method", "fp8-block", "declares compressed-tensors pack-quantized", none,
       [](json& c) {
         c["quantization_config"] = {{"quant_method", "compressed-tensors"}, {"format", "pack-quantized"}, {"ignore", json::array()}};
       }},
      {"awq", "w4a16", "quant_method 'awq'", none, [](json& c) { c["quantization_config"] = {{"quant_method", "awq"}}; }},
      {"group_size_past_int", "w4a16", "group_size 4294967424 is out of range", none,
       [](json& c) { c["quantization_config"]["config_groups"]["group_0"]["weights"]["group_size"] = 4294967424LL; }},
      {"format_not_a_string", "w4a16", "\"format\" must be a string", none,
       [](json& c) { c["quantization_config"]["format"] = 4; }},
      {"quant_algo_not_a_string", "nvfp4", "\"quant_algo\" must be a string", none,
       [](json& c) {
         c["quantization_config"] = {{"quant_method", "modelopt"}, {"quant_algo", json::array({"NVFP4"})}};
       }},
      {"packed_shape", "w4a16", "weight_packed' has shape",
       [](std::vector<TensorToWrite>& a) {
         auto* t = Named(a, kM + ".weight_packed");
         t->shape[1] /= 2;
         t->bytes.resize(t->bytes.size() / 2);
       },
       keep},
      {"g_idx", "w4a16", "activation ordering",
       [](std::vector<TensorToWrite>& a) {
         const int64_t k = 256;
         std::vector<int32_t> g(k);
         for (int64_t c = 0; c < k; ++c) g[static_cast<size_t>(c)] = static_cast<int32_t>((k - 1 - c) / 128);
         std::vector<uint8_t> b(k * 4);
         std::memcpy(b.data(), g.data(), b.size());
         a.push_back({kM + ".weight_g_idx", DType::kI32, {k}, b});
       },
       keep},
      {"weight_shape", "w4a16", "weight_shape says",
       [](std::vector<TensorToWrite>& a) { Named(a, kM + ".weight_shape")->bytes[0] ^= 1; }, keep},
      {"weight_shape_high_word", "w4a16", "weight_shape says",  // N + 2^32: not N once truncated
       [](std::vector<TensorToWrite>& a) { Named(a, kM + ".weight_shape")->bytes[4] ^= 1; }, keep},
      {"global_zero", "nvfp4", "must be positive",
       [](std::vector<TensorToWrite>& a) { std::memset(Named(a, kM + ".weight_global_scale")->bytes.data(), 0, 4); }, keep},
      {"missing_block_scales", "fp8-block", "missing tensor 'model.layers.2.self_attn.o_proj.weight_scale_inv'",
       [](std::vector<TensorToWrite>& a) { Drop(a, kM + ".weight_scale_inv"); }, keep},
      {"block_scale_dtype", "fp8-block", "weight_scale_inv' has dtype I32",
       [](std::vector<TensorToWrite>& a) { Named(a, kM + ".weight_scale_inv")->dtype = DType::kI32; }, keep},
      {"missing_group_scales", "w4a16", "missing tensor 'model.layers.2.self_attn.o_proj.weight_scale'",
       [](std::vector<TensorToWrite>& a) { Drop(a, kM + ".weight_scale"); }, keep},
      {"group_scale_shape", "w4a16", "weight_scale' has shape [256, 3], expected [256, 256 / group size]",
       [](std::vector<TensorToWrite>& a) {
         auto* t = Named(a, kM + ".weight_scale");
         const size_t elem = t->bytes.size() / static_cast<size_t>(t->shape[0] * t->shape[1]);
         t->shape[1] += 1;  // one group too many
         t->bytes.resize(elem * static_cast<size_t>(t->shape[0] * t->shape[1]));
       },
       keep},
      {"missing_packed", "w4a16", "has neither 'model.layers.2.self_attn.o_proj.weight' nor 'model.layers.2.self_attn.o_proj.weight_packed'",
       [](std::vector<TensorToWrite>& a) { Drop(a, kM + ".weight_packed"); }, keep},
      {"missing_global_scale", "nvfp4", "missing tensor 'model.layers.2.self_attn.o_proj.weight_global_scale'",
       [](std::vector<TensorToWrite>& a) { Drop(a, kM + ".weight_global_scale"); }, keep},
      {"nvfp4_scale_dtype", "nvfp4", "has dtype U8, expected F8_E4M3",
       [](std::vector<TensorToWrite>& a) { Named(a, kM + ".weight_scale")->dtype = DType::kU8; }, keep},
      {"bad_regex", "nvfp4", "is not a regular expression", none,
       [](json& c) { c["quantization_config"]["ignore"].push_back("re:(unclosed"); }},
      // Backtracks exponentially in the name's length: std::regex took 13 s on 14 characters and
      // hung the load on real module names; now a bounded error naming the pattern.
      {"runaway_regex", "nvfp4", "ignore pattern 're:(.*)*(.*)*q_proj\\.': regex /(.*)*(.*)*q_proj\\./ on 'model.", none,
       [](json& c) { c["quantization_config"]["ignore"].push_back("re:(.*)*(.*)*q_proj\\."); }},
  };
}

void PrintTo(const BadCase& b, std::ostream* os) { *os << b.name; }

class BadQuantized : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadQuantized, IsRefusedWithAClearError) {
  const BadCase& b = GetParam();
  test::TempDir d;
  const std::string src = QuantizeDemo(d, b.format), dst = d.path() + "/bad";
  Rewrite(src, dst, b.tensors, b.config);
  auto m = LoadModel(dst);
  ASSERT_FALSE(m.ok()) << b.name;
  EXPECT_NE(m.status().message().find(b.want), std::string::npos) << m.status().ToString();
  // Errors in quantization_config itself name the file, not a module.
  const bool config_level = b.name == "awq" || b.name == "bad_regex" || b.name == "runaway_regex" ||
                            b.name == "other_method" || b.name == "no_config" ||
                            b.name == "group_size_past_int" || b.name.find("_not_a_string") != std::string::npos;
  if (!config_level) {
    EXPECT_NE(m.status().message().find("o_proj"), std::string::npos) << "names the module: " << m.status().ToString();
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, BadQuantized, ::testing::ValuesIn(BadCases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace graft

namespace graft {
namespace {

// Skip lists as real checkpoints write them: transformers' substring match for FP8's
// modules_to_not_convert, compressed-tensors' names and "re:" patterns (matched from the start),
// ModelOpt's shell wildcards.
TEST(QuantScheme, SkipListsMatchAsTheirProducersMean) {
  test::TempDir d;
  auto scheme = [&](const json& cfg_or_modelopt, bool modelopt) {
    fs::remove_all(d.path());
    fs::create_directories(d.path());
    if (modelopt) {
      test::WriteText(d.path() + "/config.json", "{}");
      test::WriteText(d.path() + "/hf_quant_config.json", cfg_or_modelopt.dump());
    } else {
      test::WriteText(d.path() + "/config.json", json{{"quantization_config", cfg_or_modelopt}}.dump());
    }
    auto s = LoadQuantScheme(d.path());
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? *s : QuantScheme{};
  };
  const std::string a = "model.language_model.layers.3.linear_attn.in_proj_a";
  const std::string q = "model.language_model.layers.3.self_attn.q_proj";
  QuantScheme fp8 = scheme({{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"},
                            {"weight_block_size", {128, 128}}, {"modules_to_not_convert", {"in_proj_a", "lm_head"}}},
                           false);
  EXPECT_TRUE(fp8.Skips(a).value());
  EXPECT_FALSE(fp8.Skips(q).value());
  EXPECT_EQ(fp8.block, 128);
  QuantScheme ct = scheme({{"quant_method", "compressed-tensors"}, {"format", "pack-quantized"},
                           {"ignore", {"lm_head", "re:.*linear_attn\\.in_proj_[ab]$", "layers.0.mlp.down_proj"}}},
                          false);
  EXPECT_TRUE(ct.Skips(a).value());
  EXPECT_TRUE(ct.Skips("model.layers.0.mlp.down_proj").value()) << "a trailing part of the name";
  EXPECT_FALSE(ct.Skips("model.layers.10.mlp.down_proj").value());
  EXPECT_FALSE(ct.Skips(q).value());
  EXPECT_FALSE(ct.Skips(a + "x").value()) << "the pattern is anchored at its $";
  // Python's re dialect (compressed-tensors matches with re.match): named groups, lookbehind.
  QuantScheme py = scheme({{"quant_method", "compressed-tensors"}, {"format", "pack-quantized"},
                           {"ignore", {"re:(?P<block>.*)(?<=linear_attn)\\.in_proj_a$"}}},
                          false);
  EXPECT_TRUE(py.Skips(a).value());
  EXPECT_FALSE(py.Skips(q).value());
  QuantScheme mo = scheme({{"quantization", {{"quant_algo", "NVFP4"}, {"group_size", 16}, {"exclude_modules", {"lm_head", "*in_proj_a*"}}}}},
                          true);
  EXPECT_EQ(mo.method, "modelopt");
  EXPECT_TRUE(mo.Skips(a).value());
  EXPECT_FALSE(mo.Skips(q).value());
  // Schemes graft does not serve are refused by name; no scheme is none.
  test::WriteText(d.path() + "/config.json", json{{"quantization_config", {{"quant_method", "gptq"}}}}.dump());
  auto gptq = LoadQuantScheme(d.path());
  ASSERT_FALSE(gptq.ok());
  EXPECT_NE(gptq.status().message().find("'gptq'"), std::string::npos);
  test::WriteText(d.path() + "/config.json", json{{"quantization_config", {{"quant_method", "fp8"}, {"weight_block_size", {128, 64}}}}}.dump());
  EXPECT_FALSE(LoadQuantScheme(d.path()).ok()) << "non-square blocks";
  test::WriteText(d.path() + "/config.json", "{}");
  fs::remove(d.path() + "/hf_quant_config.json");
  auto none = LoadQuantScheme(d.path());
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->none());
}

}  // namespace
}  // namespace graft

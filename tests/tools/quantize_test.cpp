// graft quantize --format fp8-block: the output is a checkpoint in Qwen's official FP8 layout
// (e4m3 weights, 128x128 block scales named weight_scale_inv, the quantization_config naming
// what stays high precision), sharded like its input with a consistent index, whose codes
// dequantize back within the format's step; a quality report; clear refusals.
#include "tools/quantize.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_ops.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "model/model.h"
#include "weights/quantized.h"
#include "test_util.h"
#include "util/minifloat.h"

namespace graft {
namespace {

namespace fs = std::filesystem;

TEST(Quantize, Fp8BlockWritesQwensLayoutAndDequantizesBack) {
  test::TempDir d;
  QuantizeJob job{test::Fixture("qwen3-tiny"), d.path() + "/q", "fp8-block", 2, 24, 2};
  auto rep = RunQuantize(job);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_GT(rep->quantized, 0);
  EXPECT_LT(rep->out_bytes, rep->in_bytes);
  EXPECT_GT(rep->mean_kl, 0.0) << "the quantized model differs from the input";
  EXPECT_LT(rep->mean_kl, 1e-2);
  EXPECT_GE(rep->top1, 0.9);
  auto in = Checkpoint::Open(job.in);
  auto out = Checkpoint::Open(job.out);
  ASSERT_TRUE(in.ok() && out.ok()) << out.status().ToString();
  const std::string q = "model.layers.0.self_attn.q_proj.weight";
  TensorRef w = out->Find(q), s = out->Find("model.layers.0.self_attn.q_proj.weight_scale_inv"), orig = in->Find(q);
  ASSERT_TRUE(w.file && s.file && orig.file);
  EXPECT_EQ(w.info->dtype, DType::kF8E4M3);
  EXPECT_EQ(w.info->shape, orig.info->shape);
  EXPECT_EQ(s.info->dtype, DType::kF32);
  const int64_t n = orig.info->shape[0], k = orig.info->shape[1];
  EXPECT_EQ(s.info->shape, (std::vector<int64_t>{(n + 127) / 128, (k + 127) / 128}));
  QuantizedWeight qw;
  qw.format = QuantFormat::kFp8Block;
  qw.rows = n, qw.cols = k, qw.group = 128;
  qw.codes.assign(w.data(), w.data() + w.info->num_bytes());
  qw.scale.resize(s.info->num_elements());
  std::memcpy(qw.scale.data(), s.data(), s.info->num_bytes());
  ASSERT_TRUE(ValidateQuantized(qw).ok());
  std::vector<float> back(static_cast<size_t>(n * k));
  DequantizeRows(qw, 0, n, back.data());
  auto ref = ReadAsFloat(orig);
  ASSERT_TRUE(ref.ok());
  float amax = 0;
  for (float v : ref.value()) amax = std::max(amax, std::fabs(v));
  EXPECT_FLOAT_EQ(qw.scale[0], amax / 448) << "one block: amax / 448";
  for (size_t i = 0; i < back.size(); ++i) {
    ASSERT_LE(std::fabs(back[i] - ref.value()[i]), std::max(std::fabs(ref.value()[i]) / 16, qw.scale[0] * std::ldexp(1.0f, -10)) * 1.0001f) << i;
  }
  // What is not a projection is copied bit for bit; the tokenizer comes along.
  TensorRef e_in = in->Find("model.embed_tokens.weight"), e_out = out->Find("model.embed_tokens.weight");
  ASSERT_TRUE(e_out.file);
  EXPECT_EQ(e_out.info->dtype, e_in.info->dtype);
  EXPECT_EQ(std::memcmp(e_out.data(), e_in.data(), e_in.info->num_bytes()), 0);
  EXPECT_TRUE(fs::exists(job.out + "/tokenizer.json"));
  const auto cfg = nlohmann::json::parse(test::ReadText(job.out + "/config.json"));
  EXPECT_EQ(cfg["quantization_config"]["quant_method"], "fp8");
  EXPECT_EQ(cfg["quantization_config"]["weight_block_size"], nlohmann::json::array({128, 128}));
  const auto& skip = cfg["quantization_config"]["modules_to_not_convert"];
  EXPECT_NE(std::find(skip.begin(), skip.end(), "lm_head"), skip.end()) << "listed even when tied (transformers converts it otherwise)";
  const auto report = nlohmann::json::parse(test::ReadText(job.out + "/graft_quantize_report.json"));
  EXPECT_EQ(report["quality"]["top1_agreement"].get<double>(), rep->top1);
  // Refusals: quantizing the output again; writing over the input.
  auto again = RunQuantize({job.out, d.path() + "/q2", "fp8-block", 0, 8, 1});
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("already quantized"), std::string::npos) << again.status().ToString();
  // Into a directory already holding a checkpoint (here the first run's output): refused, naming
  // the file, and nothing in it is touched.
  const std::string before = test::ReadText(job.out + "/config.json");
  auto over = RunQuantize({job.in, job.out, "w4a16", 0, 8, 1});
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.status().message().find("already holds a checkpoint"), std::string::npos) << over.status().ToString();
  EXPECT_EQ(test::ReadText(job.out + "/config.json"), before);
  auto self = RunQuantize({job.out, job.out, "fp8-block", 0, 8, 1});
  ASSERT_FALSE(self.ok());
  EXPECT_NE(self.status().message().find("--out is the input directory"), std::string::npos);
  EXPECT_FALSE(RunQuantize({job.in, d.path() + "/q3", "int3", 0, 8, 1}).ok());
  // graft serves what it wrote.
  auto m = LoadModel(job.out);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
}

TEST(Quantize, ShardedQwen35KeepsItsShardsAndTheSmallProjections) {
  test::TempDir d;
  QuantizeJob job{test::Fixture("qwen3_5-text-odd"), d.path(), "fp8-block", 0, 8, 1};
  auto rep = RunQuantize(job);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  auto out = Checkpoint::Open(job.out);  // checks the rewritten index against the shards
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  auto in = Checkpoint::Open(job.in);
  EXPECT_EQ(out->files().size(), in->files().size());
  const std::string layer = "model.layers.0.linear_attn.";
  EXPECT_EQ(out->Find(layer + "in_proj_a.weight").info->dtype, DType::kBF16);
  EXPECT_EQ(out->Find(layer + "in_proj_qkv.weight").info->dtype, DType::kF8E4M3);
  EXPECT_EQ(out->Find(layer + "in_proj_qkv.weight_scale_inv").file, out->Find(layer + "in_proj_qkv.weight").file)
      << "a scale lives in its weight's shard";
  const auto cfg = nlohmann::json::parse(test::ReadText(job.out + "/config.json"));
  const auto& keep = cfg["quantization_config"]["modules_to_not_convert"];
  EXPECT_NE(std::find(keep.begin(), keep.end(), layer + "in_proj_a"), keep.end());
  EXPECT_FALSE(fs::exists(job.out + "/graft_quantize_report.json") &&
               nlohmann::json::parse(test::ReadText(job.out + "/graft_quantize_report.json")).contains("quality"))
      << "--eval-sequences 0 skips the quality report";
}

// Tensors are quantized in parallel (--threads); the files written do not depend on how many.
TEST(Quantize, TheOutputDoesNotDependOnTheThreadCount) {
  test::TempDir d;
  for (const char* format : {"nvfp4", "w4a16"}) {
    QuantizeJob one{test::Fixture("qwen3_5-text-odd"), d.path() + "/one-" + format, format, 0, 8, 1};
    QuantizeJob three = one;
    three.out = d.path() + "/three-" + format;
    three.threads = 3;
    ASSERT_TRUE(RunQuantize(one).ok());
    ASSERT_TRUE(RunQuantize(three).ok());
    int files = 0;
    for (const auto& e : fs::directory_iterator(one.out)) {
      const std::string name = e.path().filename().string();
      if (name == "graft_quantize_report.json") continue;
      EXPECT_EQ(test::ReadText(e.path().string()), test::ReadText(three.out + "/" + name)) << format << " " << name;
      ++files;
    }
    EXPECT_GE(files, 3) << "config and at least two shards";
  }
}

// --format w4a16 on the demo base: compressed-tensors' pack-quantized tensors, unpacked by hand
// here (nibble i of word j = column 8j + i, stored q + 8), within half a scale of the input.
TEST(Quantize, W4a16WritesCompressedTensorsPackQuantized) {
  test::TempDir d;
  const std::string root = fs::path(test::FixturesDir()).parent_path().string();
  QuantizeJob job{root + "/models/base", d.path(), "w4a16", 1, 32, 2};
  auto rep = RunQuantize(job);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_GT(rep->mean_kl, 0.0);
  EXPECT_LT(rep->mean_kl, 0.5);
  auto in = Checkpoint::Open(job.in);
  auto out = Checkpoint::Open(job.out);
  ASSERT_TRUE(in.ok() && out.ok()) << out.status().ToString();
  const std::string m = "model.layers.2.mlp.down_proj";
  TensorRef packed = out->Find(m + ".weight_packed"), scale = out->Find(m + ".weight_scale"),
            shape = out->Find(m + ".weight_shape"), orig = in->Find(m + ".weight");
  ASSERT_TRUE(packed.file && scale.file && shape.file && orig.file);
  EXPECT_FALSE(out->Has(m + ".weight"));
  const int64_t n = orig.info->shape[0], k = orig.info->shape[1];
  EXPECT_EQ(packed.info->dtype, DType::kI32);
  EXPECT_EQ(packed.info->shape, (std::vector<int64_t>{n, k / 8}));
  EXPECT_EQ(scale.info->dtype, DType::kBF16);
  EXPECT_EQ(scale.info->shape, (std::vector<int64_t>{n, k / 128}));
  ASSERT_EQ(shape.info->dtype, DType::kI64) << "compressed-tensors writes weight_shape as int64 (vLLM declares it so)";
  int64_t dims[2];
  std::memcpy(dims, shape.data(), 16);
  EXPECT_EQ(dims[0], n);
  EXPECT_EQ(dims[1], k);
  auto ref = ReadAsFloat(orig).value();
  auto s = ReadAsFloat(scale).value();
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      uint32_t word;
      std::memcpy(&word, packed.data() + 4 * (r * (k / 8) + c / 8), 4);
      const int q = static_cast<int>((word >> (4 * (c % 8))) & 0xf) - 8;
      const float sc = s[static_cast<size_t>(r * (k / 128) + c / 128)];
      const float x = ref[static_cast<size_t>(r * k + c)];  // half a step, or clipped at the top (7 steps)
      ASSERT_LE(std::fabs(q * sc - x), std::max(sc / 2, x - 7 * sc) * 1.0001f) << r << "," << c;
    }
  }
  const auto cfg = nlohmann::json::parse(test::ReadText(job.out + "/config.json"));
  const auto& qc = cfg["quantization_config"];
  EXPECT_EQ(qc["quant_method"], "compressed-tensors");
  EXPECT_EQ(qc["format"], "pack-quantized");
  EXPECT_EQ(qc["config_groups"]["group_0"]["weights"]["group_size"], 128);
  EXPECT_NE(std::find(qc["ignore"].begin(), qc["ignore"].end(), "model.layers.0.linear_attn.in_proj_a"), qc["ignore"].end());
  EXPECT_EQ(out->Find("model.layers.0.linear_attn.in_proj_a.weight").info->dtype, DType::kBF16);
}

}  // namespace
}  // namespace graft

namespace graft {
namespace {

// vLLM serves q/k/v, gate/up and in_proj_qkv/z each as one fused module with one NVFP4 global
// scale (llm-compressor writes them so): the written checkpoint gives every tensor of such a
// group the same weight_global_scale, from the group's amax, while unrelated modules keep their
// own; the groups' blocks still dequantize within the format's step.
TEST(Quantize, Nvfp4FusedModulesShareOneGlobalScale) {
  test::TempDir d;
  const std::string root = fs::path(test::FixturesDir()).parent_path().string();
  QuantizeJob job{root + "/models/base", d.path(), "nvfp4", 0, 8, 2};
  ASSERT_TRUE(RunQuantize(job).ok());
  auto in = Checkpoint::Open(job.in);
  auto out = Checkpoint::Open(job.out);
  ASSERT_TRUE(in.ok() && out.ok());
  auto global = [&](const std::string& module) {
    TensorRef g = out->Find(module + ".weight_global_scale");
    EXPECT_TRUE(g.file) << module;
    float v = 0;
    if (g.file) std::memcpy(&v, g.data(), 4);
    return v;
  };
  auto amax = [&](const std::string& module) {
    const auto v = ReadAsFloat(in->Find(module + ".weight")).value();
    float m = 0;
    for (float x : v) m = std::max(m, std::fabs(x));
    return m;
  };
  const std::string gdn = "model.layers.0.", attn = "model.layers.2.";
  const std::vector<std::vector<std::string>> groups = {
      {attn + "self_attn.q_proj", attn + "self_attn.k_proj", attn + "self_attn.v_proj"},
      {attn + "mlp.gate_proj", attn + "mlp.up_proj"},
      {gdn + "linear_attn.in_proj_qkv", gdn + "linear_attn.in_proj_z"},
      {gdn + "mlp.gate_proj", gdn + "mlp.up_proj"}};
  bool any_differ = false;  // the fixture's tensors must not share amax by chance
  for (const auto& g : groups) {
    float group_amax = 0;
    for (const auto& m : g) group_amax = std::max(group_amax, amax(m));
    for (const auto& m : g) {
      EXPECT_EQ(global(m), global(g[0])) << m << " vs " << g[0];
      any_differ = any_differ || amax(m) != group_amax;
    }
    // stored as the reciprocal: 1 / global, global = group amax / (6 · 448) (moved up by ulps)
    EXPECT_NEAR(1.0f / global(g[0]), group_amax / (6.0f * 448.0f), group_amax / (6.0f * 448.0f) * 1e-5f) << g[0];
  }
  EXPECT_TRUE(any_differ) << "every member already had its group's amax: the test would not see sharing";
  EXPECT_NE(global(attn + "self_attn.q_proj"), global(attn + "self_attn.o_proj"));
}

// A checkpoint with a NaN in one projection is refused for every format, the tensor named —
// never written with a poisoned scale (NVFP4 reads a fused group's amax first).
TEST(Quantize, ANonFiniteWeightIsRefusedByName) {
  test::TempDir m;
  const std::string base = fs::path(test::FixturesDir()).parent_path().string() + "/models/base";
  for (const auto& f : fs::directory_iterator(base)) fs::copy(f.path(), m.File(f.path().filename()));
  auto st = SafetensorsFile::Open(m.File("model.safetensors"));
  ASSERT_TRUE(st.ok());
  const std::string bad = "model.layers.2.self_attn.k_proj.weight";
  std::vector<TensorToWrite> ts;
  for (const auto& t : st->tensors()) {
    TensorToWrite w{t.name, t.dtype, t.shape, {}};
    w.bytes.assign(st->Data(t), st->Data(t) + t.num_bytes());
    if (t.name == bad) {
      ASSERT_EQ(t.dtype, DType::kBF16);
      w.bytes[2 * 37] = 0xc0, w.bytes[2 * 37 + 1] = 0x7f;  // element 37: bf16 NaN
    }
    ts.push_back(std::move(w));
  }
  ASSERT_TRUE(WriteSafetensors(m.File("model.safetensors"), std::move(ts)).ok());
  for (const char* format : {"nvfp4", "w4a16", "fp8-block"}) {
    test::TempDir out;
    auto rep = RunQuantize({m.path(), out.path(), format, 0, 8, 2});
    ASSERT_FALSE(rep.ok()) << format;
    EXPECT_NE(rep.status().ToString().find(bad), std::string::npos) << format << ": " << rep.status().ToString();
    EXPECT_NE(rep.status().ToString().find("finite"), std::string::npos) << format << ": " << rep.status().ToString();
  }
}

// graft bench --dummy-quantize quantizes weights in memory: the same model, bit for bit, as
// graft quantize's checkpoint loaded back.
TEST(Quantize, InMemoryQuantizationServesWhatTheCheckpointServes) {
  test::TempDir d;
  const std::string base = std::filesystem::path(test::FixturesDir()).parent_path().string() + "/models/base";
  for (const char* format : {"w4a16", "nvfp4", "fp8-block"}) {
    const std::string out = d.path() + "/" + format;
    ASSERT_TRUE(RunQuantize({base, out, format, 0, 8, 2}).ok());
    auto from_disk = LoadModel(out);
    auto bf16 = LoadModel(base);
    ASSERT_TRUE(from_disk.ok() && bf16.ok());
    ModelWeights w = (*bf16)->weights();
    ASSERT_TRUE(QuantizeWeights(w, (*bf16)->config(), ParseQuantFormat(format).value(), 2).ok());
    EXPECT_EQ(w.ProjectionStorage(), (*from_disk)->weights().ProjectionStorage()) << format;
    auto made = MakeModel((*bf16)->config(), std::move(w));
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    const auto& in_memory = *made;
    CpuOps ops(ActDtype::kBF16, 2);
    const std::vector<int32_t> ids = {3, 77, 1024, 5, 8000, 42, 42, 9};
    const auto a = test::RunChunks(**from_disk, ops, ids, {}), b = test::RunChunks(*in_memory, ops, ids, {});
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << format;
  }
  EXPECT_FALSE(ParseQuantFormat("int3").ok());
}

// Benchmarks also quantize to compressed-tensors' per-channel FP8 in memory (graft loads it,
// graft quantize does not write it): the name is accepted there only, the projections become
// per-channel FP8 and the model stays near the bf16 one.
TEST(Quantize, BenchFormatsAddPerChannelFp8) {
  EXPECT_EQ(ParseBenchQuantFormat("fp8-channel").value(), QuantFormat::kFp8Channel);
  for (const char* f : {"fp8-block", "w4a16", "nvfp4"}) EXPECT_EQ(ParseBenchQuantFormat(f).value(), ParseQuantFormat(f).value()) << f;
  EXPECT_FALSE(ParseQuantFormat("fp8-channel").ok()) << "graft quantize does not write per-channel FP8";
  const auto bad = ParseBenchQuantFormat("int3");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().ToString().find("fp8-channel"), std::string::npos) << bad.status().ToString();

  const std::string base = std::filesystem::path(test::FixturesDir()).parent_path().string() + "/models/base";
  auto bf16 = LoadModel(base);
  ASSERT_TRUE(bf16.ok()) << bf16.status().ToString();
  ModelWeights w = (*bf16)->weights();
  ASSERT_TRUE(QuantizeWeights(w, (*bf16)->config(), QuantFormat::kFp8Channel, 2).ok());
  EXPECT_EQ(w.layers[2].attn.qkv.storage(), "fp8 (per channel)");
  auto made = MakeModel((*bf16)->config(), std::move(w));
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  const auto& q = *made;
  CpuOps ops(ActDtype::kF32, 2);
  const std::vector<int32_t> ids = {3, 77, 1024, 5, 8000, 42, 42, 9};
  const auto a = test::RunChunks(*q, ops, ids, {}), b = test::RunChunks(**bf16, ops, ids, {});
  ASSERT_EQ(a.size(), b.size());
  double diff = 0, mag = 0;
  for (size_t i = 0; i < a.size(); ++i) diff += std::fabs(a[i] - b[i]), mag += std::fabs(b[i]);
  EXPECT_GT(diff, 0);
  EXPECT_LT(diff / mag, 0.1) << "per-channel fp8 logits stay near the bf16 model's";
}

}  // namespace
}  // namespace graft

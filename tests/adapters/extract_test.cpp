// graft adapter extract / verify on the PEFT fixtures: extraction at the adapter's rank
// reproduces a float32 merge's logits, the exact representation reconstructs every bf16 merge
// bit for bit, verify catches a flipped bit, and mismatched pairs are refused.
#include "tools/adapter_extract.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "adapters/lora_loader.h"
#include "backend/cpu/cpu_ops.h"
#include "io/safetensors.h"
#include "test_util.h"
#include "tools/adapter_verify.h"

namespace graft {
namespace {

namespace fs = std::filesystem;

ExtractJob Job(const std::string& merged, const std::string& base, const std::string& out, int rank) {
  ExtractJob j;
  j.merged = test::Fixture(merged);
  j.base = test::Fixture(base);
  j.out = out;
  j.rank.rank = rank;
  j.eval_sequences = 2;
  j.eval_length = 24;
  return j;
}

double MeanKl(const std::vector<float>& p, const std::vector<float>& q, int vocab, int* top_same, int* rows) {
  double sum = 0;
  *rows = static_cast<int>(p.size() / vocab);
  *top_same = 0;
  for (int t = 0; t < *rows; ++t) {
    const float* a = p.data() + t * vocab;
    const float* b = q.data() + t * vocab;
    double ma = *std::max_element(a, a + vocab), mb = *std::max_element(b, b + vocab), za = 0, zb = 0;
    for (int v = 0; v < vocab; ++v) za += std::exp(a[v] - ma), zb += std::exp(b[v] - mb);
    for (int v = 0; v < vocab; ++v) {
      const double la = a[v] - ma - std::log(za), lb = b[v] - mb - std::log(zb);
      sum += std::exp(la) * (la - lb);
    }
    *top_same += std::max_element(a, a + vocab) - a == std::max_element(b, b + vocab) - b;
  }
  return sum / *rows;
}

struct Pair {
  std::string merged, base;
  int rank;
};

class ExtractF32 : public ::testing::TestWithParam<Pair> {};

// On a float32 merge (no rounding residual), extraction at the adapter's rank gives the merged
// model's logits through graft's own logits path: the same top-1 everywhere, mean KL <= 1e-4.
TEST_P(ExtractF32, AtTheAdaptersRankMatchesTheMergedLogits) {
  const Pair& p = GetParam();
  test::TempDir d;
  ExtractJob job = Job(p.merged, p.base, d.path(), p.rank);
  job.float32_factors = true;
  auto rep = RunExtract(job);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_GT(rep->projections, 0);
  EXPECT_EQ(rep->top1, 1.0);
  EXPECT_LE(rep->mean_kl, 1e-4);
  // The fixture sequences too, against graft's run of the merged checkpoint.
  auto base = test::LoadFixtureModel(p.base);
  auto merged = LoadModel(test::Fixture(p.merged));
  ASSERT_TRUE(merged.ok());
  auto ad = LoadLoraAdapter(d.path(), base->config(), {"x", false, nullptr});
  ASSERT_TRUE(ad.ok()) << ad.status().ToString();
  AdapterSet set;
  set.slots.push_back(&ad.value());
  CpuOps ops(ActDtype::kF32, 2);
  const int vocab = base->config().vocab_size;
  for (const auto& [name, ids] : test::ReadIntTensors(test::Fixture(p.base) + "/inputs.safetensors")) {
    std::vector<float> la(ids.size() * vocab);
    SequenceState st = base->NewState();
    ASSERT_TRUE(base->Forward(ops, ids.data(), static_cast<int>(ids.size()), st, la.data(), 1, &set).ok());
    const auto lm = test::RunChunks(**merged, ops, ids, {});
    int same = 0, rows = 0;
    EXPECT_LE(MeanKl(lm, la, vocab, &same, &rows), 1e-4) << name;
    EXPECT_EQ(same, rows) << name;
  }
  // The manifest records what was done.
  auto m = nlohmann::json::parse(test::ReadText(d.File("graft_manifest.json")));
  EXPECT_EQ(m["base_identity"].get<std::string>().size(), 64u);
  EXPECT_NE(m["base_identity"], m["merged_identity"]);
  EXPECT_TRUE(m["quality"].contains("mean_kl_merged_vs_adapter"));
  for (const auto& [mod, info] : m["modules"].items()) EXPECT_LT(info["relative_error"].get<double>(), 1e-5) << mod;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ExtractF32,
                         ::testing::Values(Pair{"adapters/qwen3-tiny-lora-mixed-merged-f32", "qwen3-tiny", 13},
                                           Pair{"adapters/qwen3_5-wrapper-lora-gdn-merged-f32", "qwen3_5-wrapper", 48}),
                         [](const auto& info) { return info.param.base == "qwen3-tiny" ? std::string("qwen3") : std::string("qwen3_5"); });

class ExtractExact : public ::testing::TestWithParam<test::MergedFixture> {};

// --exact: every projection of every bf16 merge reconstructs bit for bit; verify proves it and
// catches one flipped bit in any stored tensor.
TEST_P(ExtractExact, ReconstructsEveryProjectionBitForBit) {
  const test::MergedFixture& p = GetParam();
  test::TempDir d;
  ExtractJob job = Job(p.merged, p.base, d.path(), p.rank);
  job.exact = true;
  job.eval_sequences = 0;
  auto rep = RunExtract(job);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_LT(rep->exact_residual_bytes, rep->touched_bf16_bytes / 10) << "residual is not compact";
  VerifyJob v{d.path(), test::Fixture(p.base), test::Fixture(p.merged), true, false, ""};
  std::string report;
  Status st = RunVerify(v, &report);
  ASSERT_TRUE(st.ok()) << st.ToString() << "\n" << report;
  EXPECT_NE(report.find("reconstruct the merged bf16 weights bit for bit"), std::string::npos);
  // Flip one bit in each stored file: verify must fail and name the tensor's hash.
  for (const char* file : {"adapter_model.safetensors", "graft_exact.safetensors"}) {
    const std::string path = d.File(file);
    std::string bytes = test::ReadText(path);
    const std::string saved = bytes;
    bytes[bytes.size() - 3] ^= 0x10;
    test::WriteText(path, bytes);
    report.clear();
    st = RunVerify(v, &report);
    ASSERT_FALSE(st.ok()) << file;
    EXPECT_NE(st.message().find("does not match its SHA-256"), std::string::npos) << st.ToString();
    test::WriteText(path, saved);
  }
  EXPECT_TRUE(RunVerify(v, &report).ok());
  // Manifest fields of the wrong type are named errors (nlohmann's value() threw on them: an
  // abort), and inspect shows whatever is there.
  const std::string mpath = d.File("graft_manifest.json");
  const std::string manifest = test::ReadText(mpath);
  struct Edit {
    const char* field;
    nlohmann::json value;
    const char* expect;
  };
  const std::vector<Edit> edits = {
      {"/merged_identity", 42, "\"merged_identity\" must be a string, not number"},
      {"/exact", "yes", "\"exact\" must be an object"},
      {"/exact/residual_bytes", "many", "\"residual_bytes\" must be an integer, not string"},
      {"/modules", nullptr, "no \"modules\" object"},
  };
  for (const auto& e : edits) {
    nlohmann::ordered_json m = nlohmann::ordered_json::parse(manifest);
    m[nlohmann::ordered_json::json_pointer(e.field)] = e.value;
    test::WriteText(mpath, m.dump());
    report.clear();
    st = RunVerify(v, &report);
    ASSERT_FALSE(st.ok()) << e.field;
    EXPECT_NE(st.message().find(e.expect), std::string::npos) << st.ToString();
    auto shown = InspectAdapter(d.path());
    ASSERT_TRUE(shown.ok()) << shown.status().ToString();
    EXPECT_NE(shown->find("manifest  base"), std::string::npos);
  }
  test::WriteText(mpath, "[1, 2]");  // not an object at all
  auto shown = InspectAdapter(d.path());
  ASSERT_TRUE(shown.ok()) << shown.status().ToString();
  EXPECT_NE(shown->find("manifest  base ? | merged ? | tool ?"), std::string::npos) << *shown;
  test::WriteText(mpath, manifest);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ExtractExact, ::testing::ValuesIn(test::Bf16MergedFixtures()),
                         [](const auto& info) { return test::MergedFixtureName(info.param); });

// Extracting from a bf16 merge recovers the original adapter's behaviour (PEFT's float32
// logits) about as closely as the bf16 merge itself does: the merge's rounding is noise that a
// low-rank fit mostly leaves out.
TEST(Extract, Bf16MergeRecoversThePeftAdapterAsWellAsTheMergeDoes) {
  test::TempDir d;
  // Rank 48: the largest rank the PEFT adapter used (out_proj); the others used 2 to 16.
  ExtractJob job = Job("adapters/qwen3_5-wrapper-lora-gdn-merged", "qwen3_5-wrapper", d.path(), 48);
  job.float32_factors = true;
  job.eval_sequences = 0;
  ASSERT_TRUE(RunExtract(job).ok());
  auto base = test::LoadFixtureModel("qwen3_5-wrapper");
  auto merged = LoadModel(test::Fixture("adapters/qwen3_5-wrapper-lora-gdn-merged"));
  ASSERT_TRUE(merged.ok());
  auto ad = LoadLoraAdapter(d.path(), base->config(), {"x", false, nullptr});
  ASSERT_TRUE(ad.ok());
  AdapterSet set;
  set.slots.push_back(&ad.value());
  CpuOps ops(ActDtype::kF32, 2);
  const int vocab = base->config().vocab_size;
  auto refs = test::ReadFloatTensors(test::Fixture("adapters/qwen3_5-wrapper-lora-gdn/ref_f32.safetensors"));
  double kl_extracted = 0, kl_merged = 0;
  int same_extracted = 0, same_merged = 0;
  for (const auto& [name, ids] : test::ReadIntTensors(test::Fixture("qwen3_5-wrapper/inputs.safetensors"))) {
    std::vector<float> la(ids.size() * vocab);
    SequenceState st = base->NewState();
    ASSERT_TRUE(base->Forward(ops, ids.data(), static_cast<int>(ids.size()), st, la.data(), 1, &set).ok());
    int same = 0, rows = 0;
    kl_extracted += MeanKl(refs.at(name), la, vocab, &same, &rows) * rows;
    same_extracted += same;
    kl_merged += MeanKl(refs.at(name), test::RunChunks(**merged, ops, ids, {}), vocab, &same, &rows) * rows;
    same_merged += same;
  }
  std::printf("KL(PEFT || extracted) sum %.4g, top-1 %d; KL(PEFT || bf16 merge) sum %.4g, top-1 %d\n", kl_extracted,
              same_extracted, kl_merged, same_merged);
  EXPECT_LE(kl_extracted, 2.0 * kl_merged);
  EXPECT_GE(same_extracted, same_merged - 2);
}

std::string ExtractError(const std::string& merged, const std::string& base, const std::string& out) {
  ExtractJob j;
  j.merged = merged;
  j.base = base;
  j.out = out;
  j.rank.rank = 4;
  j.eval_sequences = 0;
  auto r = RunExtract(j);
  return r.ok() ? "EXTRACTED" : r.status().message();
}

TEST(Extract, RefusesMismatchedPairs) {
  test::TempDir out;
  EXPECT_NE(ExtractError(test::Fixture("qwen3_5-wrapper"), test::Fixture("qwen3-tiny"), out.path())
                .find("architecture: base qwen3 vs merged qwen3_5"),
            std::string::npos);
  const std::string e = ExtractError(test::Fixture("qwen3-odd-sharded"), test::Fixture("qwen3-tiny"), out.path());
  EXPECT_NE(e.find("vocab_size: base 512 vs merged 389"), std::string::npos) << e;
  EXPECT_NE(e.find("hidden_size: base 64 vs merged 80"), std::string::npos) << e;
  EXPECT_NE(ExtractError(test::Fixture("qwen3-tiny"), test::Fixture("qwen3-tiny"), out.path()).find("identical"),
            std::string::npos);
  // Same config but a tensor of another shape: named.
  test::TempDir m;
  for (const auto& f : fs::directory_iterator(test::Fixture("qwen3-tiny"))) fs::copy(f.path(), m.File(f.path().filename()));
  auto st = SafetensorsFile::Open(m.File("model.safetensors"));
  ASSERT_TRUE(st.ok());
  std::vector<TensorToWrite> ts;
  for (const auto& t : st->tensors()) {
    TensorToWrite w{t.name, t.dtype, t.shape, {}};
    w.bytes.assign(st->Data(t), st->Data(t) + t.num_bytes());
    if (t.name == "model.norm.weight") w.shape = {8, 8};
    ts.push_back(std::move(w));
  }
  ASSERT_TRUE(WriteSafetensors(m.File("model.safetensors"), std::move(ts)).ok());
  EXPECT_NE(ExtractError(m.path(), test::Fixture("qwen3-tiny"), out.path()).find("model.norm.weight: base BF16 [64] vs merged BF16 [8, 8]"),
            std::string::npos);
}

TEST(Extract, OtherDifferencesAreRefusedOrStoredNeverDropped) {
  // A merge that also changed the final norm.
  test::TempDir m, out, out2;
  const std::string src = test::Fixture("adapters/qwen3-tiny-lora-mixed-merged");
  for (const auto& f : fs::directory_iterator(src)) fs::copy(f.path(), m.File(f.path().filename()));
  auto st = SafetensorsFile::Open(m.File("model.safetensors"));
  ASSERT_TRUE(st.ok());
  std::vector<TensorToWrite> ts;
  for (const auto& t : st->tensors()) {
    TensorToWrite w{t.name, t.dtype, t.shape, {}};
    w.bytes.assign(st->Data(t), st->Data(t) + t.num_bytes());
    if (t.name == "model.norm.weight") w.bytes[1] ^= 0x01;
    ts.push_back(std::move(w));
  }
  ASSERT_TRUE(WriteSafetensors(m.File("model.safetensors"), std::move(ts)).ok());
  const std::string e = ExtractError(m.path(), test::Fixture("qwen3-tiny"), out.path());
  EXPECT_NE(e.find("refusing to drop them silently"), std::string::npos) << e;
  EXPECT_NE(e.find("model.norm.weight"), std::string::npos);
  ExtractJob j = Job("qwen3-tiny", "qwen3-tiny", out2.path(), 16);
  j.merged = m.path();
  j.store_full = true;
  j.eval_sequences = 0;
  ASSERT_TRUE(RunExtract(j).ok());
  auto full = SafetensorsFile::Open(out2.File("graft_full.safetensors"));
  ASSERT_TRUE(full.ok());
  EXPECT_NE(full->Find("model.norm.weight"), nullptr);
  auto manifest = nlohmann::json::parse(test::ReadText(out2.File("graft_manifest.json")));
  EXPECT_EQ(manifest["other_differences"][0]["tensor"], "model.norm.weight");
  EXPECT_EQ(manifest["other_differences"][0]["stored"], true);
}

TEST(Extract, EnergyChoosesRanksPerProjection) {
  test::TempDir d;
  ExtractJob j = Job("adapters/qwen3-tiny-lora-mixed-merged-f32", "qwen3-tiny", d.path(), 0);
  j.rank = RankChoice{0, 0.999999};
  j.float32_factors = true;
  auto rep = RunExtract(j);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  auto cfg = nlohmann::json::parse(test::ReadText(d.File("adapter_config.json")));
  // The PEFT adapter had rank 13 on k_proj and 5 on down_proj: energy finds exactly those.
  EXPECT_EQ(cfg["rank_pattern"]["model.layers.0.self_attn.k_proj"], 13);
  EXPECT_EQ(cfg["rank_pattern"]["model.layers.1.mlp.down_proj"], 5);
  EXPECT_EQ(cfg["r"], 8);
  EXPECT_EQ(rep->top1, 1.0);
}

}  // namespace
}  // namespace graft

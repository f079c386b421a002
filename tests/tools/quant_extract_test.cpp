// graft adapter extract --quantized-base (issue 10): the factors are fitted to the release minus
// the weights the quantized base actually multiplies, so base-quantized + adapter lands closer
// to the release (in weight space, the quantity the fit minimises) than factors fitted against
// the bf16 base; the manifest names the quantized checkpoint as the base, so the adapter loads
// onto it without --force; combinations that cannot work are refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "adapters/lora_loader.h"
#include "io/checkpoint.h"
#include "io/identity.h"
#include "model/model.h"
#include "model/projections.h"
#include "test_util.h"
#include "tools/adapter_extract.h"
#include "tools/quantize.h"

namespace graft {
namespace {

namespace fs = std::filesystem;

std::string Models() { return fs::path(test::FixturesDir()).parent_path().string() + "/models"; }

ExtractJob Job(const std::string& out, const std::string& cache, int rank) {
  ExtractJob j;
  j.merged = Models() + "/release";
  j.base = Models() + "/base";
  j.out = out;
  j.rank.rank = rank;
  j.eval_sequences = 0;
  j.cache_dir = cache;
  return j;
}

// Σ over the adapter's modules of ||merged − (served + scale · B·A)||², rows of the fused slots.
double WeightError(const Model& served, const Model& merged, const LoraAdapter& a) {
  double err = 0;
  test::ForEachAdapterRowError(served, merged, a, [&](int, LoraTarget, const std::vector<double>& e) {
    for (double v : e) err += v * v;
  });
  return err;
}

TEST(QuantizedBaseExtract, FitsTheServedWeightsAndNamesTheQuantizedBase) {
  test::TempDir d;
  const std::string q = d.path() + "/base-w4a16";
  ASSERT_TRUE(RunQuantize({Models() + "/base", q, "w4a16", 0, 8, 2}).ok());
  ExtractJob plain = Job(d.path() + "/plain", d.path() + "/cache", 16);
  ExtractJob qa = Job(d.path() + "/qa", d.path() + "/cache", 16);
  qa.quantized_base = q;
  qa.eval_sequences = 1;
  qa.eval_length = 16;
  ASSERT_TRUE(RunExtract(plain).ok());
  auto rep = RunExtract(qa);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_GE(rep->mean_kl, 0.0) << "the quality report ran on the quantized base";

  auto qck = Checkpoint::Open(q);
  ASSERT_TRUE(qck.ok());
  const std::string qid = CachedIdentity(*qck, qa.cache_dir).value().identity;
  const auto mq = nlohmann::json::parse(test::ReadText(qa.out + "/graft_manifest.json"));
  const auto mp = nlohmann::json::parse(test::ReadText(plain.out + "/graft_manifest.json"));
  EXPECT_EQ(mq["base_identity"], qid);
  EXPECT_EQ(mq["quantized_base"]["bf16_base_identity"], mp["base_identity"]);
  EXPECT_EQ(mq["quality"]["adapter_on"], "the quantized base");

  auto served = LoadModel(q), merged = LoadModel(Models() + "/release");
  ASSERT_TRUE(served.ok() && merged.ok());
  LoraLoadOptions opt;
  opt.name = "x";
  opt.base_identity = [&]() -> Result<std::string> { return qid; };
  auto a_qa = LoadLoraAdapter(qa.out, (*served)->config(), opt);
  ASSERT_TRUE(a_qa.ok()) << "loads onto the quantized base without --force: " << a_qa.status().ToString();
  auto refused = LoadLoraAdapter(plain.out, (*served)->config(), opt);
  EXPECT_FALSE(refused.ok()) << "an adapter fitted to the bf16 base names that base";
  opt.force = true;
  auto a_plain = LoadLoraAdapter(plain.out, (*served)->config(), opt);
  ASSERT_TRUE(a_plain.ok());
  const double e_qa = WeightError(**served, **merged, *a_qa), e_plain = WeightError(**served, **merged, *a_plain);
  std::printf("||release - (w4a16 base + adapter)||^2: fitted to the quantized base %.4g, to the bf16 base %.4g\n", e_qa,
              e_plain);
  EXPECT_LT(e_qa, 0.97 * e_plain) << "the SVD of (release - served) is the best rank-r fit of exactly this error";
}

TEST(QuantizedBaseExtract, RefusesWhatCannotWork) {
  test::TempDir d;
  ExtractJob bf16 = Job(d.path() + "/a", d.path() + "/cache", 8);
  bf16.quantized_base = Models() + "/base";
  auto r = RunExtract(bf16);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("declares no quantization_config"), std::string::npos) << r.status().ToString();
  const std::string q = d.path() + "/q";
  ASSERT_TRUE(RunQuantize({Models() + "/base", q, "fp8-block", 0, 8, 2}).ok());
  ExtractJob exact = Job(d.path() + "/b", d.path() + "/cache", 8);
  exact.quantized_base = q;
  exact.exact = true;
  r = RunExtract(exact);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--exact-base"), std::string::npos) << r.status().ToString();
  ExtractJob other = Job(d.path() + "/c", d.path() + "/cache", 8);
  other.quantized_base = test::Fixture("qwen3-tiny");
  r = RunExtract(other);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--quantized-base"), std::string::npos) << r.status().ToString();
}

}  // namespace
}  // namespace graft

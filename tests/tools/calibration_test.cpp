// Calibrated extraction (graft adapter extract --calibration, issue 10): the input statistics
// the demo model's projections see on a text, and adapters fitted to them — on the quantized
// base they leave less of the release's error on those inputs than the weight-space fit.
#include "tools/calibration.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
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

std::string WriteText(const std::string& dir, const std::string& text) {
  const std::string p = dir + "/calibration.txt";
  std::ofstream(p) << text;
  return p;
}

const char* kText =
    "10.0.0.7 - - [12/Mar/2026:13:04:17 +0000] \"GET /api/v1/users HTTP/1.1\" 200 3369 \"Mozilla/5.0\" 16ms\n"
    "10.0.0.9 - - [12/Mar/2026:13:04:18 +0000] \"POST /login HTTP/1.1\" 401 12 \"curl/8.0\" 3ms\n"
    "Was any request refused? Choices: yes, no. How many distinct clients? Choices: 1, 2, 3.\n";

TEST(Calibration, EverySlotSeesEveryTokenAsASymmetricGram) {
  test::TempDir d;
  auto model = LoadModel(Models() + "/base");
  ASSERT_TRUE(model.ok());
  auto grams = CollectInputGrams(**model, Models() + "/base", WriteText(d.path(), kText), 1 << 20, 16, 2);
  ASSERT_TRUE(grams.ok()) << grams.status().ToString();
  ASSERT_FALSE(grams->empty());
  int64_t rows = -1;
  for (const auto& [key, g] : *grams) {
    if (rows < 0) rows = g.rows;
    EXPECT_EQ(g.rows, rows) << "every slot of every layer runs on every calibration token";
    for (int64_t i = 0; i < g.k; ++i) {
      EXPECT_GE(g.g[static_cast<size_t>(i * g.k + i)], 0.0);
      for (int64_t j = 0; j < i; ++j) ASSERT_EQ(g.g[static_cast<size_t>(i * g.k + j)], g.g[static_cast<size_t>(j * g.k + i)]);
    }
  }
  EXPECT_GT(rows, 40);
  auto capped = CollectInputGrams(**model, Models() + "/base", WriteText(d.path(), kText), 20, 16, 2);
  ASSERT_TRUE(capped.ok());
  EXPECT_EQ(capped->begin()->second.rows, 20) << "--calibration-tokens caps the text";
}

TEST(Calibration, BadTextIsANamedError) {
  test::TempDir d;
  auto model = LoadModel(Models() + "/base");
  ASSERT_TRUE(model.ok());
  auto missing = CollectInputGrams(**model, Models() + "/base", d.path() + "/nope.txt", 100, 16, 2);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("nope.txt"), std::string::npos) << missing.status().ToString();
  auto empty = CollectInputGrams(**model, Models() + "/base", WriteText(d.path(), ""), 100, 16, 2);
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("empty"), std::string::npos) << empty.status().ToString();
  ExtractJob exact;
  exact.merged = Models() + "/release";
  exact.base = Models() + "/base";
  exact.out = d.path() + "/x";
  exact.rank.rank = 8;
  exact.exact = true;
  exact.calibration = WriteText(d.path(), kText);
  exact.cache_dir = d.path() + "/cache";
  auto r = RunExtract(exact);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--calibration with --exact"), std::string::npos) << r.status().ToString();
}

// Σ over the adapter's modules of tr(E G Eᵀ), E = merged − (served + scale · B·A) on the module's
// rows: the release's error on the calibration inputs.
double OutputError(const Model& served, const Model& merged, const LoraAdapter& a, const InputGrams& grams) {
  double err = 0;
  test::ForEachAdapterRowError(served, merged, a, [&](int layer, LoraTarget slot, const std::vector<double>& e) {
    const InputGram& g = grams.at({layer, slot});
    for (int64_t c = 0; c < g.k; ++c) {
      double ge = 0;
      for (int64_t c2 = 0; c2 < g.k; ++c2) ge += g.g[static_cast<size_t>(c * g.k + c2)] * e[static_cast<size_t>(c2)];
      err += e[static_cast<size_t>(c)] * ge;
    }
  });
  return err;
}

TEST(Calibration, CalibratedFitLeavesLessErrorOnItsInputs) {
  test::TempDir d;
  const std::string q = d.path() + "/base-w4a16", text = WriteText(d.path(), kText);
  ASSERT_TRUE(RunQuantize({Models() + "/base", q, "w4a16", 0, 8, 2}).ok());
  auto job = [&](const std::string& out, bool calibrated) {
    ExtractJob j;
    j.merged = Models() + "/release";
    j.base = Models() + "/base";
    j.quantized_base = q;
    j.out = out;
    j.rank.rank = 8;
    j.eval_sequences = 0;
    j.cache_dir = d.path() + "/cache";
    if (calibrated) j.calibration = text;
    return j;
  };
  ASSERT_TRUE(RunExtract(job(d.path() + "/aware", false)).ok());
  auto rep = RunExtract(job(d.path() + "/calibrated", true));
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  const auto man = nlohmann::json::parse(test::ReadText(d.path() + "/calibrated/graft_manifest.json"));
  ASSERT_TRUE(man.contains("calibration"));
  EXPECT_GT(man["calibration"]["tokens"].get<int64_t>(), 40);

  auto served = LoadModel(q), merged = LoadModel(Models() + "/release");
  ASSERT_TRUE(served.ok() && merged.ok());
  auto grams = CollectInputGrams(**served, Models() + "/base", text, 1 << 20, 512, 2);
  ASSERT_TRUE(grams.ok());
  auto qck = Checkpoint::Open(q);
  ASSERT_TRUE(qck.ok());
  const std::string qid = CachedIdentity(*qck, d.path() + "/cache").value().identity;
  LoraLoadOptions opt;
  opt.name = "x";
  opt.base_identity = [&]() -> Result<std::string> { return qid; };
  auto a_aware = LoadLoraAdapter(d.path() + "/aware", (*served)->config(), opt);
  auto a_cal = LoadLoraAdapter(d.path() + "/calibrated", (*served)->config(), opt);
  ASSERT_TRUE(a_aware.ok() && a_cal.ok());
  const double e_aware = OutputError(**served, **merged, *a_aware, *grams);
  const double e_cal = OutputError(**served, **merged, *a_cal, *grams);
  std::printf("release error on the calibration inputs: weight-space fit %.4g, calibrated fit %.4g\n", e_aware, e_cal);
  EXPECT_LT(e_cal, 0.9 * e_aware);
}

}  // namespace
}  // namespace graft

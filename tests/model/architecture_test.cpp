#include "model/architecture.h"

#include <gtest/gtest.h>

#include <set>

#include "model/model.h"
#include "model/projections.h"
#include "model/weight_table.h"
#include "test_util.h"

namespace graft {
namespace {

// Names and config.json spellings are unique across the registry, and each entry is complete.
TEST(Architecture, RegistryEntriesAreCompleteAndUnique) {
  std::set<std::string> names, spellings;
  for (const Architecture* a : Architectures()) {
    EXPECT_TRUE(names.insert(a->config.name).second) << a->config.name;
    EXPECT_FALSE(a->config.spellings.empty()) << a->config.name;
    for (const auto& s : a->config.spellings) EXPECT_TRUE(spellings.insert(s.model_type).second) << s.model_type;
    EXPECT_NE(a->layer_table, nullptr) << a->config.name;
    EXPECT_NE(a->make, nullptr) << a->config.name;
    auto found = FindArchitecture(a->config.name);
    ASSERT_TRUE(found.ok());
    EXPECT_EQ(*found, a);
  }
  EXPECT_EQ(names, (std::set<std::string>{"qwen3", "qwen3_5"}));
}

TEST(Architecture, UnknownNamesAndModelTypesAreErrorsListingTheKnownOnes) {
  auto a = FindArchitecture("llama");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().message(), "unknown architecture 'llama' (graft runs qwen3, qwen3_5)");
  auto c = ParseModelConfig(R"({"model_type":"llama","vocab_size":10,"hidden_size":8})", "m/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "m/config.json: model_type \"llama\" is not supported (qwen3, qwen3_5, qwen3_5_text)");
  // A parser given no architectures knows none.
  auto none = ParseModelConfig(R"({"model_type":"qwen3"})", "m/config.json", {});
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().message(), "m/config.json: model_type \"qwen3\" is not supported ()");
}

// The projection list comes from the same rows the loader reads: on each fixture, every fused
// slot holds exactly its projections' rows, stacked from offset 0, with their columns.
TEST(Architecture, ProjectionListMatchesTheLoadedFusedSlots) {
  for (const char* fixture : {"qwen3-tiny", "qwen3_5-wrapper", "qwen3_5-text-odd"}) {
    auto model = test::LoadFixtureModel(fixture);
    ASSERT_NE(model, nullptr) << fixture;
    const ModelConfig& c = model->config();
    for (int l = 0; l < c.num_layers; ++l) {
      const LayerWeights& lw = model->weights().layers[static_cast<size_t>(l)];
      std::map<LoraTarget, int64_t> rows;
      for (const Projection& p : LayerProjections(c, lw.kind)) {
        EXPECT_EQ(p.row_offset, rows[p.target]) << fixture << " layer " << l << " " << p.path;
        rows[p.target] += p.rows;
        EXPECT_EQ(p.cols, FusedWeight(lw, p.target).cols) << fixture << " " << p.path;
      }
      EXPECT_EQ(rows.size(), 4u) << fixture << " layer " << l;  // attention or GDN in/out, MLP gate_up/down
      for (const auto& [t, n] : rows) EXPECT_EQ(n, FusedWeight(lw, t).rows) << fixture << " " << LoraTargetName(t);
    }
  }
}

// Dummy weights take each vector's value from the table: norms at their architecture's identity.
TEST(Architecture, DummyNormsSitAtEachArchitecturesIdentity) {
  auto q3 = LoadModelConfig(test::Fixture("qwen3-tiny"));
  auto q35 = LoadModelConfig(test::Fixture("qwen3_5-wrapper"));
  ASSERT_TRUE(q3.ok() && q35.ok());
  auto w3 = DummyWeights(*q3, 1, 1);
  auto w35 = DummyWeights(*q35, 1, 1);
  ASSERT_TRUE(w3.ok() && w35.ok());
  EXPECT_EQ(Bf16ToFloat(w3->final_norm.bf16[0]), 1.0f);
  EXPECT_EQ(Bf16ToFloat(w3->layers[0].attn.q_norm.bf16[0]), 1.0f);
  EXPECT_EQ(Bf16ToFloat(w35->final_norm.bf16[0]), 0.0f);
  EXPECT_EQ(Bf16ToFloat(w35->layers[1].attn.k_norm.bf16[0]), 0.0f);
  EXPECT_EQ(Bf16ToFloat(w35->layers[0].gdn.norm.bf16[0]), 1.0f);  // the gated norm scales by w
  EXPECT_EQ(Bf16ToFloat(w35->layers[0].gdn.a_log.bf16[0]), 0.0f);
  ModelConfig odd = *q3;
  odd.arch = "qwen9";
  EXPECT_FALSE(DummyWeights(odd, 1, 1).ok());
}

}  // namespace
}  // namespace graft

#include "model/architecture.h"

#include <gtest/gtest.h>

#include <cmath>

#include "test_util.h"

namespace graft {
namespace {

TEST(ModelConfig, DeeplyNestedJsonIsRefusedBeforeItIsParsed) {
  const std::string deep = R"({"model_type":"qwen3","rope_scaling":)" + std::string(200000, '[') + std::string(200000, ']') + "}";
  auto c = ParseModelConfig(deep, "m/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(), "m/config.json: JSON nested deeper than 128 levels (at byte 164)");
}

TEST(ModelConfig, Qwen3Fixture) {
  auto c = LoadModelConfig(test::Fixture("qwen3-odd-sharded"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->arch, "qwen3");
  EXPECT_EQ(c->weight_prefix, "model.");
  EXPECT_EQ(c->hidden_size, 80);
  EXPECT_EQ(c->num_heads, 6);
  EXPECT_EQ(c->num_kv_heads, 1);
  EXPECT_EQ(c->head_dim, 24);
  EXPECT_EQ(c->rotary_dim, 24);
  EXPECT_DOUBLE_EQ(c->rope_theta, 1e6);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_EQ(c->num_layers_of(LayerKind::kFullAttention), 3);
}

TEST(ModelConfig, Qwen3_5WrapperReadsTextConfig) {
  auto c = LoadModelConfig(test::Fixture("qwen3_5-wrapper"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->arch, "qwen3_5");
  EXPECT_EQ(c->weight_prefix, "model.language_model.");
  EXPECT_EQ(c->layer_kinds, (std::vector<LayerKind>{LayerKind::kLinearAttention, LayerKind::kFullAttention,
                                                    LayerKind::kLinearAttention, LayerKind::kFullAttention}));
  EXPECT_EQ(c->rotary_dim, 8);  // 32 * 0.25
  EXPECT_DOUBLE_EQ(c->rope_theta, 1e7);
  EXPECT_EQ(c->conv_dim(), 2 * 2 * 16 + 4 * 16);
}

TEST(ModelConfig, Qwen3_5TextDefaultsAndDerivedLayerTypes) {
  auto c = ParseModelConfig(R"({"model_type":"qwen3_5_text","vocab_size":10,"hidden_size":8,
    "intermediate_size":16,"num_hidden_layers":8,"num_attention_heads":2,"num_key_value_heads":1,"head_dim":8,
    "rope_theta":10000000,"partial_rotary_factor":0.25,"future_field":{"x":1}})",
                            "c.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  int full = 0;
  for (int i = 0; i < 8; ++i) {
    const bool is_full = c->layer_kinds[i] == LayerKind::kFullAttention;
    EXPECT_EQ(is_full, (i + 1) % 4 == 0) << i;
    full += is_full;
  }
  EXPECT_EQ(full, 2);
  EXPECT_EQ(c->linear_num_value_heads, 32);  // class default
  EXPECT_EQ(c->rotary_dim, 2);
}

TEST(ModelConfig, WrapperTieFlagAtTheTopLevelWins) {
  auto c = ParseModelConfig(R"({"model_type":"qwen3_5","tie_word_embeddings":true,
    "text_config":{"vocab_size":10,"hidden_size":8,"intermediate_size":16,"num_hidden_layers":4,
    "num_attention_heads":2,"num_key_value_heads":1,"head_dim":8,"tie_word_embeddings":false}})",
                            "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->tie_word_embeddings);
}

TEST(ModelConfig, YarnFrequenciesAndAttentionFactor) {
  auto c = ParseModelConfig(R"({"model_type":"qwen3","vocab_size":10,"hidden_size":8,"intermediate_size":16,
    "num_hidden_layers":1,"num_attention_heads":1,"head_dim":128,"max_position_embeddings":131072,
    "rope_scaling":{"rope_type":"yarn","factor":4.0,"original_max_position_embeddings":32768},"rope_theta":1000000})",
                            "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->rope_type, "yarn");
  EXPECT_NEAR(c->rope_attention_scaling, 0.1 * std::log(4.0) + 1.0, 1e-6);
  ASSERT_EQ(c->inv_freq.size(), 64u);
  // The highest frequencies stay (extrapolation), the lowest are divided by the factor.
  EXPECT_FLOAT_EQ(c->inv_freq[0], 1.0f);
  const float plain_last = 1.0f / std::pow(1e6f, 126.0f / 128.0f);
  EXPECT_NEAR(c->inv_freq[63], plain_last / 4.0f, plain_last * 1e-5);
  auto m = ParseModelConfig(R"({"model_type":"qwen3","vocab_size":10,"hidden_size":8,"intermediate_size":16,
    "num_hidden_layers":1,"num_attention_heads":1,"max_position_embeddings":4096,
    "rope_scaling":{"rope_type":"yarn","factor":4.0,"mscale":0.7}})", "config.json");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("mscale"), std::string::npos);
}

TEST(ModelConfig, RefusesWhatItCannotRun) {
  const std::string base = R"("vocab_size":10,"hidden_size":8,"intermediate_size":16,"num_hidden_layers":2,
    "num_attention_heads":2,"num_key_value_heads":1,"head_dim":4)";
  struct Case {
    std::string extra, expect;
  };
  const std::vector<Case> cases = {
      {R"("model_type":"llama")", "model_type \"llama\" is not supported"},
      {R"("model_type":"qwen3","num_experts":8)", "mixture-of-experts models ('num_experts' = 8)"},
      {R"("model_type":"qwen3","rope_scaling":{"rope_type":"dynamic","factor":2})",
       "rope_scaling.rope_type = \"dynamic\" is not supported"},
      {R"("model_type":"qwen3","rope_scaling":{"type":"longrope","factor":4})", "rope_scaling.type = \"longrope\""},
      {R"("model_type":"qwen3","use_sliding_window":true)", "sliding-window attention"},
      {R"("model_type":"qwen3","attention_bias":true)", "attention_bias"},
      {R"("model_type":"qwen3","hidden_act":"gelu")", "hidden_act \"gelu\" is not supported"},
      {R"("model_type":"qwen3","layer_types":["full_attention","sliding_attention"])",
       "layer_types[1] = \"sliding_attention\" is not supported"},
      {R"("model_type":"qwen3","num_key_value_heads":3)", "not a multiple of num_key_value_heads 3"},
      {R"("model_type":"qwen3","vocab_size":-5)", "'vocab_size' = -5 is outside"},
      {R"("model_type":"qwen3","hidden_size":"big")", "'hidden_size' must be an integer"},
      // Ids read wide: 2^32 + 2 must not become token 2.
      {R"("model_type":"qwen3","eos_token_id":4294967298)", "eos_token_id 4294967298 is not a token id"},
      {R"("model_type":"qwen3","eos_token_id":[2,-1])", "eos_token_id -1 is not a token id"},
  };
  for (const auto& c : cases) {
    // Later keys win in nlohmann, so the case's fields override the base's.
    auto r = ParseModelConfig("{" + base + "," + c.extra + "}", "config.json");
    ASSERT_FALSE(r.ok()) << c.extra;
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << c.extra << " gave " << r.status().ToString();
    EXPECT_NE(r.status().message().find("config.json"), std::string::npos);
  }
  auto missing = ParseModelConfig(R"({"model_type":"qwen3","hidden_size":8})", "config.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("missing field 'vocab_size'"), std::string::npos);
  EXPECT_FALSE(ParseModelConfig("not json", "config.json").ok());
}

}  // namespace
}  // namespace graft

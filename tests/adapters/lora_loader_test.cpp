// A corpus of malformed adapters, each refused with its specific error, and PEFT's
// target/rank/alpha rules.
#include "adapters/lora_loader.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "adapters/peft_config.h"
#include "io/safetensors.h"
#include "test_util.h"
#include "util/bf16.h"

namespace graft {
namespace {

using json = nlohmann::ordered_json;
constexpr const char* kSrc = "adapters/qwen3-tiny-lora-mixed";
constexpr const char* kKey = "base_model.model.model.layers.0.self_attn.q_proj";

// Copies the fixture adapter into `d`, letting the caller edit its config and tensors.
void MakeAdapter(const test::TempDir& d, const std::function<void(json&)>& edit_config,
                 const std::function<void(std::vector<TensorToWrite>&)>& edit_tensors) {
  json cfg = json::parse(test::ReadText(test::Fixture(kSrc) + "/adapter_config.json"));
  edit_config(cfg);
  test::WriteText(d.File("adapter_config.json"), cfg.dump(2));
  auto f = SafetensorsFile::Open(test::Fixture(kSrc) + "/adapter_model.safetensors");
  ASSERT_TRUE(f.ok());
  std::vector<TensorToWrite> ts;
  for (const auto& t : f->tensors()) {
    TensorToWrite w{t.name, t.dtype, t.shape, {}};
    w.bytes.assign(f->Data(t), f->Data(t) + t.num_bytes());
    ts.push_back(std::move(w));
  }
  edit_tensors(ts);
  ASSERT_TRUE(WriteSafetensors(d.File("adapter_model.safetensors"), std::move(ts)).ok());
}

TensorToWrite* Find(std::vector<TensorToWrite>& ts, const std::string& name) {
  for (auto& t : ts) if (t.name == name) return &t;
  ADD_FAILURE() << "no tensor " << name;
  return &ts[0];
}

void Drop(std::vector<TensorToWrite>& ts, const std::string& name) {
  ts.erase(std::remove_if(ts.begin(), ts.end(), [&](const auto& t) { return t.name == name; }), ts.end());
}

class LoraLoader : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = test::LoadFixtureModel("qwen3-tiny");
    ASSERT_NE(model_, nullptr);
  }
  std::string Error(const std::function<void(json&)>& ec, const std::function<void(std::vector<TensorToWrite>&)>& et,
                    LoraLoadOptions opt = {}) {
    test::TempDir d;
    MakeAdapter(d, ec, et);
    return LoadError(d.path(), opt);
  }
  std::string LoadError(const std::string& dir, LoraLoadOptions opt = {}) {
    auto a = LoadLoraAdapter(dir, model_->config(), opt);
    return a.ok() ? "LOADED" : a.status().message();
  }
  std::unique_ptr<Model> model_;
};

const auto kSameConfig = [](json&) {};
const auto kSameTensors = [](std::vector<TensorToWrite>&) {};

TEST_F(LoraLoader, TheUnmodifiedCopyLoads) {
  EXPECT_EQ(Error(kSameConfig, kSameTensors), "LOADED");
}

// --adapter-dtype bfloat16: float32 factors are rounded to bf16 once at load, to nearest even,
// each value exactly FloatToBf16 of the stored one; without the option they stay as stored.
TEST_F(LoraLoader, Float32FactorsRoundToBf16AtLoadOnlyWhenAsked) {
  test::TempDir d;
  // The fixture's bf16 factors as float32 values that bf16 cannot hold (a low mantissa bit set).
  MakeAdapter(d, kSameConfig, [](std::vector<TensorToWrite>& ts) {
    for (auto& t : ts) {
      ASSERT_EQ(t.dtype, DType::kBF16) << t.name;
      std::vector<uint8_t> f(t.bytes.size() * 2);
      for (size_t i = 0; i < t.bytes.size() / 2; ++i) {
        uint16_t h;
        std::memcpy(&h, t.bytes.data() + 2 * i, 2);
        uint32_t u;
        const float v = Bf16ToFloat(h);
        std::memcpy(&u, &v, 4);
        u |= (i % 3 == 0 ? 0x00001234u : 0x00008000u);  // below bf16's last bit: one a tie, others not
        std::memcpy(f.data() + 4 * i, &u, 4);
      }
      t.dtype = DType::kF32;
      t.bytes = std::move(f);
    }
  });
  auto kept = LoadLoraAdapter(d.path(), model_->config(), {});
  LoraLoadOptions opt;
  opt.bf16_factors = true;
  auto rounded = LoadLoraAdapter(d.path(), model_->config(), opt);
  ASSERT_TRUE(kept.ok() && rounded.ok());
  EXPECT_FALSE(kept->factors_rounded);
  EXPECT_TRUE(rounded->factors_rounded);
  EXPECT_EQ(kept->factor_storage(), "float32");
  EXPECT_EQ(rounded->factor_storage(), "bf16, rounded from the checkpoint's float factors at load");
  EXPECT_EQ(rounded->bytes() * 2, kept->bytes());
  int checked = 0;
  for (size_t l = 0; l < kept->layers.size(); ++l) {
    for (size_t t = 0; t < kept->layers[l].targets.size(); ++t) {
      const auto &ka = kept->layers[l].targets[t], &ra = rounded->layers[l].targets[t];
      ASSERT_EQ(ka.size(), ra.size());
      for (size_t m = 0; m < ka.size(); ++m) {
        for (auto [kw, rw] : {std::pair{&ka[m].a, &ra[m].a}, std::pair{&ka[m].b, &ra[m].b}}) {
          ASSERT_FALSE(kw->is_bf16);
          ASSERT_TRUE(rw->is_bf16);
          ASSERT_TRUE(rw->f32.empty());
          ASSERT_EQ(rw->bf16.size(), kw->f32.size());
          for (size_t i = 0; i < kw->f32.size(); ++i) ASSERT_EQ(rw->bf16[i], FloatToBf16(kw->f32[i])) << ka[m].name << " " << i;
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 0);
  // A bf16 adapter is left as it is (nothing to round).
  auto bf16 = LoadLoraAdapter(test::Fixture(kSrc), model_->config(), opt);
  ASSERT_TRUE(bf16.ok());
  EXPECT_FALSE(bf16->factors_rounded);
  EXPECT_EQ(bf16->factor_storage(), "bf16");
}

TEST_F(LoraLoader, MissingB) {
  EXPECT_NE(Error(kSameConfig, [](auto& ts) { Drop(ts, std::string(kKey) + ".lora_B.weight"); })
                .find(std::string(kKey) + ".lora_B.weight: missing (its pair is present)"),
            std::string::npos);
}

TEST_F(LoraLoader, WrongRank) {
  const std::string e = Error([](json& c) { c["rank_pattern"]["q_proj"] = 6; }, kSameTensors);
  EXPECT_NE(e.find(std::string(kKey) + ".lora_A.weight: shape [8, 64], expected [6, 64] (rank 6 from adapter_config.json"),
            std::string::npos) << e;
}

TEST_F(LoraLoader, WrongWidth) {
  const std::string e = Error(kSameConfig, [](auto& ts) {
    auto* t = Find(ts, std::string(kKey) + ".lora_B.weight");
    t->shape = {32, 8};
    t->bytes.resize(32 * 8 * 2);
  });
  EXPECT_NE(e.find(std::string(kKey) + ".lora_B.weight: shape [32, 8], expected [64, 8] (64 outputs"), std::string::npos) << e;
}

// A runaway target_modules regex (see PeftConfig.RunawayRegexIsAnErrorNotASilentMiss) stops the
// load with the file and the pattern named, instead of leaving modules silently unadapted.
TEST_F(LoraLoader, RunawayTargetRegexNamesTheFileAndThePattern) {
  const std::string e = Error([](json& c) { c["target_modules"] = "(.*)*(.*)*q_proj\\."; }, kSameTensors);
  EXPECT_NE(e.find("adapter_config.json: regex /(.*)*(.*)*q_proj\\./ on 'model.layers.0."), std::string::npos) << e;
  EXPECT_NE(e.find("match limit exceeded"), std::string::npos) << e;
}

TEST_F(LoraLoader, UnknownModule) {
  const std::string e = Error(kSameConfig, [](auto& ts) {
    TensorToWrite t = *Find(ts, std::string(kKey) + ".lora_A.weight");
    t.name = "base_model.model.model.layers.0.self_attn.x_proj.lora_A.weight";
    ts.push_back(t);
  });
  EXPECT_NE(e.find("x_proj.lora_A.weight: layer 0 (full attention) has no projection 'self_attn.x_proj'"), std::string::npos) << e;
}

TEST_F(LoraLoader, LinearAttentionModuleOnAQwen3Model) {
  const std::string e = Error(kSameConfig, [](auto& ts) {
    TensorToWrite t = *Find(ts, std::string(kKey) + ".lora_A.weight");
    t.name = "base_model.model.model.layers.1.linear_attn.in_proj_qkv.lora_A.weight";
    ts.push_back(t);
  });
  EXPECT_NE(e.find("has no projection 'linear_attn.in_proj_qkv'"), std::string::npos) << e;
}

TEST_F(LoraLoader, LayerOutOfRange) {
  const std::string e = Error(kSameConfig, [](auto& ts) {
    TensorToWrite t = *Find(ts, std::string(kKey) + ".lora_A.weight");
    t.name = "base_model.model.model.layers.9.self_attn.q_proj.lora_A.weight";
    ts.push_back(t);
  });
  EXPECT_NE(e.find("layer 9 does not exist (the base has 2 layers)"), std::string::npos) << e;
}

TEST_F(LoraLoader, NaNValues) {
  const std::string e = Error(kSameConfig, [](auto& ts) {
    auto* t = Find(ts, std::string(kKey) + ".lora_A.weight");
    const uint16_t nan = FloatToBf16(NAN);
    std::memcpy(t->bytes.data() + 10, &nan, 2);
  });
  EXPECT_NE(e.find(std::string(kKey) + ".lora_A.weight: holds NaN or infinite values"), std::string::npos) << e;
}

TEST_F(LoraLoader, TruncatedFile) {
  test::TempDir d;
  MakeAdapter(d, kSameConfig, kSameTensors);
  const std::string p = d.File("adapter_model.safetensors");
  std::filesystem::resize_file(p, std::filesystem::file_size(p) - 100);
  const std::string e = LoadError(d.path());
  EXPECT_NE(e.find("adapter_model.safetensors"), std::string::npos) << e;
  EXPECT_NE(e.find("truncated?"), std::string::npos) << e;
}

TEST_F(LoraLoader, WrongBaseIdentityUnlessForced) {
  test::TempDir d;
  MakeAdapter(d, kSameConfig, kSameTensors);
  test::WriteText(d.File("graft_manifest.json"), R"({"base_identity": "aaaa"})");
  LoraLoadOptions opt;
  opt.base_identity = []() -> Result<std::string> { return std::string("bbbb"); };
  const std::string e = LoadError(d.path(), opt);
  EXPECT_NE(e.find("made for base aaaa but the loaded base is bbbb (pass --force"), std::string::npos) << e;
  opt.force = true;
  EXPECT_EQ(LoadError(d.path(), opt), "LOADED");
}

TEST_F(LoraLoader, DoraIsRefused) {
  EXPECT_NE(Error([](json& c) { c["use_dora"] = true; }, kSameTensors).find("use_dora: DoRA adapters are not supported"),
            std::string::npos);
  EXPECT_NE(Error(kSameConfig, [](auto& ts) {
              TensorToWrite t{std::string(kKey) + ".lora_magnitude_vector", DType::kBF16, {64}, std::vector<uint8_t>(128)};
              ts.push_back(t);
            }).find("DoRA magnitude vectors are not supported"),
            std::string::npos);
}

TEST_F(LoraLoader, ModulesToSaveBiasAndEmbeddingLoraAreRefused) {
  EXPECT_NE(Error([](json& c) { c["modules_to_save"] = json::array({"lm_head"}); }, kSameTensors)
                .find("modules_to_save [\"lm_head\"]"),
            std::string::npos);
  EXPECT_NE(Error([](json& c) { c["bias"] = "all"; }, kSameTensors).find("bias \"all\" (only \"none\")"), std::string::npos);
  const std::string e = Error(kSameConfig, [](auto& ts) {
    ts.push_back({"base_model.model.model.embed_tokens.lora_embedding_A", DType::kBF16, {8, 512}, std::vector<uint8_t>(8 * 512 * 2)});
    ts.push_back({"base_model.model.lm_head.lora_A.weight", DType::kBF16, {8, 64}, std::vector<uint8_t>(8 * 64 * 2)});
  });
  EXPECT_NE(e.find("lora_embedding_A: embedding LoRA is not supported"), std::string::npos) << e;
  EXPECT_NE(e.find("module 'lm_head' (embedding or lm_head LoRA) is not supported"), std::string::npos) << e;
}

TEST_F(LoraLoader, NotTargetedAndMissingModulesAreBothListed) {
  // layers_to_transform [0]: layer 1's tensors are extra. Dropping layer 0's o_proj: missing.
  const std::string e = Error([](json& c) { c["layers_to_transform"] = json::array({0}); },
                              [](auto& ts) {
                                Drop(ts, "base_model.model.model.layers.0.self_attn.o_proj.lora_A.weight");
                                Drop(ts, "base_model.model.model.layers.0.self_attn.o_proj.lora_B.weight");
                              });
  EXPECT_NE(e.find("model.layers.1.mlp.down_proj: has tensors but adapter_config.json does not target it"), std::string::npos) << e;
  EXPECT_NE(e.find("model.layers.1.self_attn.q_proj: has tensors but adapter_config.json does not target it"), std::string::npos);
  EXPECT_NE(e.find("model.layers.0.self_attn.o_proj: targeted by adapter_config.json but has no tensors"), std::string::npos);
  EXPECT_NE(e.find("8 problems with this adapter"), std::string::npos) << e;
}

TEST_F(LoraLoader, WrongDtypeAndBadKeys) {
  const std::string e = Error(kSameConfig, [](auto& ts) {
    auto* t = Find(ts, std::string(kKey) + ".lora_A.weight");
    t->dtype = DType::kI16;
    ts.push_back({"model.layers.0.self_attn.q_proj.lora_A.weight", DType::kBF16, {1}, {0, 0}});
  });
  EXPECT_NE(e.find(std::string(kKey) + ".lora_A.weight: dtype I16 (expected BF16, F16 or F32)"), std::string::npos) << e;
  EXPECT_NE(e.find("model.layers.0.self_attn.q_proj.lora_A.weight: key does not start with \"base_model.model.\""),
            std::string::npos) << e;
}

TEST_F(LoraLoader, WrongTypePickleAndMissingFiles) {
  EXPECT_NE(Error([](json& c) { c["peft_type"] = "PREFIX_TUNING"; }, kSameTensors).find("peft_type \"PREFIX_TUNING\""),
            std::string::npos);
  test::TempDir d;
  EXPECT_NE(LoadError(d.path()).find("no adapter_config.json"), std::string::npos);
  test::WriteText(d.File("adapter_config.json"), test::ReadText(test::Fixture(kSrc) + "/adapter_config.json"));
  test::WriteText(d.File("adapter_model.bin"), "pickle");
  EXPECT_NE(LoadError(d.path()).find("adapter_model.bin is a pickle"), std::string::npos);
  test::WriteText(d.File("adapter_config.json"), "{not json");
  test::WriteText(d.File("adapter_model.safetensors"), "x");
  EXPECT_NE(LoadError(d.path()).find("adapter_config.json: not a JSON object"), std::string::npos);
}

TEST(PeftConfig, TargetRankAndAlphaRules) {
  auto c = PeftConfig::Parse(R"({"peft_type":"LORA","r":8,"lora_alpha":16,"target_modules":["q_proj","mlp.down_proj"],
      "exclude_modules":["layers.1.self_attn.q_proj"],"layers_to_transform":[0,1,3],"layers_pattern":"layers",
      "rank_pattern":{"down_proj":4,"model.layers.3.self_attn.q_proj":2},"alpha_pattern":{"q_proj":3},"use_rslora":true})",
                             "c.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->Targets("model.layers.0.self_attn.q_proj").value());
  EXPECT_FALSE(c->Targets("model.layers.1.self_attn.q_proj").value());  // excluded
  EXPECT_FALSE(c->Targets("model.layers.2.self_attn.q_proj").value());  // layer not transformed
  EXPECT_FALSE(c->Targets("model.layers.0.self_attn.xq_proj").value()); // suffix must follow a dot
  EXPECT_TRUE(c->Targets("model.layers.3.mlp.down_proj").value());
  EXPECT_EQ(c->RankFor("model.layers.0.mlp.down_proj").value(), 4);
  EXPECT_EQ(c->RankFor("model.layers.3.self_attn.q_proj").value(), 2);
  EXPECT_EQ(c->RankFor("model.layers.0.self_attn.q_proj").value(), 8);
  EXPECT_FLOAT_EQ(c->ScaleFor("model.layers.0.self_attn.q_proj", 8).value(), static_cast<float>(3 / std::sqrt(8.0)));
  EXPECT_FLOAT_EQ(c->ScaleFor("model.layers.0.mlp.down_proj", 4).value(), 8.0f);

  auto rx = PeftConfig::Parse(R"({"peft_type":"LORA","r":4,"lora_alpha":4,"target_modules":".*\\.(q|v)_proj"})", "c.json");
  ASSERT_TRUE(rx.ok());
  EXPECT_TRUE(rx->Targets("model.layers.7.self_attn.v_proj").value());
  EXPECT_FALSE(rx->Targets("model.layers.7.self_attn.k_proj").value());
  EXPECT_FALSE(PeftConfig::Parse(R"({"peft_type":"LORA","target_modules":"x","layers_to_transform":[1]})", "c").ok());
  EXPECT_FALSE(PeftConfig::Parse(R"({"peft_type":"LORA","r":0,"target_modules":["q_proj"]})", "c").ok());
  EXPECT_FALSE(PeftConfig::Parse(R"({"peft_type":"LORA","r":4})", "c").ok());
}

// Fields of the wrong JSON type, and ranks no int holds, are named errors: an exception out of
// the parser would take the server down (fuzz_requests found "peft_type": 16).
TEST(PeftConfig, WrongTypesAndHugeRanksAreNamedErrors) {
  struct Case {
    const char* json;
    const char* expect;
  };
  for (const Case& c : {Case{R"({"peft_type":16,"r":8,"target_modules":["q_proj"]})", "\"peft_type\" must be a string"},
                        Case{R"({"peft_type":"LORA","r":8,"use_rslora":"true","target_modules":["q_proj"]})",
                             "\"use_rslora\" must be true or false"},
                        Case{R"({"peft_type":"LORA","r":8,"fan_in_fan_out":1,"target_modules":["q_proj"]})",
                             "\"fan_in_fan_out\" must be true or false"},
                        Case{R"({"peft_type":"LORA","r":1e12,"target_modules":["q_proj"]})", "must be an integer from 1 to 1048576"},
                        Case{R"({"peft_type":"LORA","r":8,"rank_pattern":{"q_proj":4e9},"target_modules":["q_proj"]})",
                             "rank_pattern[\"q_proj\"]"},
                        Case{R"({"peft_type":"LORA","r":8,"layers_to_transform":[1,4294967299],"target_modules":["q_proj"]})",
                             "layers_to_transform holds 4294967299, not a layer index"},
                        Case{R"({"peft_type":"LORA","r":8,"layers_to_transform":-2,"target_modules":["q_proj"]})",
                             "layers_to_transform holds -2"}}) {
    auto p = PeftConfig::Parse(c.json, "adapter_config.json");
    ASSERT_FALSE(p.ok()) << c.json;
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument) << p.status().ToString();
    EXPECT_NE(p.status().message().find(c.expect), std::string::npos) << c.json << " -> " << p.status().ToString();
    EXPECT_NE(p.status().message().find("adapter_config.json"), std::string::npos);
  }
  // null is "unset", as PEFT writes it.
  auto ok = PeftConfig::Parse(R"({"peft_type":"LORA","r":8,"use_rslora":null,"target_modules":["q_proj"]})", "c.json");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_FALSE(ok->use_rslora);
}

// A target_modules regex comes with the adapter: one that backtracks without bound must be
// refused, naming it — it used to run PCRE2's default ten million steps a module name and then
// count as "no match", leaving that module silently without its adapter (and a load of a few
// hundred modules taking minutes).
TEST(PeftConfig, RunawayRegexIsAnErrorNotASilentMiss) {
  auto c = PeftConfig::Parse(R"({"peft_type":"LORA","r":4,"lora_alpha":4,"target_modules":"(.*)*(.*)*q_proj\\."})", "c.json");
  ASSERT_TRUE(c.ok());
  const auto t0 = std::chrono::steady_clock::now();
  auto r = c->Targets("model.language_model.layers.10.self_attn.q_proj");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("(.*)*(.*)*q_proj\\."), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("model.language_model.layers.10.self_attn.q_proj"), std::string::npos);
  EXPECT_LT(seconds, 0.5);
  // The same shape without the runaway still matches, and ordinary patterns are unaffected.
  auto ok = PeftConfig::Parse(R"({"peft_type":"LORA","r":4,"lora_alpha":4,"target_modules":"(.*)_proj"})", "c.json");
  ASSERT_TRUE(ok.ok());
  EXPECT_TRUE(ok->Targets("model.language_model.layers.10.self_attn.q_proj").value());
}

}  // namespace
}  // namespace graft

// Exact mode on the CPU backend: an adapter extracted with --exact, served with its exact
// slot, gives the merged checkpoint's logits and decisions bit for bit; rows of every kind
// (base, LoRA, exact of two adapters) share a step without changing each other's bits; the
// residual is indexed for parallel decoding exactly as the sequential decoder reads it; and a
// damaged or inconsistent exact representation is refused at load with the reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "weights/exact.h"
#include "adapters/lora_loader.h"
#include "backend/cpu/cpu_ops.h"
#include "engine/decision_scorer.h"
#include "io/safetensors.h"
#include "model/projections.h"
#include "test_util.h"
#include "tools/quantize.h"

namespace graft {
namespace {

namespace fs = std::filesystem;

// Extracts fixture pair `p` with --exact into `out`.
void ExtractExact(const test::MergedFixture& p, const std::string& out) {
  test::ExtractExactAdapter(test::Fixture(p.merged), test::Fixture(p.base), p.rank, out);
}

LoraAdapter Load(const std::string& dir, const Model& m, const std::string& name = "ft") {
  auto a = LoadLoraAdapter(dir, m.config(), {name, false, nullptr});
  EXPECT_TRUE(a.ok()) << a.status().ToString();
  return a.ok() ? std::move(a).value() : LoraAdapter{};
}

std::vector<float> Logits(const Model& m, Ops& ops, const std::vector<int32_t>& ids, int32_t slot, const AdapterSet& set) {
  std::vector<float> out(ids.size() * static_cast<size_t>(m.config().vocab_size));
  auto st = m.NewState(ops);
  EXPECT_TRUE(st.ok());
  Status s = m.Forward(ops, ids.data(), static_cast<int>(ids.size()), st.value(), out.data(), slot, &set);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return out;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class ExactMode : public ::testing::TestWithParam<test::MergedFixture> {};

// Every bf16 merged fixture: base + exact slot == the merged checkpoint served alone, bit for
// bit, in bf16 and f32 activations, in one chunk or several; the LoRA slot of the same adapter
// does not (so the comparison can fail).
TEST_P(ExactMode, LogitsEqualTheMergedCheckpointBitForBit) {
  const test::MergedFixture& p = GetParam();
  test::TempDir d;
  ExtractExact(p, d.path());
  auto base = test::LoadFixtureModel(p.base);
  auto merged = test::LoadFixtureModel(p.merged);
  ASSERT_TRUE(base && merged);
  LoraAdapter a = Load(d.path(), *base);
  ASSERT_TRUE(a.has_exact);
  EXPECT_TRUE(a.default_exact) << "extract --exact makes exact the default mode";
  {  // --adapter-dtype bfloat16 leaves an exact adapter's factors as extracted (its reconstruction needs them)
    LoraLoadOptions opt{"ft", false, nullptr};
    opt.bf16_factors = true;
    auto r = LoadLoraAdapter(d.path(), base->config(), opt);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_FALSE(r->factors_rounded);
    EXPECT_EQ(r->factor_storage(), a.factor_storage());
    EXPECT_EQ(r->bytes(), a.bytes());
  }
  AdapterSet set;
  const int32_t lora = set.Add(&a, false), exact = set.Add(&a, true);
  const AdapterSet none;
  auto inputs = test::ReadIntTensors(test::Fixture(p.base + "/inputs.safetensors"));
  ASSERT_FALSE(inputs.empty());
  for (ActDtype act : {ActDtype::kBF16, ActDtype::kF32}) {
    CpuOps ops(act, 2);
    ASSERT_TRUE(ops.ReserveExact(base->ExactScratchElements(set).value()).ok());
    bool lora_differs = false;
    for (const auto& [name, ids] : inputs) {
      const std::vector<float> want = Logits(*merged, ops, ids, 0, none);
      EXPECT_TRUE(SameBits(Logits(*base, ops, ids, exact, set), want)) << p.merged << " " << name;
      lora_differs |= !SameBits(Logits(*base, ops, ids, lora, set), want);
    }
    // Chunked prefill of the longest input: exact rows keep their bits across steps.
    const auto& ids = inputs.begin()->second;
    CpuOps ops2(act, 3);
    const std::vector<float> want = test::RunChunks(*merged, ops2, ids, {3, 1, 5});
    std::vector<float> got(want.size());
    auto st = base->NewState(ops2);
    ASSERT_TRUE(st.ok());
    const int vocab = base->config().vocab_size;
    int at = 0;
    for (int n : {3, 1, 5, 1000}) {
      n = std::min(n, static_cast<int>(ids.size()) - at);
      if (n <= 0) break;
      ASSERT_TRUE(base->Forward(ops2, ids.data() + at, n, st.value(), got.data() + int64_t{at} * vocab, exact, &set).ok());
      at += n;
    }
    EXPECT_TRUE(SameBits(got, want)) << "chunked";
    EXPECT_TRUE(lora_differs) << "the LoRA slot matched the merged bits everywhere: the test cannot tell the modes apart";
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ExactMode, ::testing::ValuesIn(test::Bf16MergedFixtures()),
                         [](const auto& info) { return test::MergedFixtureName(info.param); });

// One step holding base rows, LoRA rows and the exact rows of two different adapters: each
// sequence's logits are the bits it gets alone (its merged checkpoint for the exact ones), and
// the base rows are what a base-only server computes.
TEST(ExactModeBatch, MixedStepKeepsEveryRowsBits) {
  test::TempDir d1, d2;
  ExtractExact({"adapters/qwen3-tiny-lora-mixed-merged", "qwen3-tiny", 16}, d1.path());
  ExtractExact({"adapters/qwen3-tiny-lora-alllinear-merged", "qwen3-tiny", 3}, d2.path());
  auto base = test::LoadFixtureModel("qwen3-tiny");
  auto m1 = test::LoadFixtureModel("adapters/qwen3-tiny-lora-mixed-merged");
  auto m2 = test::LoadFixtureModel("adapters/qwen3-tiny-lora-alllinear-merged");
  LoraAdapter a1 = Load(d1.path(), *base, "mixed"), a2 = Load(d2.path(), *base, "alllinear");
  AdapterSet set;
  const int32_t lora1 = set.Add(&a1, false), exact1 = set.Add(&a1, true), exact2 = set.Add(&a2, true);
  const AdapterSet none;
  for (ActDtype act : {ActDtype::kBF16, ActDtype::kF32}) {
    CpuOps ops(act, 2);
    std::mt19937 rng(5);
    std::uniform_int_distribution<int32_t> tok(0, base->config().vocab_size - 1);
    // Sequences: (slot, model whose alone-run is the reference, adapters for that run).
    struct Seq {
      int32_t slot;
      const Model* ref;
      int32_t ref_slot;
      std::vector<int32_t> ids;
    };
    std::vector<Seq> seqs = {{0, base.get(), 0, {}}, {exact1, m1.get(), 0, {}}, {lora1, base.get(), lora1, {}},
                             {exact2, m2.get(), 0, {}}, {exact1, m1.get(), 0, {}}, {0, base.get(), 0, {}}};
    for (size_t i = 0; i < seqs.size(); ++i) seqs[i].ids.resize(3 + 4 * i), std::generate(seqs[i].ids.begin(), seqs[i].ids.end(), [&] { return tok(rng); });
    std::vector<SequenceState> states;
    for (size_t i = 0; i < seqs.size(); ++i) states.push_back(base->NewState(ops).value());
    StepBatch b;
    for (size_t i = 0; i < seqs.size(); ++i) b.Add(&states[i], seqs[i].ids.data(), static_cast<int>(seqs[i].ids.size()), seqs[i].slot);
    const int vocab = base->config().vocab_size;
    std::vector<float> all(static_cast<size_t>(b.rows()) * vocab);
    ASSERT_TRUE(base->Forward(ops, b, set, all.data()).ok());
    for (size_t i = 0; i < seqs.size(); ++i) {
      const auto& s = seqs[i];
      const std::vector<float> alone = Logits(*s.ref, ops, s.ids, s.ref_slot, s.ref == base.get() ? set : none);
      std::vector<float> got(all.begin() + int64_t{b.seq_start[i]} * vocab, all.begin() + int64_t{b.seq_start[i + 1]} * vocab);
      EXPECT_TRUE(SameBits(got, alone)) << "sequence " << i << " (slot " << s.slot << ")";
    }
  }
}

// The demo models: decisions (every choice's log-probability and probability) on the base with
// the release's exact representation are the release's own, bit for bit.
TEST(ExactModeDemo, DecisionsEqualTheReleaseBitForBit) {
  const std::string root = fs::path(test::FixturesDir()).parent_path().string();
  test::TempDir d;
  test::ExtractExactAdapter(root + "/models/release", root + "/models/base", 32, d.path());
  auto base = LoadModel(root + "/models/base").value();
  auto release = LoadModel(root + "/models/release").value();
  auto tok = Tokenizer::FromFile(root + "/models/base/tokenizer.json").value();
  auto tmpl = ChatTemplate::Load(root + "/models/base", "").value();
  LoraAdapter a = Load(d.path(), *base);
  AdapterSet set;
  const int32_t lora = set.Add(&a, false), exact = set.Add(&a, true);
  const AdapterSet none;
  CpuOps ops(ActDtype::kBF16, 2);
  DecisionScorer want_scorer(*release, ops, *tok, *tmpl, none);
  DecisionScorer got_scorer(*base, ops, *tok, *tmpl, set);
  std::ifstream in(root + "/fixtures/demo-gate/requests.jsonl");
  std::string line;
  int questions = 0, lora_same = 0;
  for (int n = 0; std::getline(in, line) && n < 3; ++n) {
    auto req = ParseDecisionRequest(nlohmann::json::parse(line), {});
    ASSERT_TRUE(req.ok());
    auto want = want_scorer.Score(req.value(), 0);
    auto got = got_scorer.Score(req.value(), exact);
    auto approx = got_scorer.Score(req.value(), lora);
    ASSERT_TRUE(want.ok() && got.ok() && approx.ok());
    ASSERT_EQ(want->questions.size(), got->questions.size());
    for (size_t q = 0; q < want->questions.size(); ++q) {
      ++questions;
      bool same_lora = true;
      for (size_t c = 0; c < want->questions[q].scores.size(); ++c) {
        const ChoiceScore &w = want->questions[q].scores[c], &g = got->questions[q].scores[c];
        EXPECT_EQ(std::memcmp(&w.logprob, &g.logprob, sizeof(double)), 0) << want->questions[q].id << " " << w.choice;
        EXPECT_EQ(std::memcmp(&w.probability, &g.probability, sizeof(double)), 0);
        same_lora &= w.logprob == approx->questions[q].scores[c].logprob;
      }
      lora_same += same_lora;
    }
  }
  EXPECT_GT(questions, 5);
  EXPECT_LT(lora_same, questions) << "LoRA mode matched the release's bits on every question";
}

// The chunk table decodes exactly what the sequential decoder reads, for residuals that span
// many chunks, with gaps of every varint length.
TEST(ExactResidualIndex, ChunksApplyLikeTheSequentialDecoder) {
  std::mt19937 rng(11);
  for (int values : {0, 1, 255, 256, 257, 3000}) {
    const int64_t count = 5'000'000;
    std::vector<uint16_t> target(static_cast<size_t>(count), 0), rec(static_cast<size_t>(count), 0);
    int64_t at = -1;
    int placed = 0;
    for (; placed < values; ++placed) {
      const int64_t gap = (placed % 7 == 0) ? rng() % 200000 : rng() % 50;  // 1- to 3-byte varints
      if (at + 1 + gap >= count) break;
      at += 1 + gap;
      target[static_cast<size_t>(at)] = static_cast<uint16_t>(1 + rng() % 60000);
    }
    ExactResidual res = EncodeResidual(rec, target.data(), count);
    ASSERT_EQ(static_cast<int>(res.values.size()), placed);
    std::vector<uint16_t> seq = rec;
    ASSERT_TRUE(ApplyResidual(res, seq).ok());
    auto idx = IndexResidual(res, count);
    ASSERT_TRUE(idx.ok()) << idx.status().ToString();
    EXPECT_EQ(idx->chunks(), (placed + kResidualChunk - 1) / kResidualChunk);
    std::vector<uint16_t> par = rec;
    for (int64_t c = idx->chunks() - 1; c >= 0; --c) ApplyResidualChunk(idx.value(), c, par.data());  // any order
    EXPECT_EQ(par, seq);
    EXPECT_EQ(par, target);
  }
}

TEST(ExactResidualIndex, HostileStreamsAreRefused) {
  auto refuse = [](std::vector<uint8_t> stream, int nvalues, int64_t count, const std::string& why) {
    ExactResidual r;
    r.index_stream = std::move(stream);
    r.values.assign(static_cast<size_t>(nvalues), 0x3f80);
    auto idx = IndexResidual(r, count);
    ASSERT_FALSE(idx.ok()) << why;
    EXPECT_NE(idx.status().message().find(why), std::string::npos) << idx.status().ToString();
  };
  refuse({0x05}, 2, 100, "ends at entry 1");                            // fewer varints than values
  refuse({0x05, 0x01}, 1, 100, "trailing bytes");                       // more bytes than values
  refuse({0x80, 0x80}, 1, 100, "ends at entry 0");                      // a varint cut short
  refuse(std::vector<uint8_t>(10, 0xff), 1, 100, "longer than 64 bits");
  refuse({0x63}, 1, 99, "past the projection");                         // gap 99 in 99 elements
  refuse({0x60, 0x01}, 2, 98, "outside the projection");                // 96, then 98
}

// A damaged or inconsistent exact representation is refused when the adapter loads, naming
// the file, the module and the reason; the adapter without one offers only LoRA.
class ExactLoad : public ::testing::Test {
 protected:
  void SetUp() override {
    ExtractExact({"adapters/qwen3_5-wrapper-lora-gdn-merged", "qwen3_5-wrapper", 16}, dir_.path());
    model_ = test::LoadFixtureModel("qwen3_5-wrapper");
    auto f = SafetensorsFile::Open(dir_.File("graft_exact.safetensors"));
    ASSERT_TRUE(f.ok());
    for (const auto& t : f->tensors()) {
      tensors_.push_back({t.name, t.dtype, t.shape, std::vector<uint8_t>(f->Data(t), f->Data(t) + t.num_bytes())});
    }
    manifest_ = nlohmann::json::parse(test::ReadText(dir_.File("graft_manifest.json")));
  }
  // Writes the exact file and manifest as given, loads, and expects `why` in the error.
  void ExpectRefused(std::vector<TensorToWrite> tensors, const nlohmann::json& manifest, const std::string& why) {
    ASSERT_TRUE(WriteSafetensors(dir_.File("graft_exact.safetensors"), std::move(tensors)).ok());
    test::WriteText(dir_.File("graft_manifest.json"), manifest.dump());
    auto a = LoadLoraAdapter(dir_.path(), model_->config(), {"gdn", false, nullptr});
    ASSERT_FALSE(a.ok()) << why;
    EXPECT_NE(a.status().message().find(why), std::string::npos) << a.status().ToString();
  }
  test::TempDir dir_;
  std::unique_ptr<Model> model_;
  std::vector<TensorToWrite> tensors_;
  nlohmann::json manifest_;
};

TEST_F(ExactLoad, TruncatedIndexStream) {
  auto t = tensors_;
  for (auto& x : t) {
    if (x.name.find(".exact_index") != std::string::npos && x.bytes.size() > 1) {
      x.bytes.pop_back();
      x.shape = {static_cast<int64_t>(x.bytes.size())};
      break;
    }
  }
  ExpectRefused(t, manifest_, "index stream ends");
}

TEST_F(ExactLoad, IndexOutsideTheProjection) {
  auto t = tensors_;
  auto index = std::find_if(t.begin(), t.end(), [](const TensorToWrite& x) { return x.name.find(".exact_index") != std::string::npos; });
  ASSERT_NE(index, t.end());
  const std::string module = index->name.substr(0, index->name.size() - std::strlen(".exact_index"));
  for (uint8_t b : {0xff, 0xff, 0xff, 0xff, 0x0f}) index->bytes.push_back(b);  // one more entry, 2^35 further on
  index->shape = {static_cast<int64_t>(index->bytes.size())};
  auto value = std::find_if(t.begin(), t.end(), [&](const TensorToWrite& x) { return x.name == module + ".exact_value"; });
  ASSERT_NE(value, t.end());
  value->bytes.push_back(0), value->bytes.push_back(0x3f);
  value->shape = {value->shape[0] + 1};
  ExpectRefused(t, manifest_, "past the projection");
}

TEST_F(ExactLoad, MissingModuleResidual) {
  auto t = tensors_;
  t.erase(std::find_if(t.begin(), t.end(), [](const TensorToWrite& x) { return x.name.find(".exact_value") != std::string::npos; }));
  ExpectRefused(t, manifest_, "every module needs its residual");
}

TEST_F(ExactLoad, ExtraTensor) {
  auto t = tensors_;
  t.push_back({"model.layers.0.mlp.nothing.exact_value", DType::kBF16, {1}, {0, 0x3f}});
  ExpectRefused(t, manifest_, "belong to no module");
}

TEST_F(ExactLoad, WrongDtype) {
  auto t = tensors_;
  for (auto& x : t) {
    if (x.name.find(".exact_value") != std::string::npos) {
      x.dtype = DType::kF16;
      break;
    }
  }
  ExpectRefused(t, manifest_, "expected a 1-D U8 index and a 1-D BF16 value tensor");
}

TEST_F(ExactLoad, BadDefaultMode) {
  auto m = manifest_;
  m["default_mode"] = "fast";
  ExpectRefused(tensors_, m, "\"default_mode\" must be \"lora\" or \"exact\"");
  m = manifest_;
  m.erase("exact");
  m["default_mode"] = "exact";
  ExpectRefused(tensors_, m, "has no exact representation");
}

TEST_F(ExactLoad, OtherDifferencesMakeExactImpossible) {
  auto m = manifest_;
  m["other_differences"] = nlohmann::json::array({{{"tensor", "model.norm.weight"}, {"max_abs_diff", 0.1}, {"stored", true}}});
  ExpectRefused(tensors_, m, "exact mode reproduces projections only");
  // An entry that is not an object is still named (as "?"), not thrown on.
  m["other_differences"] = nlohmann::json::array({42});
  ExpectRefused(tensors_, m, "(e.g. ?); exact mode reproduces projections only");
}

TEST_F(ExactLoad, MissingFile) {
  fs::remove(dir_.File("graft_exact.safetensors"));
  auto a = LoadLoraAdapter(dir_.path(), model_->config(), {"gdn", false, nullptr});
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("graft_exact.safetensors"), std::string::npos) << a.status().ToString();
}

TEST_F(ExactLoad, AdapterWithoutExactOffersOnlyLora) {
  auto a = LoadLoraAdapter(test::Fixture("adapters/qwen3_5-wrapper-lora-gdn"), model_->config(), {"gdn", false, nullptr});
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(a->has_exact);
  AdapterSlots slots{1, -1, false};
  EXPECT_EQ(slots.Select("", "gdn").value(), 1);
  EXPECT_EQ(slots.Select("lora", "gdn").value(), 1);
  auto e = slots.Select("exact", "gdn");
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("'gdn' has no exact representation"), std::string::npos);
  EXPECT_FALSE(slots.Select("bitwise", "gdn").ok());
  // A step that selects an exact slot for it is refused before anything runs.
  AdapterSet set;
  const int32_t s = set.Add(&a.value(), true);
  CpuOps ops(ActDtype::kBF16, 1);
  auto st = model_->NewState(ops).value();
  std::vector<float> logits(static_cast<size_t>(model_->config().vocab_size));
  const int32_t tok = 1;
  Status f = model_->Forward(ops, &tok, 1, st, logits.data(), s, &set);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.message().find("has no exact representation"), std::string::npos) << f.ToString();
  EXPECT_EQ(st.pos, 0);
  EXPECT_FALSE(model_->ExactScratchElements(set).ok());
}

// Exact mode on a base not stored in bf16 (`served_dir`: qwen3-tiny stored as `storage`):
// refused with the remedy, then served from a resident bf16 copy of just the touched
// projections (--exact-base), bit for bit the merged release on the CPU.
void ServeExactFromABf16Copy(const std::string& served_dir, const std::string& storage) {
  test::TempDir adir;
  ExtractExact({"adapters/qwen3-tiny-lora-mixed-merged", "qwen3-tiny", 16}, adir.path());
  auto served = LoadModel(served_dir);
  ASSERT_TRUE(served.ok()) << served.status().ToString();
  auto merged = test::LoadFixtureModel("adapters/qwen3-tiny-lora-mixed-merged");
  LoraAdapter a = Load(adir.path(), **served);
  AdapterSet set;
  const int32_t exact = set.Add(&a, true);
  auto e = (*served)->ExactScratchElements(set);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("pass --exact-base DIR"), std::string::npos) << e.status().ToString();
  EXPECT_NE(e.status().message().find("stored in " + storage), std::string::npos) << e.status().ToString();
  // A checkpoint of another model is refused.
  EXPECT_FALSE((*served)->LoadExactBase(test::Fixture("qwen3_5-wrapper"), set).ok());
  auto bytes = (*served)->LoadExactBase(test::Fixture("qwen3-tiny"), set);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  int64_t touched = 0;  // the fused projections the adapter touches, in bf16
  for (size_t l = 0; l < a.layers.size(); ++l)
    for (int t = 0; t < static_cast<int>(LoraTarget::kCount); ++t)
      if (!a.layers[l].targets[static_cast<size_t>(t)].empty())
        touched += FusedWeight((*served)->weights().layers[l], static_cast<LoraTarget>(t)).rows *
                   FusedWeight((*served)->weights().layers[l], static_cast<LoraTarget>(t)).cols * 2;
  EXPECT_EQ(bytes.value(), touched) << "just the touched projections";
  EXPECT_LT(bytes.value(), merged->weights().bytes()) << "less than a bf16 copy of the whole model";
  ASSERT_TRUE((*served)->ExactScratchElements(set).ok());
  auto inputs = test::ReadIntTensors(test::Fixture("qwen3-tiny/inputs.safetensors"));
  const AdapterSet none;
  for (ActDtype act : {ActDtype::kBF16, ActDtype::kF32}) {
    CpuOps ops(act, 2);
    for (const auto& [name, ids] : inputs) {
      EXPECT_TRUE(SameBits(Logits(**served, ops, ids, exact, set), Logits(*merged, ops, ids, 0, none))) << name;
    }
  }
}

TEST(ExactModeBase, A32BitBaseServesExactlyFromABf16CopyOfTheTouchedProjections) {
  test::TempDir f32dir;
  test::WriteFloat32Copy("qwen3-tiny", f32dir.path());
  ServeExactFromABf16Copy(f32dir.path(), "float32");
}

// The quantized bases of issue 10: the same remedy, the merged release's bits.
TEST(ExactModeBase, AQuantizedBaseServesExactlyFromABf16CopyOfTheTouchedProjections) {
  test::TempDir q;
  ASSERT_TRUE(RunQuantize({test::Fixture("qwen3-tiny"), q.path(), "fp8-block", 0, 8, 2}).ok());
  ServeExactFromABf16Copy(q.path(), "fp8 (128x128 blocks)");
}

// Exact mode rebuilds bf16 weights: a float32 base is refused with the reason.
TEST(ExactModeBase, Float32BaseIsRefused) {
  test::TempDir d;
  ExtractExact({"adapters/qwen3-tiny-lora-mixed-merged", "qwen3-tiny", 16}, d.path());
  auto f32 = test::LoadFixtureModel("adapters/qwen3-tiny-lora-mixed-merged-f32");
  ASSERT_TRUE(f32);
  LoraAdapter a = Load(d.path(), *f32);
  AdapterSet set;
  set.Add(&a, true);
  auto e = f32->ExactScratchElements(set);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("stored in float32"), std::string::npos) << e.status().ToString();
}

}  // namespace
}  // namespace graft

// The engine under memory pressure: requests wait for KV room instead of failing, impossible
// ones are refused at once, a full queue answers ResourceExhausted, and results are the bits a
// lone run gives.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <future>

#include "backend/cpu/cpu_ops.h"
#include "test_util.h"
#include "tools/generate.h"

namespace graft {
namespace {

struct Collected {
  std::string text;
  std::string finish;
  Status error;
};

std::future<Collected> Generate(Engine& e, std::vector<int32_t> prompt, int max_tokens, Status* submit,
                                const SamplingParams& sampling = {}) {
  auto done = std::make_shared<std::promise<Collected>>();
  auto acc = std::make_shared<Collected>();
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling = sampling;
  r.on_event = [done, acc](const GenEvent& ev) {
    if (ev.kind == GenEvent::Kind::kDelta) acc->text += ev.text;
    if (ev.kind == GenEvent::Kind::kDone) acc->finish = ev.finish_reason, done->set_value(*acc);
    if (ev.kind == GenEvent::Kind::kError) acc->error = ev.error, done->set_value(*acc);
  };
  *submit = e.Submit(std::move(r));
  return done->get_future();
}

TEST(Engine, WaitsForKvRoomRefusesTheImpossibleAndKeepsBits) {
  auto model = test::LoadFixtureModel("qwen3_5-wrapper");
  ASSERT_NE(model, nullptr);
  auto tok = Tokenizer::FromFile(test::Fixture("qwen3_5-wrapper/tokenizer.json")).value();
  auto tmpl = ChatTemplate::Load(test::Fixture("qwen3_5-wrapper"), "").value();
  AdapterSet none;
  EngineConfig cfg;
  cfg.page_size = 16;
  cfg.kv_token_budget = 64;  // one 20+40-token request at a time (64 tokens in whole pages)
  cfg.max_running = 2;
  cfg.max_queue = 3;
  Engine engine(cfg, *model, std::make_unique<CpuOps>(ActDtype::kBF16, 2), *tok, *tmpl, none);
  auto ids = test::ReadIntTensors(test::Fixture("qwen3_5-wrapper/inputs.safetensors")).at("seq3");
  std::vector<int32_t> prompt(ids.begin(), ids.begin() + 20);
  Status s1, s2, s3, s4;
  auto f1 = Generate(engine, prompt, 40, &s1);
  auto f2 = Generate(engine, prompt, 40, &s2);
  auto f3 = Generate(engine, std::vector<int32_t>(ids.begin(), ids.begin() + 50), 30, &s3);  // 80 tokens > 64
  ASSERT_TRUE(s1.ok() && s2.ok());
  ASSERT_FALSE(s3.ok());
  EXPECT_NE(s3.message().find("exceeds the KV budget of 64 tokens"), std::string::npos) << s3.ToString();
  auto f4 = Generate(engine, prompt, 40, &s4);
  ASSERT_TRUE(s4.ok());
  Status s5;
  Generate(engine, prompt, 40, &s5);  // three queued, run one at a time for ~40 steps each: still there
  EXPECT_EQ(s5.code(), StatusCode::kResourceExhausted) << s5.ToString();
  const Collected a = f1.get(), b = f2.get(), d = f4.get();
  EXPECT_TRUE(a.error.ok() && b.error.ok() && d.error.ok());
  EXPECT_EQ(a.finish, "length");
  EXPECT_EQ(a.text, b.text);
  EXPECT_EQ(a.text, d.text);
  // The same greedy tokens as a lone run through the model.
  CpuOps ops(ActDtype::kBF16, 1);
  SequenceState st = model->NewState();
  const int vocab = model->config().vocab_size;
  std::vector<float> logits(prompt.size() * vocab), step(vocab);
  ASSERT_TRUE(model->Forward(ops, prompt.data(), 20, st, logits.data()).ok());
  const float* last = logits.data() + 19 * vocab;
  std::vector<int32_t> out;
  for (int i = 0; i < 40; ++i) {
    const int32_t t = static_cast<int32_t>(std::max_element(last, last + vocab) - last);
    out.push_back(t);
    ASSERT_TRUE(model->Forward(ops, &t, 1, st, step.data()).ok());
    last = step.data();
  }
  StreamDecoder dec(*tok);
  std::string want;
  for (int32_t t : out) want += dec.Push(t);
  want += dec.Flush();
  EXPECT_EQ(a.text, want);
}

// Sampling from the backend's candidates (Ops::TopK) draws the tokens whole rows draw: the
// same requests — greedy, seeded top-k at two temperatures with top-p, and one without top_k
// that forces whole rows on its steps — give the same text with candidate sampling on and off.
TEST(Engine, CandidateSamplingDrawsTheSameTokensAsWholeRows) {
  auto model = test::LoadFixtureModel("qwen3_5-wrapper");
  ASSERT_NE(model, nullptr);
  auto tok = Tokenizer::FromFile(test::Fixture("qwen3_5-wrapper/tokenizer.json")).value();
  auto tmpl = ChatTemplate::Load(test::Fixture("qwen3_5-wrapper"), "").value();
  auto ids = test::ReadIntTensors(test::Fixture("qwen3_5-wrapper/inputs.safetensors")).at("seq3");
  const std::vector<SamplingParams> params = {{0.0f, 0, 1.0f, 0}, {0.9f, 10, 1.0f, 5}, {1.2f, 50, 0.9f, 9},
                                              {1.0f, 0, 1.0f, 3}};
  auto run = [&](bool candidates, size_t n_requests) {
    AdapterSet none;
    EngineConfig cfg;
    cfg.candidate_sampling = candidates;
    Engine engine(cfg, *model, std::make_unique<CpuOps>(ActDtype::kBF16, 2), *tok, *tmpl, none);
    std::vector<std::future<Collected>> futures;
    for (size_t i = 0; i < n_requests; ++i) {
      Status s;
      futures.push_back(Generate(engine, std::vector<int32_t>(ids.begin() + 3 * i, ids.begin() + 3 * i + 12), 24, &s,
                                 params[i]));
      EXPECT_TRUE(s.ok()) << s.ToString();
    }
    std::vector<std::string> texts;
    for (auto& f : futures) {
      Collected c = f.get();
      EXPECT_TRUE(c.error.ok()) << c.error.ToString();
      texts.push_back(c.text);
    }
    return texts;
  };
  const auto whole = run(false, 3), cand = run(true, 3);
  EXPECT_EQ(whole, cand);
  EXPECT_NE(whole[1], whole[0]) << "a sampled request should not read like the greedy one";
  const auto mixed = run(true, 4);  // the fourth (no top_k) makes its steps use whole rows
  EXPECT_EQ(std::vector<std::string>(mixed.begin(), mixed.begin() + 3), whole);
}

}  // namespace
}  // namespace graft

#include "tools/generate.h"

#include <gtest/gtest.h>

#include "backend/cpu/cpu_ops.h"
#include "test_util.h"

namespace graft {
namespace {

struct Fixture {
  std::unique_ptr<Model> model;
  std::shared_ptr<const Tokenizer> tok;
  std::shared_ptr<const ChatTemplate> tmpl;
};

Fixture Load(const std::string& name) {
  Fixture f;
  f.model = test::LoadFixtureModel(name);
  auto t = Tokenizer::FromFile(test::Fixture(name) + "/tokenizer.json");
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  f.tok = t.value();
  auto c = ChatTemplate::Load(test::Fixture(name), "");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  f.tmpl = c.value();
  return f;
}

struct Out {
  std::string text;
  GenerateResult r;
};

Out Gen(const Fixture& f, const GenerateJob& job, const std::set<int32_t>& stop) {
  CpuOps ops(ActDtype::kBF16, 2);
  Out o;
  auto r = RunGenerate(*f.model, ops, *f.tok, f.tmpl.get(), stop, job, [&](const std::string& s) { o.text += s; });
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (r.ok()) o.r = r.value();
  return o;
}

TEST(Generate, SeededSamplingIsReproducibleAndGreedyFollowsTheArgmax) {
  const Fixture f = Load("qwen3_5-wrapper");
  ASSERT_NE(f.model, nullptr);
  GenerateJob job;
  job.prompt = "Hello there";
  job.max_tokens = 12;
  job.sampling = {0.9f, 50, 0.95f, 1234};
  const Out a = Gen(f, job, {});
  const Out b = Gen(f, job, {});
  EXPECT_EQ(a.text, b.text);
  EXPECT_EQ(a.r.generated_tokens, 12);
  EXPECT_EQ(a.r.stop_reason, "max_tokens");

  // Greedy: the same tokens as an explicit argmax loop over Forward.
  job.sampling = {};
  const Out g = Gen(f, job, {});
  auto prompt = f.tmpl->Render(nlohmann::ordered_json::parse(R"([{"role":"user","content":"Hello there"}])"), job.chat);
  ASSERT_TRUE(prompt.ok());
  std::vector<int32_t> ids = f.tok->Encode(prompt.value()).value();
  CpuOps ops(ActDtype::kBF16, 1);
  SequenceState st = f.model->NewState();
  const int vocab = f.model->config().vocab_size;
  std::vector<float> logits(ids.size() * vocab);
  ASSERT_TRUE(f.model->Forward(ops, ids.data(), static_cast<int>(ids.size()), st, logits.data()).ok());
  std::vector<int32_t> out;
  const float* last = logits.data() + (ids.size() - 1) * vocab;
  std::vector<float> step(vocab);
  for (int i = 0; i < 12; ++i) {
    int32_t best = 0;
    for (int v = 1; v < vocab; ++v) if (last[v] > last[best]) best = v;
    out.push_back(best);
    ASSERT_TRUE(f.model->Forward(ops, &best, 1, st, step.data()).ok());
    last = step.data();
  }
  EXPECT_EQ(g.text, f.tok->Decode(out, /*skip_special=*/true));
}

TEST(Generate, StopsAtAStopToken) {
  const Fixture f = Load("qwen3-tiny");
  ASSERT_NE(f.model, nullptr);
  GenerateJob job;
  job.prompt = "Hi";
  job.max_tokens = 20;
  const Out free_run = Gen(f, job, {});
  ASSERT_EQ(free_run.r.generated_tokens, 20);
  // Make the greedy first token a stop token: nothing is generated.
  auto prompt = f.tmpl->Render(nlohmann::ordered_json::parse(R"([{"role":"user","content":"Hi"}])"), job.chat).value();
  std::vector<int32_t> ids = f.tok->Encode(prompt).value();
  CpuOps ops(ActDtype::kBF16, 1);
  SequenceState st = f.model->NewState();
  std::vector<float> logits(ids.size() * 512);
  ASSERT_TRUE(f.model->Forward(ops, ids.data(), static_cast<int>(ids.size()), st, logits.data()).ok());
  const float* last = logits.data() + (ids.size() - 1) * 512;
  int32_t first = static_cast<int32_t>(std::max_element(last, last + 512) - last);
  const Out stopped = Gen(f, job, {first});
  EXPECT_EQ(stopped.r.generated_tokens, 0);
  EXPECT_EQ(stopped.r.stop_reason, "eos");
  EXPECT_EQ(StopTokens(test::Fixture("qwen3-tiny"), f.model->config(), *f.tok, f.tmpl.get()),
            (std::set<int32_t>{2, *f.tok->TokenToId("<|im_end|>")}));
}

// generation_config.json's eos ids past the vocabulary (2^32 + 2 would wrap to token 2), negative,
// fractional or quoted are not stop tokens; the valid one beside them is.
TEST(Generate, StopTokensSkipIdsThatAreNotTokens) {
  const Fixture f = Load("qwen3-tiny");
  ASSERT_NE(f.model, nullptr);
  test::TempDir dir;
  test::WriteText(dir.File("generation_config.json"), R"({"eos_token_id": [4294967298, -1, 3.0, "7", 5, 512]})");
  const auto& eos = f.model->config().eos_token_ids;  // config.json's, always stop tokens
  std::set<int32_t> want(eos.begin(), eos.end());
  ASSERT_EQ(want.count(5), 0u);
  want.insert(5);
  EXPECT_EQ(StopTokens(dir.path(), f.model->config(), *f.tok, nullptr), want);
  test::WriteText(dir.File("generation_config.json"), R"({"eos_token_id": 4294967298})");
  EXPECT_EQ(StopTokens(dir.path(), f.model->config(), *f.tok, nullptr), std::set<int32_t>(eos.begin(), eos.end()));
}

TEST(Generate, BadRequestsAreRefused) {
  const Fixture f = Load("qwen3-tiny");
  ASSERT_NE(f.model, nullptr);
  CpuOps ops(ActDtype::kBF16, 1);
  auto run = [&](const GenerateJob& job, const ChatTemplate* t) {
    return RunGenerate(*f.model, ops, *f.tok, t, {}, job, [](const std::string&) {});
  };
  GenerateJob job;
  job.prompt = "x";
  job.sampling.top_p = 0;
  EXPECT_NE(run(job, f.tmpl.get()).status().message().find("top_p"), std::string::npos);
  job.sampling = {};
  job.max_tokens = 0;
  EXPECT_NE(run(job, f.tmpl.get()).status().message().find("max_tokens"), std::string::npos);
  job.max_tokens = 4;
  EXPECT_NE(run(job, nullptr).status().message().find("no chat template"), std::string::npos);
  job.raw = true;
  job.prompt = std::string("bad \xff utf8");
  EXPECT_NE(run(job, nullptr).status().message().find("not valid UTF-8"), std::string::npos);
  job.prompt = std::string(5000, 'x') + " " + std::string(5000, 'y');
  for (int i = 0; i < 3; ++i) job.prompt += job.prompt;
  EXPECT_NE(run(job, nullptr).status().message().find("the model's context is 4096"), std::string::npos);
}

}  // namespace
}  // namespace graft

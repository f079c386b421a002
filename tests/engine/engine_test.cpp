// The engine under memory pressure: requests wait for KV room instead of failing, impossible
// ones are refused at once, a full queue answers ResourceExhausted, and results are the bits a
// lone run gives.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <future>

#include <fmt/core.h>

#include "adapters/lora_loader.h"
#include "backend/cpu/cpu_ops.h"
#include "grammar/json_schema.h"
#include "model/model.h"
#include "test_util.h"
#include "tools/generate.h"

namespace graft {
namespace {

struct Collected {
  std::string text;
  std::string finish;
  Status error;
  int cached = 0;  // prompt tokens continued from the prefix cache
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

// The qwen3_5-wrapper fixture's model, tokenizer and chat template.
struct Wrapper {
  std::unique_ptr<Model> model = test::LoadFixtureModel("qwen3_5-wrapper");
  std::shared_ptr<const Tokenizer> tok = Tokenizer::FromFile(test::Fixture("qwen3_5-wrapper/tokenizer.json")).value();
  std::shared_ptr<const ChatTemplate> tmpl = ChatTemplate::Load(test::Fixture("qwen3_5-wrapper"), "").value();
  // The first n tokens of the fixture's seq3, a prompt.
  static std::vector<int32_t> Prompt(size_t n) {
    const auto ids = test::ReadIntTensors(test::Fixture("qwen3_5-wrapper/inputs.safetensors")).at("seq3");
    return std::vector<int32_t>(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n));
  }
};

// Submits r and waits for its end: the text, the finish reason (and cached prompt tokens) or the
// error.
Collected RunToEnd(Engine& e, GenerationRequest r) {
  auto done = std::make_shared<std::promise<Collected>>();
  auto acc = std::make_shared<Collected>();
  r.on_event = [done, acc](const GenEvent& ev) {
    if (ev.kind == GenEvent::Kind::kDelta) acc->text += ev.text;
    if (ev.kind == GenEvent::Kind::kDone) acc->finish = ev.finish_reason, acc->cached = ev.cached_tokens, done->set_value(*acc);
    if (ev.kind == GenEvent::Kind::kError) acc->error = ev.error, done->set_value(*acc);
  };
  const Status st = e.Submit(std::move(r));
  EXPECT_TRUE(st.ok()) << st.ToString();
  if (!st.ok()) return Collected{"", "", st};
  return done->get_future().get();
}

// Greedy tokens of `prompt` run alone through the model, each row shaped first by `shape` (given
// the tokens so far).
std::vector<int32_t> GreedyLoneRun(const Model& model, const std::vector<int32_t>& prompt, int steps,
                                   const std::function<void(std::vector<float>&, const std::vector<int32_t>&)>& shape) {
  CpuOps ops(ActDtype::kBF16, 1);
  const int vocab = model.config().vocab_size;
  SequenceState st = model.NewState();
  std::vector<float> logits(prompt.size() * vocab), step(vocab);
  EXPECT_TRUE(model.Forward(ops, prompt.data(), static_cast<int>(prompt.size()), st, logits.data()).ok());
  std::vector<float> row(logits.end() - vocab, logits.end());
  std::vector<int32_t> out;
  for (int i = 0; i < steps; ++i) {
    std::vector<float> shaped = row;
    shape(shaped, out);
    const int32_t t = static_cast<int32_t>(std::max_element(shaped.begin(), shaped.end()) - shaped.begin());
    out.push_back(t);
    EXPECT_TRUE(model.Forward(ops, &t, 1, st, step.data()).ok());
    row = step;
  }
  return out;
}

// The text of the first n tokens, as a request streams it (an unfinished character: U+FFFD).
// Every choice's score of `got` is the bits of `want`'s (the same decision run elsewhere).
void ExpectSameScores(const DecisionResult& got, const DecisionResult& want, const std::string& what) {
  ASSERT_EQ(got.questions.size(), want.questions.size()) << what;
  for (size_t q = 0; q < want.questions.size(); ++q) {
    ASSERT_EQ(got.questions[q].scores.size(), want.questions[q].scores.size()) << what << ", question " << q;
    for (size_t c = 0; c < want.questions[q].scores.size(); ++c) {
      EXPECT_EQ(got.questions[q].scores[c].logprob, want.questions[q].scores[c].logprob)
          << what << ", question " << q << " choice " << c;
    }
  }
}

std::string TextOf(const Tokenizer& tok, const std::vector<int32_t>& ids, size_t n) {
  StreamDecoder dec(tok);
  std::string s;
  for (size_t i = 0; i < n; ++i) s += dec.Push(ids[i]);
  return s + dec.Flush();
}

TEST(Engine, PreemptsForKvRoomRefusesTheImpossibleAndKeepsBits) {
  auto model = test::LoadFixtureModel("qwen3_5-wrapper");
  ASSERT_NE(model, nullptr);
  auto tok = Tokenizer::FromFile(test::Fixture("qwen3_5-wrapper/tokenizer.json")).value();
  auto tmpl = ChatTemplate::Load(test::Fixture("qwen3_5-wrapper"), "").value();
  AdapterSet none;
  EngineConfig cfg;
  cfg.page_size = 16;
  cfg.kv_token_budget = 64;  // two 20-token prompts fit, not two 20+40-token requests: one is preempted
  cfg.max_running = 2;
  cfg.max_queue = 3;
  Engine engine(cfg, *model, std::make_unique<CpuOps>(ActDtype::kBF16, 2), *tok, *tmpl, none);
  std::vector<int32_t> prompt = Wrapper::Prompt(20);
  Status s1, s2, s3, s4;
  auto f1 = Generate(engine, prompt, 40, &s1);
  auto f2 = Generate(engine, prompt, 40, &s2);
  auto f3 = Generate(engine, Wrapper::Prompt(50), 30, &s3);  // 80 tokens > 64
  ASSERT_TRUE(s1.ok() && s2.ok());
  ASSERT_FALSE(s3.ok());
  EXPECT_NE(s3.message().find("exceeds the KV pool of 64 tokens (--kv-tokens)"), std::string::npos) << s3.ToString();
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
  // Both first prompts ran at once and the newer gave its KV back as the older grew: recomputed
  // later from its tokens so far, with the same text (checked against a lone run below).
  EXPECT_GT(engine.Stats().preemptions, 0);
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

// Preempted sampled requests keep their draws: three seeded top-k requests (hot: the fixture is
// peaked) on a pool that holds their prompts but not their growth (96 tokens in pages of 16)
// preempt one another, and each gives the text it gives on a roomy engine — its RNG is its own
// and the recomputed rows are the rows it had. The engine counts the preemptions.
TEST(Engine, PreemptedSampledRequestsKeepTheirText) {
  Wrapper w;
  ASSERT_NE(w.model, nullptr);
  auto& [model, tok, tmpl] = w;
  AdapterSet none;
  const std::vector<int32_t> prompt = Wrapper::Prompt(24);
  auto run = [&](int64_t budget, int64_t* preemptions) {
    EngineConfig cfg;
    cfg.kv_token_budget = budget;
    cfg.prefix_cache_entries = 0;
    Engine engine(cfg, *model, std::make_unique<CpuOps>(ActDtype::kBF16, 2), *tok, *tmpl, none);
    std::vector<std::future<Collected>> out;
    for (uint64_t seed : {3u, 5u, 7u}) {
      Status st;
      out.push_back(Generate(engine, prompt, 40, &st, SamplingParams(4.0f, 50, 1.0f, seed)));  // a flat draw: the tiny model is peaked
      EXPECT_TRUE(st.ok()) << st.ToString();
    }
    std::vector<std::string> texts;
    for (auto& f : out) {
      const Collected c = f.get();
      EXPECT_TRUE(c.error.ok()) << c.error.ToString();
      EXPECT_EQ(c.finish, "length");
      texts.push_back(c.text);
    }
    *preemptions = engine.Stats().preemptions;
    engine.Stop();
    return texts;
  };
  int64_t roomy_preemptions = 0, tight_preemptions = 0;
  const auto roomy = run(4096, &roomy_preemptions);
  const auto tight = run(96, &tight_preemptions);
  EXPECT_EQ(roomy_preemptions, 0);
  EXPECT_GT(tight_preemptions, 0);
  EXPECT_EQ(tight, roomy);
  EXPECT_NE(roomy[0], roomy[1]) << "different seeds, different draws";
}

// A preempted request whose prompt logprobs went out does not send them again: two greedy
// requests on a pool that holds their prompts but not their growth, the newer asking for prompt
// logprobs — one event of them, the prompt's length, and the lone run's text.
TEST(Engine, PromptLogprobsGoOutOnceAcrossAPreemption) {
  Wrapper w;
  ASSERT_NE(w.model, nullptr);
  auto& [model, tok, tmpl] = w;
  AdapterSet none;
  EngineConfig cfg;
  cfg.kv_token_budget = 64;
  cfg.page_size = 16;
  Engine engine(cfg, *model, std::make_unique<CpuOps>(ActDtype::kBF16, 2), *tok, *tmpl, none);
  const std::vector<int32_t> prompt = Wrapper::Prompt(20);
  Status s1;
  auto first = Generate(engine, prompt, 40, &s1);
  ASSERT_TRUE(s1.ok());
  auto done = std::make_shared<std::promise<void>>();
  auto events = std::make_shared<int>(0);
  auto entries = std::make_shared<size_t>(0);
  auto text = std::make_shared<std::string>();
  GenerationRequest r;
  r.prompt = prompt;
  r.max_tokens = 40;
  r.prompt_logprobs = true;
  r.top_logprobs = 1;
  r.on_event = [=](const GenEvent& ev) {
    if (ev.kind == GenEvent::Kind::kDelta) {
      if (!ev.prompt_logprobs.empty()) ++*events, *entries = ev.prompt_logprobs.size();
      *text += ev.text;
    }
    if (ev.kind != GenEvent::Kind::kDelta) done->set_value();
  };
  ASSERT_TRUE(engine.Submit(std::move(r)).ok());
  done->get_future().get();
  const Collected a = first.get();
  EXPECT_GT(engine.Stats().preemptions, 0);
  EXPECT_EQ(*events, 1);
  EXPECT_EQ(*entries, prompt.size());
  EXPECT_EQ(*text, a.text);
  engine.Stop();
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

// A request's penalties and logit_bias through the engine: greedy tokens as a lone run through
// the model gives when the row is shaped by hand (vLLM's order), beside a plain neighbour or not;
// and the logprobs it reports are the model's own (unshaped).
TEST(Engine, PenaltiesAndLogitBiasShapeOnlyTheirRowAndMatchALoneRun) {
  // The trained demo model: its logits have a natural scale (a random fixture's top logits stand
  // 20-40 apart, beyond any penalty) and its greedy text repeats itself.
  const std::string dir = test::FixturesDir() + "/../models/base";
  auto loaded = LoadModel(dir);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  auto model = std::move(loaded).value();
  auto tok = Tokenizer::FromFile(dir + "/tokenizer.json").value();
  auto tmpl = ChatTemplate::Load(dir, "").value();
  const std::vector<int32_t> prompt = tok->Encode("The package manager keeps a list of the packages that").value();
  const int vocab = model->config().vocab_size, steps = 32;
  // The plain greedy tokens of a lone run; the shaped run bans the first of them.
  auto lone = [&](const std::function<void(std::vector<float>&, const std::vector<int32_t>&)>& shape) {
    return GreedyLoneRun(*model, prompt, steps, shape);
  };
  const std::vector<int32_t> plain = lone([](std::vector<float>&, const std::vector<int32_t>&) {});
  SamplingParams p;  // greedy
  p.presence_penalty = 1.5f;  // Qwen's suggestion against endless repetition
  p.frequency_penalty = 0.5f;
  p.repetition_penalty = 1.2f;
  p.logit_bias = {{plain[0], -100.0f}};
  const std::vector<int32_t> shaped = lone([&](std::vector<float>& row, const std::vector<int32_t>& out) {
    row[static_cast<size_t>(plain[0])] += -100.0f;
    std::vector<int32_t> seen(prompt);
    seen.insert(seen.end(), out.begin(), out.end());
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    for (int32_t t : seen) row[t] = row[t] > 0 ? row[t] / 1.2f : row[t] * 1.2f;
    for (int32_t t : seen) {
      const auto count = std::count(out.begin(), out.end(), t);
      if (count > 0) row[t] -= 0.5f * static_cast<float>(count) + 1.5f;
    }
  });
  ASSERT_NE(shaped[0], plain[0]) << ::testing::PrintToString(plain) << " " << ::testing::PrintToString(shaped);
  ASSERT_NE(shaped, plain);
  std::vector<int32_t> distinct(plain);
  std::sort(distinct.begin(), distinct.end());
  ASSERT_LT(std::unique(distinct.begin(), distinct.end()) - distinct.begin(), steps)
      << "the plain text repeats tokens, which the output penalties act on";
  auto text_of = [&](const std::vector<int32_t>& t) { return TextOf(*tok, t, t.size()); };
  AdapterSet none;
  for (bool neighbour : {false, true}) {
    Engine engine(EngineConfig{}, *model, std::make_unique<CpuOps>(ActDtype::kBF16, 2), *tok, *tmpl, none);
    Status s1, s2;
    auto shaped_f = Generate(engine, prompt, steps, &s1, p);
    std::future<Collected> plain_f;
    if (neighbour) plain_f = Generate(engine, prompt, steps, &s2);
    ASSERT_TRUE(s1.ok()) << s1.ToString();
    EXPECT_EQ(shaped_f.get().text, text_of(shaped)) << "neighbour " << neighbour;
    if (neighbour) {
      EXPECT_EQ(plain_f.get().text, text_of(plain)) << "the plain neighbour is not shaped";
    }
  }
  // Logprobs stay the model's: the shaped first token is reported below the banned one.
  Engine engine(EngineConfig{}, *model, std::make_unique<CpuOps>(ActDtype::kBF16, 2), *tok, *tmpl, none);
  std::vector<TokenLogprob> got;
  auto done = std::make_shared<std::promise<void>>();
  GenerationRequest r;
  r.prompt = prompt;
  r.max_tokens = 1;
  r.sampling = p;
  r.top_logprobs = 1;
  r.on_event = [&got, done](const GenEvent& ev) {
    for (const auto& lp : ev.logprobs) got.push_back(lp);
    if (ev.kind != GenEvent::Kind::kDelta) done->set_value();
  };
  ASSERT_TRUE(engine.Submit(std::move(r)).ok());
  done->get_future().get();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].token, shaped[0]);
  ASSERT_EQ(got[0].top.size(), 1u);
  EXPECT_LT(got[0].logprob, got[0].top[0].second) << "the model's best (banned) token keeps its raw logprob";
  // A bias on a token past the vocabulary is refused at submission, naming it.
  SamplingParams bad;
  bad.logit_bias = {{vocab, 1.0f}};
  Status s;
  Generate(engine, prompt, 4, &s, bad);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(fmt::format("logit_bias: token {} is outside the vocabulary", vocab)), std::string::npos)
      << s.ToString();
}

// Stop tokens and min_tokens through the engine: a request stops at its own stop token (not
// counted, not shown); with min_tokens its stop tokens are never drawn before that many tokens
// and no stop string counts either — what a lone run with those tokens banned gives.
TEST(Engine, StopTokensAndMinTokensMatchALoneRun) {
  auto model = test::LoadFixtureModel("qwen3_5-wrapper");
  ASSERT_NE(model, nullptr);
  auto tok = Tokenizer::FromFile(test::Fixture("qwen3_5-wrapper/tokenizer.json")).value();
  auto tmpl = ChatTemplate::Load(test::Fixture("qwen3_5-wrapper"), "").value();
  const std::vector<int32_t> prompt = Wrapper::Prompt(12);
  const int vocab = model->config().vocab_size, steps = 16;
  // Greedy tokens of a lone run, `banned` never drawn for the first `ban_for` tokens.
  auto lone = [&](const std::set<int32_t>& banned, int ban_for) {
    return GreedyLoneRun(*model, prompt, steps, [&](std::vector<float>& row, const std::vector<int32_t>& out) {
      if (static_cast<int>(out.size()) < ban_for) for (int32_t t : banned) row[t] = -INFINITY;
    });
  };
  auto text_of = [&](const std::vector<int32_t>& t, size_t n) { return TextOf(*tok, t, n); };
  const std::vector<int32_t> plain = lone({}, 0);
  AdapterSet none;
  Engine engine(EngineConfig{}, *model, std::make_unique<CpuOps>(ActDtype::kBF16, 2), *tok, *tmpl, none);
  auto run = [&](std::set<int32_t> stops, int min_tokens, std::vector<std::string> stop_strings = {}) {
    GenerationRequest r;
    r.prompt = prompt;
    r.max_tokens = steps;
    r.stop_tokens = std::move(stops);
    r.min_tokens = min_tokens;
    r.stop_strings = std::move(stop_strings);
    return RunToEnd(engine, std::move(r));
  };
  // Its own stop token: the text before it, "stop".
  const Collected a = run({plain[3]}, 0);
  EXPECT_EQ(a.finish, "stop");
  EXPECT_EQ(a.text, text_of(plain, 3));
  // min_tokens 2 with the first greedy token as a stop token: it is never drawn first or second.
  const std::vector<int32_t> banned = lone({plain[0]}, 2);
  ASSERT_NE(banned[0], plain[0]);
  size_t end = banned.size();
  for (size_t i = 2; i < banned.size(); ++i) {
    if (banned[i] == plain[0]) {
      end = i;
      break;
    }
  }
  const Collected b = run({plain[0]}, 2);
  EXPECT_EQ(b.text, text_of(banned, end));
  EXPECT_EQ(b.finish, end < banned.size() ? "stop" : "length");
  // A stop string inside the first min_tokens tokens' text does not stop the request.
  const std::string early = text_of(plain, 2);
  ASSERT_FALSE(early.empty());
  const Collected c = run({}, 4, {early});
  EXPECT_EQ(c.finish, "length");
  EXPECT_EQ(c.text.substr(0, early.size()), early);
  const Collected d = run({}, 0, {early});
  EXPECT_EQ(d.finish, "stop");
  EXPECT_EQ(d.text, "");
  // Refused at submission: a stop token past the vocabulary, min_tokens above max_tokens.
  GenerationRequest bad;
  bad.prompt = prompt;
  bad.stop_tokens = {vocab};
  Status st = engine.Submit(bad);
  EXPECT_NE(st.message().find(fmt::format("stop token {} is outside the vocabulary", vocab)), std::string::npos) << st.ToString();
  bad.stop_tokens.clear();
  bad.max_tokens = 4;
  bad.min_tokens = 5;
  st = engine.Submit(bad);
  EXPECT_NE(st.message().find("min_tokens 5 must be in [0, max_tokens = 4]"), std::string::npos) << st.ToString();
}

}  // namespace
}  // namespace graft

namespace graft {
namespace {

// Structured output: the text is a sentence of the grammar and ends where it is whole; where the
// unconstrained greedy text already conforms, the constrained one is the same (the mask changes
// no logit); a gate leaves the text before it free.
TEST(Engine, GrammarConstrainsTheTextAndKeepsAConformingGreedyRun) {
  Wrapper w;
  ASSERT_NE(w.model, nullptr);
  auto& [model, tok, tmpl] = w;
  const std::vector<int32_t> prompt = Wrapper::Prompt(12);
  AdapterSet none;
  Engine engine(EngineConfig{}, *model, std::make_unique<CpuOps>(ActDtype::kBF16, 2), *tok, *tmpl, none);
  auto run = [&](std::shared_ptr<const Grammar> g, std::string gate, int max_tokens, float temperature = 0) {
    GenerationRequest r;
    r.prompt = prompt;
    r.max_tokens = max_tokens;
    r.sampling = SamplingParams(temperature, 0, 1.0f, 11);
    r.grammar = std::move(g);
    r.grammar_gate = std::move(gate);
    return RunToEnd(engine, std::move(r));
  };
  const Collected plain = run(nullptr, "", 10);
  ASSERT_FALSE(plain.text.empty());
  // A grammar holding exactly the unconstrained text: the same text, and it stops there.
  Grammar lit;
  lit.set_root(lit.Literal(plain.text));
  const Collected same = run(std::make_shared<const Grammar>(std::move(lit)), "", 40);
  EXPECT_EQ(same.text, plain.text);
  EXPECT_EQ(same.finish, "stop");
  // A JSON schema, greedy and sampled: the text parses and has the schema's shape.
  auto schema = JsonSchemaGrammar(nlohmann::ordered_json::parse(
      R"({"type":"object","properties":{"answer":{"enum":["yes","no"]},"n":{"type":"integer"}},"required":["answer","n"]})"));
  ASSERT_TRUE(schema.ok());
  for (float t : {0.0f, 1.0f}) {
    const Collected c = run(*schema, "", 400, t);
    ASSERT_EQ(c.finish, "stop") << "[" << c.text << "] " << c.error.ToString();
    auto j = nlohmann::json::parse(c.text, nullptr, false);
    ASSERT_TRUE(j.is_object()) << c.text;
    EXPECT_TRUE(j["answer"] == "yes" || j["answer"] == "no") << c.text;
    EXPECT_TRUE(j["n"].is_number_integer()) << c.text;
  }
  // Behind a gate (the unconstrained run's first two tokens): those run free, then the choice.
  const std::vector<int32_t> first = GreedyLoneRun(*model, prompt, 2, [](std::vector<float>&, const std::vector<int32_t>&) {});
  const std::string gate = tok->TokenBytes(first[0]) + tok->TokenBytes(first[1]);
  auto choice = ChoiceGrammar({"A1", "B2"});
  ASSERT_TRUE(choice.ok());
  const Collected gated = run(*choice, gate, 40);
  EXPECT_EQ(gated.finish, "stop");
  ASSERT_GE(gated.text.size(), 2u);
  const std::string rest = gated.text.substr(gated.text.size() - 2);
  EXPECT_TRUE(rest == "A1" || rest == "B2") << gated.text;
  EXPECT_EQ(gated.text.substr(0, gated.text.size() - 2), TextOf(*tok, first, 2));
}

}  // namespace
}  // namespace graft

namespace graft {
namespace {

DecisionRequest SmallDecision() {
  DecisionRequest d;
  d.record = "GET /index.html 200";
  d.questions.push_back({"q", "Malicious?", {"yes", "no"}});
  return d;
}

// SmallDecision with `lines` more log lines in its record (~20 tokens each; 120: ~2,400 tokens,
// many pieces).
DecisionRequest PagesDecision(int lines = 120) {
  DecisionRequest d = SmallDecision();
  for (int i = 0; i < lines; ++i) d.record += fmt::format(" GET /page/{}.html 200", i);
  return d;
}

// Decisions in admission: they count in max_queue with chat (429 past it), and one too big for
// what decisions may hold even with their cache emptied is a 400 naming the cap, not a retryable 429.
TEST(Engine, DecisionsCountInTheQueueAndOneThatCanNeverFitIsInvalid) {
  Wrapper w;
  ASSERT_NE(w.model, nullptr);
  auto& [model, tok, tmpl] = w;
  AdapterSet none;
  const DecisionRequest d = SmallDecision();
  // A decisions' part of 32 tokens; and one past a 64-token pool, where the pool is the cap (a 400
  // naming it, not a wait for room that never comes).
  EngineConfig small;
  small.decision_kv_tokens = 32;
  EngineConfig tiny;
  tiny.kv_token_budget = 64;
  for (const auto& [cfg, cap] : {std::pair{small, 32}, std::pair{tiny, 64}}) {
    Engine engine(cfg, *model, std::make_unique<CpuOps>(ActDtype::kBF16, 2), *tok, *tmpl, none);
    DecisionRequest big = d;
    big.record = std::string(2000, 'x') + " end of the record";
    auto r = engine.Decide(big, 0);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
    EXPECT_NE(r.status().message().find(
                  fmt::format("more KV memory than decisions may hold ({} tokens, --decision-kv-tokens)", cap)),
              std::string::npos) << r.status().message();
  }
  EngineConfig one;
  one.max_queue = 1;
  Engine engine(one, *model, std::make_unique<CpuOps>(ActDtype::kBF16, 2), *tok, *tmpl, none);
  Status submitted;
  auto chat = Generate(engine, {1, 2, 3}, 2000, &submitted);  // long enough to hold the one place
  ASSERT_TRUE(submitted.ok()) << submitted.ToString();
  auto r = engine.Decide(d, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(r.status().message(), "1 requests are queued or running; the limit is 1");
  engine.Stop();
  (void)chat.get();
}

// DecideAsync answers through its callback; a decision whose client went away ends kCancelled.
TEST(Engine, AsyncDecisionsAnswerByCallbackAndACancelledOneStops) {
  Wrapper w;
  ASSERT_NE(w.model, nullptr);
  auto& [model, tok, tmpl] = w;
  AdapterSet none;
  const DecisionRequest d = SmallDecision();
  Engine engine(EngineConfig{}, *model, std::make_unique<CpuOps>(ActDtype::kBF16, 2), *tok, *tmpl, none);
  auto run = [&](std::shared_ptr<std::atomic<bool>> cancelled) {
    std::promise<Result<DecisionResult>> p;
    auto f = p.get_future();
    EXPECT_TRUE(engine.DecideAsync(d, 0, [&p](Result<DecisionResult> r) { p.set_value(std::move(r)); }, cancelled).ok());
    return f.get();
  };
  const auto ok = run(nullptr);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  const auto sync = engine.Decide(d, 0);
  ASSERT_TRUE(sync.ok());
  EXPECT_EQ(ok->questions[0].scores[0].logprob, sync->questions[0].scores[0].logprob);
  const auto gone = run(std::make_shared<std::atomic<bool>>(true));
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.status().code(), StatusCode::kCancelled);
  engine.Stop();
  EXPECT_EQ(engine.DecideAsync(d, 0, [](Result<DecisionResult>) {}).code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace graft

namespace graft {
namespace {

// Starts a greedy chat stream of max_tokens tokens on `engine` and waits for its first token; the
// returned future is ready once the stream has ended.
std::shared_future<void> StartChatStream(Engine& engine, int max_tokens) {
  auto started = std::make_shared<std::promise<void>>();
  auto finished = std::make_shared<std::promise<void>>();
  std::shared_future<void> ended = finished->get_future().share();
  GenerationRequest r;
  r.prompt = Wrapper::Prompt(8);
  r.max_tokens = max_tokens;
  r.stop_tokens.clear();
  r.on_event = [started, finished, first = std::make_shared<bool>(true)](const GenEvent& ev) {
    if (ev.kind == GenEvent::Kind::kDelta && *first) *first = false, started->set_value();
    if (ev.kind != GenEvent::Kind::kDelta) finished->set_value();
  };
  const Status submitted = engine.Submit(std::move(r));
  EXPECT_TRUE(submitted.ok()) << submitted.ToString();
  if (submitted.ok()) started->get_future().wait();
  return ended;
}

// Beside running chat a decision's pieces keep to the step budget (--max-step-tokens, in whole
// 64-token tiles), whatever --decision-prefill-chunk allows alone; alone they take the chunk. The
// bits are the same either way.
TEST(Engine, DecisionPiecesKeepToTheStepBudgetBesideChat) {
  Wrapper w;
  ASSERT_NE(w.model, nullptr);
  auto& [model, tok, tmpl] = w;
  AdapterSet none;
  EngineConfig cfg;
  cfg.decision_prefill_chunk = 1024;
  cfg.max_step_tokens = 130;  // pieces of 128 beside chat
  DecisionRequest d = PagesDecision();
  // Alone, on an idle engine with a cold cache.
  Result<DecisionResult> alone = Status::Ok();
  int64_t alone_pieces = 0;
  {
    Engine idle(cfg, *model, std::make_unique<CpuOps>(ActDtype::kBF16, 2), *tok, *tmpl, none);
    alone = idle.Decide(d, 0);
    alone_pieces = idle.Stats().decision_pieces;
    // Its steps as the engine recorded them, slowest first: decision rows only, the record's
    // pieces and the questions' runs among them (a few steps in all, so every one is kept). A
    // step is recorded after its decision's answer goes out: read once the engine has stopped.
    idle.Stop();
    const std::vector<StepRecord> slow = idle.Stats().slowest_steps;
    ASSERT_FALSE(slow.empty());
    EXPECT_LE(slow.size(), EngineStats::kSlowestSteps);
    bool record_seen = false, questions_seen = false;
    for (size_t i = 0; i < slow.size(); ++i) {
      if (i > 0) {
        EXPECT_LE(slow[i].seconds, slow[i - 1].seconds);
      }
      EXPECT_EQ(slow[i].decode_rows + slow[i].prompt_rows, 0);
      EXPECT_GT(slow[i].decision_rows, 0);
      EXPECT_GE(slow[i].decision_seqs, 1);
      (slow[i].questions ? questions_seen : record_seen) = true;
    }
    if (alone_pieces <= static_cast<int64_t>(EngineStats::kSlowestSteps)) {
      EXPECT_TRUE(record_seen && questions_seen) << "both kinds of piece among the steps";
    }
    idle.ForgetSlowestSteps();
    EXPECT_TRUE(idle.Stats().slowest_steps.empty());
  }
  ASSERT_TRUE(alone.ok()) << alone.status().ToString();
  const int64_t record = alone->record_tokens;
  ASSERT_GT(record, 256) << "a record of several 128-token pieces";
  EXPECT_LE(alone_pieces, (record + 1023) / 1024 + 2) << "alone: --decision-prefill-chunk pieces, then the questions (two)";
  // Beside a long chat stream, on another engine with a cold cache.
  Engine engine(cfg, *model, std::make_unique<CpuOps>(ActDtype::kBF16, 2), *tok, *tmpl, none);
  std::shared_future<void> finished = StartChatStream(engine, 600);
  auto beside = engine.Decide(d, 0);
  const int64_t beside_pieces = engine.Stats().decision_pieces;
  finished.wait();
  ASSERT_TRUE(beside.ok()) << beside.status().ToString();
  EXPECT_GE(beside_pieces, (record + 127) / 128 + 1) << "beside chat: 128-token pieces, then the questions";
  for (const StepRecord& s : engine.Stats().slowest_steps) {
    EXPECT_LE(s.decode_rows + s.prompt_rows + s.decision_rows, cfg.max_step_tokens) << "a recorded step within the budget";
    // Questions beside chat: half the rows a record piece would take, or one run alone.
    if (s.questions && s.decode_rows > 0 && s.decision_seqs > 1) {
      EXPECT_LE(s.decision_rows, (cfg.max_step_tokens - s.decode_rows) / 2) << "questions beside chat: half the budget";
    }
  }
  ExpectSameScores(*beside, *alone, "beside chat");
  engine.Stop();
}

// A decision no longer freezes chat: its pieces (a 64-token chunk of the record, its questions
// with their choices' rows) run inside the chat steps, one a step. Counted in pieces, steps and
// rows, not time: between two tokens of a stream that runs throughout, no more pieces than steps
// and at most four steps (a step whose token ends inside a character sends no text; a character
// is at most four bytes), and no step ever held more than the step budget's rows — so a chat gap
// is bounded by the budget; the decision takes a piece a record chunk and at least one for its
// (independent) questions; its answer is the bits of the same decision on an idle engine.
TEST(Engine, ADecisionRunsAPieceBetweenTwoChatTokens) {
  Wrapper w;
  ASSERT_NE(w.model, nullptr);
  auto& [model, tok, tmpl] = w;
  AdapterSet none;
  EngineConfig cfg;
  cfg.decision_prefill_chunk = 64;
  DecisionRequest d = PagesDecision();
  d.questions.push_back({"q2", "Which method?", {"GET", "POST"}});
  Result<DecisionResult> alone = Status::Ok();
  {
    Engine idle(cfg, *model, std::make_unique<CpuOps>(ActDtype::kBF16, 2), *tok, *tmpl, none);
    alone = idle.Decide(d, 0);
    ASSERT_TRUE(alone.ok()) << alone.status().ToString();
  }
  Engine engine(cfg, *model, std::make_unique<CpuOps>(ActDtype::kBF16, 2), *tok, *tmpl, none);
  // The pieces and steps counters as each chat token leaves (on the engine thread).
  auto seen = std::make_shared<std::vector<std::pair<int64_t, int64_t>>>();
  auto started = std::make_shared<std::promise<void>>();
  auto finished = std::make_shared<std::promise<void>>();
  GenerationRequest r;
  r.prompt = Wrapper::Prompt(8);
  r.max_tokens = 400;
  r.stop_tokens.clear();
  r.on_event = [&engine, seen, started, finished](const GenEvent& ev) {
    if (ev.kind == GenEvent::Kind::kDelta) {
      if (seen->empty()) started->set_value();
      const EngineStats st = engine.Stats();
      seen->push_back({st.decision_pieces, st.steps});
    }
    if (ev.kind != GenEvent::Kind::kDelta) finished->set_value();
  };
  ASSERT_TRUE(engine.Submit(std::move(r)).ok());
  started->get_future().wait();
  std::promise<std::pair<Result<DecisionResult>, int64_t>> decided;
  ASSERT_TRUE(engine.DecideAsync(d, 0, [&](Result<DecisionResult> res) {
    decided.set_value({std::move(res), engine.Stats().decision_pieces});
  }).ok());
  auto [got, pieces] = decided.get_future().get();
  finished->get_future().wait();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  // A piece a 64-token chunk of the record, then the questions in pieces of up to 64 tokens each
  // (a group's tokens, then its multi-token choices' heads).
  const int64_t record_pieces = (got->record_tokens + 63) / 64;
  EXPECT_GE(pieces, record_pieces + 1) << got->record_tokens << " record tokens";
  EXPECT_LE(pieces, record_pieces + 2 * static_cast<int64_t>(d.questions.size())) << got->record_tokens << " record tokens";
  int64_t during = 0;
  for (size_t i = 1; i < seen->size(); ++i) {
    const auto [p0, s0] = (*seen)[i - 1];
    const auto [p1, s1] = (*seen)[i];
    EXPECT_LE(p1 - p0, s1 - s0) << "pieces and steps between chat tokens " << i - 1 << " and " << i;
    EXPECT_LE(s1 - s0, 4) << "steps between chat tokens " << i - 1 << " and " << i;
    if (p1 > 0 && p1 < pieces) ++during;
  }
  EXPECT_GE(during, pieces / 2) << "chat tokens while the decision ran";
  EXPECT_LE(engine.Stats().largest_step, cfg.max_step_tokens) << "rows in one step, chat and decision together";
  ExpectSameScores(*got, *alone, "in pieces between chat tokens");
  engine.Stop();
}

// N decisions submitted at once (N = 1, 4, 16), on the base and on an adapter, half of them on
// one shared record (prefix-cache hits after the first) and half on their own: each gets the
// bits it gets alone on an idle engine with a cold cache; the cache hits say so in cached_tokens.
TEST(Engine, ConcurrentDecisionsGiveEachTheBitsItGetsAlone) {
  Wrapper w;
  ASSERT_NE(w.model, nullptr);
  auto& [model, tok, tmpl] = w;
  auto a = LoadLoraAdapter(test::Fixture("adapters/qwen3_5-wrapper-lora-gdn"), model->config(), {"gdn", false, nullptr});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  AdapterSet set;
  set.slots.push_back(&*a);
  EngineConfig cfg;
  cfg.decision_prefill_chunk = 64;
  auto decision = [](int i) {
    DecisionRequest d;
    d.record = i % 2 == 0 ? std::string("GET /shared/record.html 200 from 10.0.0.1") : fmt::format("POST /api/{} 500 from 10.0.0.{}", i, i);
    for (int k = 0; k < 30; ++k) d.record += fmt::format(" GET /asset/{}.css 200", k);
    d.questions.push_back({"m", "Malicious?", {"yes", "no"}});
    d.questions.push_back({"s", "Status class?", {"2xx", "4xx", "5xx"}});
    return d;
  };
  // Four in a row on a slot, then four on the other: each run of four has a shared record that
  // misses (or hits, if the 4-entry prefix cache still holds it) and one that hits right after.
  auto slot_of = [](int i) { return static_cast<int32_t>((i / 4) % 2); };
  for (int n : {1, 4, 16}) {
    SCOPED_TRACE(fmt::format("{} at once", n));
    std::vector<Result<DecisionResult>> alone;
    for (int i = 0; i < n; ++i) {
      Engine idle(cfg, *model, std::make_unique<CpuOps>(ActDtype::kBF16, 2), *tok, *tmpl, set);
      alone.push_back(idle.Decide(decision(i), slot_of(i)));
      ASSERT_TRUE(alone.back().ok()) << alone.back().status().ToString();
    }
    Engine engine(cfg, *model, std::make_unique<CpuOps>(ActDtype::kBF16, 2), *tok, *tmpl, set);
    std::vector<std::promise<Result<DecisionResult>>> done(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      ASSERT_TRUE(engine.DecideAsync(decision(i), slot_of(i), [&done, i](Result<DecisionResult> r) {
        done[static_cast<size_t>(i)].set_value(std::move(r));
      }).ok());
    }
    int hits = 0;
    for (int i = 0; i < n; ++i) {
      auto got = done[static_cast<size_t>(i)].get_future().get();
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      hits += got->cached_tokens > 0;
      ExpectSameScores(*got, *alone[static_cast<size_t>(i)], fmt::format("decision {} (slot {})", i, slot_of(i)));
    }
    // Both kinds ran: a run's second shared record hits, every own record misses.
    if (n >= 4) {
      EXPECT_GE(hits, n / 4) << "prefix-cache hits among the shared records";
      EXPECT_LE(hits, n / 2);
    }
    engine.Stop();
  }
}

// Holds the engine thread inside a one-token chat request's last callback until the returned
// function is called: work queued meanwhile is all there when the engine next plans.
std::function<void()> HoldEngine(Engine& engine) {
  auto entered = std::make_shared<std::promise<void>>();
  auto release = std::make_shared<std::promise<void>>();
  GenerationRequest r;
  r.prompt = {1, 2, 3};
  r.max_tokens = 1;
  r.on_event = [entered, gate = release->get_future().share()](const GenEvent& ev) {
    if (ev.kind == GenEvent::Kind::kDelta) return;
    entered->set_value();
    gate.wait();
  };
  EXPECT_TRUE(engine.Submit(std::move(r)).ok());
  entered->get_future().wait();
  return [release] { release->set_value(); };
}

// Each of ds on an idle engine of its own (a cold cache), on the base: the bits each gets alone.
// Empty after a failure (reported).
std::vector<DecisionResult> DecideEachAlone(Wrapper& w, const EngineConfig& cfg, const std::vector<DecisionRequest>& ds) {
  std::vector<DecisionResult> out;
  AdapterSet none;
  for (const auto& d : ds) {
    Engine idle(cfg, *w.model, std::make_unique<CpuOps>(ActDtype::kBF16, 2), *w.tok, *w.tmpl, none);
    Result<DecisionResult> r = idle.Decide(d, 0);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return {};
    out.push_back(std::move(r).value());
  }
  return out;
}

// Every one of ds queued on `engine` at once (the base); their results, in order (one that could
// not be queued: the refusal).
std::vector<std::future<Result<DecisionResult>>> DecideAll(Engine& engine, const std::vector<DecisionRequest>& ds) {
  std::vector<std::future<Result<DecisionResult>>> out;
  for (const auto& d : ds) {
    auto p = std::make_shared<std::promise<Result<DecisionResult>>>();
    out.push_back(p->get_future());
    const Status queued = engine.DecideAsync(d, 0, [p](Result<DecisionResult> r) { p->set_value(std::move(r)); });
    if (!queued.ok()) p->set_value(queued);  // (its callback never runs then)
  }
  return out;
}

// Decisions queued together run together: their records' pieces and their questions share steps
// (all four in one step, with no chunk limit), and each gets the bits it gets alone. Four on one
// record: one computes it, the other three wait for it and continue from the prefix cache, all
// four's questions in one step.
TEST(Engine, DecisionsInProgressShareSteps) {
  Wrapper w;
  ASSERT_NE(w.model, nullptr);
  auto& [model, tok, tmpl] = w;
  AdapterSet none;
  EngineConfig cfg;
  cfg.max_decisions = 4;
  for (const bool shared : {false, true}) {
    SCOPED_TRACE(shared ? "one record" : "four records");
    std::vector<DecisionRequest> ds;
    for (int i = 0; i < 4; ++i) {
      DecisionRequest d = SmallDecision();
      d.record = shared ? std::string("GET /one/record.html 200") : fmt::format("POST /api/{} 500 from 10.0.0.{}", i, i);
      for (int k = 0; k < 20; ++k) d.record += fmt::format(" GET /asset/{}.css 200", k);
      d.questions.push_back({"s", "Status class?", {"2xx", "4xx", "5xx"}});
      ds.push_back(d);
    }
    const std::vector<DecisionResult> alone = DecideEachAlone(w, cfg, ds);
    ASSERT_EQ(alone.size(), ds.size());
    Engine engine(cfg, *model, std::make_unique<CpuOps>(ActDtype::kBF16, 2), *tok, *tmpl, none);
    auto release = HoldEngine(engine);
    std::vector<std::future<Result<DecisionResult>>> done = DecideAll(engine, ds);
    release();
    int cached = 0;
    for (size_t i = 0; i < ds.size(); ++i) {
      auto got = done[i].get();
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      ExpectSameScores(*got, alone[i], fmt::format("decision {}", i));
      if (got->cached_tokens > 0) {
        EXPECT_EQ(got->cached_tokens, got->record_tokens);
        ++cached;
      }
    }
    engine.Stop();
    const EngineStats st = engine.Stats();
    EXPECT_EQ(cached, shared ? 3 : 0) << "the shared record computed once";
    EXPECT_EQ(st.most_step_decisions, 4) << "decisions with rows in one step";
    EXPECT_EQ(st.decision_restarts, 0);
  }
}

// Chat and decisions share one KV pool: each takes the pages the other neither holds nor was
// promised, and work that fits but not now waits for the other to give its room back (never a
// 400, never a preemption of the other kind); both prefix caches give their pages to either. The
// pool: 32 pages of 16 tokens, decisions up to 24 of them.
TEST(Engine, ChatAndDecisionsShareOnePoolAndWaitForEachOthersRoom) {
  Wrapper w;
  ASSERT_NE(w.model, nullptr);
  auto& [model, tok, tmpl] = w;
  AdapterSet none;
  EngineConfig cfg;
  cfg.page_size = 16;
  cfg.kv_token_budget = 512;
  cfg.decision_kv_tokens = 384;
  cfg.max_decisions = 1;
  cfg.decision_prefill_chunk = 64;
  const DecisionRequest d = PagesDecision(5);
  const std::vector<DecisionResult> alone = DecideEachAlone(w, cfg, {d});
  ASSERT_EQ(alone.size(), 1u);
  const int record_pages = (alone[0].record_tokens + 15) / 16;
  ASSERT_GE(record_pages, 8);
  ASSERT_LE(record_pages + DecisionScorer::kQuestionPagesAhead, 24) << "the decision fits its cap";
  auto prompt_of = [](int n) {
    std::vector<int32_t> p;
    while (static_cast<int>(p.size()) < n) {
      const std::vector<int32_t> part = Wrapper::Prompt(40);
      p.insert(p.end(), part.begin(), part.end());
    }
    p.resize(static_cast<size_t>(n));
    return p;
  };
  auto lone_chat = [&](const std::vector<int32_t>& prompt, int max_tokens) {
    Engine idle(cfg, *model, std::make_unique<CpuOps>(ActDtype::kBF16, 2), *tok, *tmpl, none);
    Status st;
    return Generate(idle, prompt, max_tokens, &st).get();
  };
  std::atomic<int> clock{0};
  {
    SCOPED_TRACE("a chat prompt waits for the decision's pages, then for those its record keeps in the cache");
    // Its prompt and first token need 21 pages: more than the decision leaves while it runs, and
    // more than the pool less the record the decisions' prefix cache keeps afterwards.
    const std::vector<int32_t> prompt = prompt_of(32 * 16 - record_pages * 16 + 16);
    const Collected chat_alone = lone_chat(prompt, 8);
    ASSERT_TRUE(chat_alone.error.ok()) << chat_alone.error.ToString();
    Engine engine(cfg, *model, std::make_unique<CpuOps>(ActDtype::kBF16, 2), *tok, *tmpl, none);
    auto release = HoldEngine(engine);
    int decided_at = -1, first_token_at = -1;
    auto decided = std::make_shared<std::promise<Result<DecisionResult>>>();
    ASSERT_TRUE(engine.DecideAsync(d, 0, [&, decided](Result<DecisionResult> r) {
      decided_at = clock++;
      decided->set_value(std::move(r));
    }).ok());
    auto chat_done = std::make_shared<std::promise<Collected>>();
    auto acc = std::make_shared<Collected>();
    GenerationRequest r;
    r.prompt = prompt;
    r.max_tokens = 8;
    r.on_event = [&, chat_done, acc](const GenEvent& ev) {
      if (ev.kind == GenEvent::Kind::kDelta && first_token_at < 0) first_token_at = clock++;
      if (ev.kind == GenEvent::Kind::kDelta) acc->text += ev.text;
      if (ev.kind == GenEvent::Kind::kDone) chat_done->set_value(*acc);
      if (ev.kind == GenEvent::Kind::kError) acc->error = ev.error, chat_done->set_value(*acc);
    };
    ASSERT_TRUE(engine.Submit(std::move(r)).ok());
    release();
    Result<DecisionResult> got = decided->get_future().get();
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ExpectSameScores(*got, alone[0], "the decision beside a waiting chat prompt");
    const Collected chat = chat_done->get_future().get();
    ASSERT_TRUE(chat.error.ok()) << chat.error.ToString();
    EXPECT_EQ(chat.text, chat_alone.text);
    EXPECT_LT(decided_at, first_token_at) << "the chat prompt waited for the decision's room";
    // The record's pages went to the chat prompt: the same decision again computes it afresh.
    auto again = engine.Decide(d, 0);
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ(again->cached_tokens, 0) << "the decisions' prefix cache gave its pages to chat";
    ExpectSameScores(*again, alone[0], "the decision again");
    EXPECT_EQ(engine.Stats().preemptions, 0);
    engine.Stop();
  }
  {
    SCOPED_TRACE("a decision waits for a chat sequence's pages, then takes those its prefix cache keeps");
    // 441 tokens of prompt and first token: 28 pages, 4 left for the decision.
    const std::vector<int32_t> prompt = prompt_of(440);
    const Collected chat_alone = lone_chat(prompt, 40);
    ASSERT_TRUE(chat_alone.error.ok()) << chat_alone.error.ToString();
    Engine engine(cfg, *model, std::make_unique<CpuOps>(ActDtype::kBF16, 2), *tok, *tmpl, none);
    int chat_done_at = -1, decided_at = -1;
    auto chat_done = std::make_shared<std::promise<Collected>>();
    auto started = std::make_shared<std::promise<void>>();
    auto acc = std::make_shared<Collected>();
    GenerationRequest r;
    r.prompt = prompt;
    r.max_tokens = 40;
    r.on_event = [&, chat_done, started, acc](const GenEvent& ev) {
      if (ev.kind == GenEvent::Kind::kDelta && acc->text.empty()) started->set_value();
      if (ev.kind == GenEvent::Kind::kDelta) acc->text += ev.text;
      if (ev.kind == GenEvent::Kind::kDone) chat_done_at = clock++, chat_done->set_value(*acc);
      if (ev.kind == GenEvent::Kind::kError) acc->error = ev.error, chat_done->set_value(*acc);
    };
    ASSERT_TRUE(engine.Submit(std::move(r)).ok());
    started->get_future().wait();
    auto decided = std::make_shared<std::promise<Result<DecisionResult>>>();
    ASSERT_TRUE(engine.DecideAsync(d, 0, [&, decided](Result<DecisionResult> res) {
      decided_at = clock++;
      decided->set_value(std::move(res));
    }).ok());
    Result<DecisionResult> got = decided->get_future().get();
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ExpectSameScores(*got, alone[0], "the decision after the chat sequence");
    const Collected chat = chat_done->get_future().get();
    ASSERT_TRUE(chat.error.ok()) << chat.error.ToString();
    EXPECT_EQ(chat.text, chat_alone.text);
    EXPECT_LT(chat_done_at, decided_at) << "the decision waited for the chat sequence's room";
    const EngineStats st = engine.Stats();
    EXPECT_EQ(st.preemptions, 0);
    EXPECT_EQ(st.decision_restarts, 0);
    EXPECT_EQ(st.kv_decisions, int64_t{record_pages} * 16) << "the record kept in the decisions' prefix cache";
    engine.Stop();
  }
}

// A decision on a record the prefix cache holds needs no room for the record (it is shared as
// it is): with room for one run's pages beside the cached record but not for a second copy, the
// next decision on it continues from the cache rather than evicting it to compute it again.
TEST(Engine, ADecisionOnACachedRecordNeedsNoRoomForTheRecord) {
  Wrapper w;
  ASSERT_NE(w.model, nullptr);
  auto& [model, tok, tmpl] = w;
  AdapterSet none;
  EngineConfig cfg;
  cfg.page_size = 16;
  cfg.max_decisions = 1;
  const DecisionRequest d = PagesDecision(8);
  const std::vector<DecisionResult> alone = DecideEachAlone(w, cfg, {d});
  ASSERT_EQ(alone.size(), 1u);
  const int record_pages = (alone[0].record_tokens + 15) / 16;
  ASSERT_GT(record_pages, 4);
  // Beside the cached record: 12 pages, more than one run's 8, fewer than the record's and 8.
  cfg.decision_kv_tokens = (record_pages + 12) * 16;
  Engine engine(cfg, *model, std::make_unique<CpuOps>(ActDtype::kBF16, 2), *tok, *tmpl, none);
  auto first = engine.Decide(d, 0);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->cached_tokens, 0);
  auto second = engine.Decide(d, 0);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(second->cached_tokens, second->record_tokens) << "continued from the cache";
  ExpectSameScores(*first, alone[0], "the first");
  ExpectSameScores(*second, alone[0], "the second");
  engine.Stop();
}

// Several decisions beside a chat stream share the rows the decode row leaves: a step holds a
// later decision's piece only where it fits what the earlier ones left (a record piece in whole
// 64-token tiles, a question piece only where its first run fits), so no step passes the budget;
// each decision gets the bits it gets alone.
TEST(Engine, DecisionsBesideChatShareTheStepBudget) {
  Wrapper w;
  ASSERT_NE(w.model, nullptr);
  auto& [model, tok, tmpl] = w;
  AdapterSet none;
  EngineConfig cfg;
  cfg.max_step_tokens = 130;  // 128 decision rows beside one decode row
  cfg.max_decisions = 4;
  std::vector<DecisionRequest> ds;
  for (int i = 0; i < 4; ++i) {
    DecisionRequest d = SmallDecision();
    d.record = fmt::format("host 10.1.0.{}:", i);
    for (int k = 0; k < 12 + 5 * i; ++k) d.record += fmt::format(" GET /{}/item/{}.html 200", i, k);
    d.questions.push_back({"s", "Status class?", {"2xx", "4xx", "5xx"}});
    ds.push_back(d);
  }
  const std::vector<DecisionResult> alone = DecideEachAlone(w, cfg, ds);
  ASSERT_EQ(alone.size(), ds.size());
  Engine engine(cfg, *model, std::make_unique<CpuOps>(ActDtype::kBF16, 2), *tok, *tmpl, none);
  std::shared_future<void> finished = StartChatStream(engine, 400);
  engine.ForgetSlowestSteps();
  std::vector<std::future<Result<DecisionResult>>> done = DecideAll(engine, ds);
  for (size_t i = 0; i < ds.size(); ++i) {
    auto got = done[i].get();
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ExpectSameScores(*got, alone[i], fmt::format("decision {} beside chat", i));
  }
  const EngineStats st = engine.Stats();
  finished.wait();
  EXPECT_GE(st.most_step_decisions, 2) << "decisions shared steps beside chat";
  EXPECT_LE(st.largest_step, cfg.max_step_tokens) << "rows in one step, chat and decisions together";
  for (const StepRecord& s : st.slowest_steps) {
    EXPECT_LE(s.decode_rows + s.prompt_rows + s.decision_rows, cfg.max_step_tokens) << "a recorded step within the budget";
  }
  engine.Stop();
}

// A queued decision whose client went away ends kCancelled at once, not when its turn comes:
// behind a long one with one decision at a time, it is answered before anything else.
TEST(Engine, AWaitingDecisionWhoseClientLeftEndsAtOnce) {
  Wrapper w;
  ASSERT_NE(w.model, nullptr);
  auto& [model, tok, tmpl] = w;
  AdapterSet none;
  EngineConfig cfg;
  cfg.max_decisions = 1;
  cfg.decision_prefill_chunk = 64;
  Engine engine(cfg, *model, std::make_unique<CpuOps>(ActDtype::kBF16, 2), *tok, *tmpl, none);
  auto release = HoldEngine(engine);
  std::mutex mu;
  std::vector<int> order;
  std::vector<std::promise<Result<DecisionResult>>> done(3);
  auto gone = std::make_shared<std::atomic<bool>>(false);
  for (int i = 0; i < 3; ++i) {
    const DecisionRequest d = i == 0 ? PagesDecision() : SmallDecision();
    ASSERT_TRUE(engine.DecideAsync(d, 0, [&, i](Result<DecisionResult> r) {
      {
        std::lock_guard<std::mutex> l(mu);
        order.push_back(i);
      }
      done[static_cast<size_t>(i)].set_value(std::move(r));
    }, i == 2 ? gone : nullptr).ok());
  }
  gone->store(true);
  release();
  const auto cancelled = done[2].get_future().get();
  ASSERT_FALSE(cancelled.ok());
  EXPECT_EQ(cancelled.status().code(), StatusCode::kCancelled);
  EXPECT_TRUE(done[0].get_future().get().ok());
  EXPECT_TRUE(done[1].get_future().get().ok());
  std::lock_guard<std::mutex> l(mu);
  ASSERT_EQ(order.size(), 3u);
  EXPECT_EQ(order[0], 2) << "the cancelled one answered first";
}

// A decision pool with room for the records but not for two decisions' long questions at once:
// a newer decision gives its memory back and starts over when there is room (counted in
// decision_restarts), and each gets the bits it gets alone — none fails for want of room that
// waiting gives it.
TEST(Engine, ADecisionShortOfPoolRoomStartsOverLaterWithTheSameBits) {
  Wrapper w;
  ASSERT_NE(w.model, nullptr);
  auto& [model, tok, tmpl] = w;
  AdapterSet none;
  std::string long_question = "Given everything above,";
  for (int k = 0; k < 60; ++k) long_question += fmt::format(" does request {} look like part of a scan", k);
  long_question += "?";
  std::vector<DecisionRequest> ds;
  for (int i = 0; i < 3; ++i) {
    DecisionRequest d;
    d.record = fmt::format("host 10.0.0.{}:", i);
    for (int k = 0; k < 40; ++k) d.record += fmt::format(" GET /{}/page/{}.html 200", i, k);
    d.questions.push_back({"scan", long_question, {"yes", "no"}});
    ds.push_back(d);
  }
  EngineConfig cfg;  // no chunk limit: both records in one step
  const std::vector<DecisionResult> alone = DecideEachAlone(w, cfg, ds);
  ASSERT_EQ(alone.size(), ds.size());
  const int64_t page = cfg.page_size;
  auto pages = [&](int64_t tokens) { return (tokens + page - 1) / page; };
  const int64_t record_pages = std::max(pages(alone[0].record_tokens), pages(alone[1].record_tokens));
  const int64_t run_pages = alone[0].question_tokens / page + 2;
  ASSERT_GT(run_pages, 16 + 1) << "a question longer than the margins (the test's premise)";
  // Two records with their margins, and one run's pages: the second run does not fit.
  cfg.decision_kv_tokens = (2 * (record_pages + DecisionScorer::kQuestionPagesAhead) + run_pages + 1) * page;
  Engine engine(cfg, *model, std::make_unique<CpuOps>(ActDtype::kBF16, 2), *tok, *tmpl, none);
  auto release = HoldEngine(engine);
  std::vector<std::future<Result<DecisionResult>>> done = DecideAll(engine, ds);
  release();
  for (size_t i = 0; i < ds.size(); ++i) {
    auto got = done[i].get();
    ASSERT_TRUE(got.ok()) << "decision " << i << ": " << got.status().ToString();
    ExpectSameScores(*got, alone[i], fmt::format("decision {}", i));
  }
  EXPECT_GE(engine.Stats().decision_restarts, 1);
  EXPECT_GE(engine.Stats().most_step_decisions, 2);
  engine.Stop();
}

// --request-timeout: a generation still running past its deadline ends with kDeadlineExceeded;
// one within it is untouched.
TEST(Engine, ARequestPastItsDeadlineEndsWithDeadlineExceeded) {
  Wrapper w;
  ASSERT_NE(w.model, nullptr);
  auto& [model, tok, tmpl] = w;
  AdapterSet none;
  Engine engine(EngineConfig{}, *model, std::make_unique<CpuOps>(ActDtype::kBF16, 2), *tok, *tmpl, none);
  auto run = [&](std::chrono::milliseconds limit, int max_tokens) {
    GenerationRequest r;
    r.prompt = {1, 2, 3};
    r.max_tokens = max_tokens;
    r.deadline = std::chrono::steady_clock::now() + limit;
    return RunToEnd(engine, std::move(r));
  };
  const Collected cut = run(std::chrono::milliseconds(30), 4000);
  EXPECT_EQ(cut.error.code(), StatusCode::kDeadlineExceeded) << cut.error.ToString() << " finish " << cut.finish;
  EXPECT_NE(cut.error.message().find("--request-timeout"), std::string::npos);
  const Collected fine = run(std::chrono::seconds(60), 4);
  EXPECT_TRUE(fine.error.ok());
  EXPECT_EQ(fine.finish, "length");
}

}  // namespace
}  // namespace graft

namespace graft {
namespace {

// prompt_logprobs (completions' echo): every prompt token's logprob given the tokens before it,
// the first unknown — the log-softmax of the model's own rows, however the prompt is chunked.
TEST(Engine, PromptLogprobsAreTheModelsOverAnyChunking) {
  Wrapper w;
  ASSERT_NE(w.model, nullptr);
  auto& [model, tok, tmpl] = w;
  const std::vector<int32_t> prompt = Wrapper::Prompt(11);
  const int vocab = model->config().vocab_size;
  // The reference: one forward over the whole prompt, every row.
  CpuOps ops(ActDtype::kBF16, 1);
  SequenceState st = model->NewState();
  std::vector<float> logits(prompt.size() * static_cast<size_t>(vocab));
  ASSERT_TRUE(model->Forward(ops, prompt.data(), static_cast<int>(prompt.size()), st, logits.data()).ok());
  AdapterSet none;
  EngineConfig cfg;
  cfg.max_step_tokens = 4;  // the prompt in chunks of 4
  Engine engine(cfg, *model, std::make_unique<CpuOps>(ActDtype::kBF16, 2), *tok, *tmpl, none);
  auto done = std::make_shared<std::promise<void>>();
  std::vector<TokenLogprob> got;
  int events_before_text = 0;
  bool text_seen = false;
  GenerationRequest r;
  r.prompt = prompt;
  r.max_tokens = 2;
  r.top_logprobs = 2;
  r.prompt_logprobs = true;
  r.on_event = [&](const GenEvent& ev) {
    if (ev.kind == GenEvent::Kind::kDelta) {
      if (!ev.prompt_logprobs.empty()) got = ev.prompt_logprobs, events_before_text += !text_seen;
      text_seen = text_seen || !ev.text.empty();
    }
    if (ev.kind != GenEvent::Kind::kDelta) done->set_value();
  };
  ASSERT_TRUE(engine.Submit(std::move(r)).ok());
  done->get_future().get();
  ASSERT_EQ(got.size(), prompt.size());
  EXPECT_EQ(events_before_text, 1);
  EXPECT_FALSE(got[0].known);
  EXPECT_EQ(got[0].token, prompt[0]);
  for (size_t p = 1; p < prompt.size(); ++p) {
    const float* row = logits.data() + (p - 1) * static_cast<size_t>(vocab);
    double mx = row[0], z = 0;
    for (int v = 1; v < vocab; ++v) mx = std::max<double>(mx, row[v]);
    for (int v = 0; v < vocab; ++v) z += std::exp(static_cast<double>(row[v]) - mx);
    EXPECT_TRUE(got[p].known);
    EXPECT_EQ(got[p].token, prompt[p]);
    EXPECT_DOUBLE_EQ(got[p].logprob, row[prompt[p]] - (std::log(z) + mx)) << p;
    EXPECT_EQ(got[p].top.size(), 2u);
  }
}

}  // namespace
}  // namespace graft

namespace graft {
namespace {

// A greedy request of max_tokens run to its end on `slot`.
Collected Greedy(Engine& e, std::vector<int32_t> prompt, int max_tokens, int32_t slot = 0) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.adapter_slot = slot;
  return RunToEnd(e, std::move(r));
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Prefix caching on a model with Gated DeltaNet layers: a conversation's next turn (the first
// turn's prompt and reply, then more) continues from the first turn's cache — all of it but the
// reply's last token, which never ran — and draws the tokens a lone run draws; a prompt that only
// shares a start with an entry, or names another adapter slot, starts fresh (a recurrent state
// cannot be cut back); with the cache off nothing is continued.
TEST(Engine, PrefixCacheContinuesAConversationWithTheSameTokens) {
  Wrapper w;
  ASSERT_NE(w.model, nullptr);
  auto& [model, tok, tmpl] = w;
  auto a = LoadLoraAdapter(test::Fixture("adapters/qwen3_5-wrapper-lora-gdn"), model->config(), {"gdn", false, nullptr});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  AdapterSet set;
  set.slots.push_back(&*a);
  const auto noop = [](std::vector<float>&, const std::vector<int32_t>&) {};
  const std::vector<int32_t> first = Wrapper::Prompt(40);
  const std::vector<int32_t> reply = GreedyLoneRun(*model, first, 6, noop);
  // The next turn: the first prompt, the reply, then more tokens.
  const std::vector<int32_t> next = Concat(Concat(first, reply), {11, 12, 13, 14, 15});
  const std::vector<int32_t> want = GreedyLoneRun(*model, next, 5, noop);
  for (int entries : {32, 0}) {
    SCOPED_TRACE(fmt::format("--prefix-cache-entries {}", entries));
    EngineConfig cfg;
    cfg.prefix_cache_entries = entries;
    Engine engine(cfg, *model, std::make_unique<CpuOps>(ActDtype::kBF16, 2), *tok, *tmpl, set);
    const Collected one = Greedy(engine, first, 6);
    ASSERT_TRUE(one.error.ok()) << one.error.ToString();
    EXPECT_EQ(one.text, TextOf(*tok, reply, reply.size()));
    EXPECT_EQ(one.cached, 0);
    const Collected two = Greedy(engine, next, 5);
    ASSERT_TRUE(two.error.ok()) << two.error.ToString();
    EXPECT_EQ(two.text, TextOf(*tok, want, want.size())) << "the next turn's tokens";
    EXPECT_EQ(two.cached, entries > 0 ? static_cast<int>(first.size() + reply.size()) - 1 : 0);
    // Another adapter slot, and a prompt that leaves the first turn's tokens early: fresh.
    const Collected other = Greedy(engine, next, 5, 1);
    ASSERT_TRUE(other.error.ok()) << other.error.ToString();
    EXPECT_EQ(other.cached, 0) << "an entry serves its own adapter slot only";
    std::vector<int32_t> forked = first;
    forked[20] = forked[20] == 5 ? 6 : 5;
    const Collected apart = Greedy(engine, Concat(forked, {7, 8}), 3);
    ASSERT_TRUE(apart.error.ok()) << apart.error.ToString();
    EXPECT_EQ(apart.cached, 0) << "a recurrent state cannot be cut back to a shared start";
    const EngineStats st = engine.Stats();
    EXPECT_EQ(st.prefix_cache_hits, entries > 0 ? 1 : 0);
    engine.Stop();
  }
}

// A snapshot where a chat's next turn parts (GenerationRequest::snapshot_at): the first turn's
// prefill stops there a step, a copy of its cache goes into the prefix cache, and a next turn that
// shares only those tokens (a chat template re-renders the reply without what followed them)
// continues from it — with the tokens a lone run draws, the first turn's own tokens unchanged. A
// snapshot_at outside the prompt is refused.
TEST(Engine, ASnapshotLetsTheNextTurnContinueWhereItParts) {
  Wrapper w;
  ASSERT_NE(w.model, nullptr);
  auto& [model, tok, tmpl] = w;
  AdapterSet none;
  const auto noop = [](std::vector<float>&, const std::vector<int32_t>&) {};
  const std::vector<int32_t> first = Wrapper::Prompt(40);
  const int part = 33;  // the next turn parts here
  const std::vector<int32_t> reply = GreedyLoneRun(*model, first, 6, noop);
  const std::vector<int32_t> next =
      Concat(std::vector<int32_t>(first.begin(), first.begin() + part), {21, 22, 23, 24, 25, 26, 27});
  const std::vector<int32_t> want = GreedyLoneRun(*model, next, 5, noop);
  for (int entries : {32, 0}) {
    SCOPED_TRACE(fmt::format("--prefix-cache-entries {}", entries));
    EngineConfig cfg;
    cfg.prefix_cache_entries = entries;
    Engine engine(cfg, *model, std::make_unique<CpuOps>(ActDtype::kBF16, 2), *tok, *tmpl, none);
    GenerationRequest r;
    r.prompt = first;
    r.max_tokens = 6;
    r.snapshot_at = part;
    const Collected one = RunToEnd(engine, std::move(r));
    ASSERT_TRUE(one.error.ok()) << one.error.ToString();
    EXPECT_EQ(one.text, TextOf(*tok, reply, reply.size())) << "the first turn's tokens, split at the snapshot";
    const Collected two = Greedy(engine, next, 5);
    ASSERT_TRUE(two.error.ok()) << two.error.ToString();
    EXPECT_EQ(two.text, TextOf(*tok, want, want.size())) << "the next turn's tokens";
    EXPECT_EQ(two.cached, entries > 0 ? part : 0);
    for (int bad : {-1, static_cast<int>(first.size())}) {
      GenerationRequest b;
      b.prompt = first;
      b.snapshot_at = bad;
      b.on_event = [](const GenEvent&) {};
      const Status s = engine.Submit(std::move(b));
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
      EXPECT_NE(s.message().find("snapshot_at"), std::string::npos) << s.message();
    }
    engine.Stop();
  }
}

// On a model without recurrent layers an entry is cut back to the longest start it shares with a
// prompt: a repeated prompt continues from all but its last token, a prompt that shares a start
// from that start — each with the tokens a lone run draws.
TEST(Engine, PrefixCacheCutsAttentionCachesBackToASharedStart) {
  auto model = test::LoadFixtureModel("qwen3-tiny");
  ASSERT_NE(model, nullptr);
  auto tok = Tokenizer::FromFile(test::Fixture("qwen3-tiny/tokenizer.json")).value();
  auto tmpl = ChatTemplate::Load(test::Fixture("qwen3-tiny"), "").value();
  std::vector<int32_t> ids;  // the fixture's longest input
  for (const auto& [name, t] : test::ReadIntTensors(test::Fixture("qwen3-tiny/inputs.safetensors"))) {
    if (t.size() > ids.size()) ids.assign(t.begin(), t.end());
  }
  ASSERT_GE(ids.size(), 30u);
  const auto noop = [](std::vector<float>&, const std::vector<int32_t>&) {};
  const std::vector<int32_t> prompt(ids.begin(), ids.begin() + 30);
  std::vector<int32_t> shared(ids.begin(), ids.begin() + 20);
  shared.insert(shared.end(), {3, 4, 5});
  AdapterSet none;
  Engine engine(EngineConfig{}, *model, std::make_unique<CpuOps>(ActDtype::kBF16, 2), *tok, *tmpl, none);
  const Collected one = Greedy(engine, prompt, 4);
  ASSERT_TRUE(one.error.ok()) << one.error.ToString();
  const Collected again = Greedy(engine, prompt, 4);
  ASSERT_TRUE(again.error.ok()) << again.error.ToString();
  EXPECT_EQ(again.text, one.text);
  EXPECT_EQ(again.cached, 29) << "all but the prompt's last token";
  const Collected part = Greedy(engine, shared, 4);
  ASSERT_TRUE(part.error.ok()) << part.error.ToString();
  EXPECT_EQ(part.cached, 20);
  const auto want = GreedyLoneRun(*model, shared, 4, noop);
  EXPECT_EQ(part.text, TextOf(*tok, want, want.size()));
  engine.Stop();
}

// The cache never costs a request its room: with one state slot and a KV pool of a few pages,
// every entry is evicted as a new sequence needs its slot or pages, and every request completes
// with the tokens it draws on an engine without a cache.
TEST(Engine, PrefixCacheGivesItsRoomBackToNewSequences) {
  Wrapper w;
  ASSERT_NE(w.model, nullptr);
  auto& [model, tok, tmpl] = w;
  AdapterSet none;
  EngineConfig tight;
  tight.max_running = 1;
  tight.kv_token_budget = 96;
  tight.page_size = 16;
  EngineConfig off = tight;
  off.prefix_cache_entries = 0;
  Engine cached(tight, *model, std::make_unique<CpuOps>(ActDtype::kBF16, 2), *tok, *tmpl, none);
  Engine plain(off, *model, std::make_unique<CpuOps>(ActDtype::kBF16, 2), *tok, *tmpl, none);
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> p = Wrapper::Prompt(30 + i);
    p[0] = 100 + i;  // distinct starts: no entry serves another
    const Collected a = Greedy(cached, p, 40);
    const Collected b = Greedy(plain, p, 40);
    ASSERT_TRUE(a.error.ok()) << "request " << i << ": " << a.error.ToString();
    ASSERT_TRUE(b.error.ok()) << b.error.ToString();
    EXPECT_EQ(a.text, b.text) << "request " << i;
  }
  cached.Stop();
  plain.Stop();
}

}  // namespace
}  // namespace graft

// Decisions: probabilities equal the logits path, prefix sharing and the prefix cache change
// no bits, joint mode conditions on earlier answers, and bad requests are named.
#include "engine/decision_scorer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "adapters/lora_loader.h"
#include "backend/cpu/cpu_ops.h"
#include "test_util.h"
#include "tools/decide.h"

namespace graft {
namespace {

using json = nlohmann::json;

struct World {
  std::unique_ptr<Model> model;
  std::shared_ptr<const Tokenizer> tok;
  std::shared_ptr<const ChatTemplate> tmpl;
  LoraAdapter adapter;
  AdapterSet set;
  World() {
    model = test::LoadFixtureModel("qwen3_5-wrapper");
    tok = Tokenizer::FromFile(test::Fixture("qwen3_5-wrapper/tokenizer.json")).value();
    tmpl = ChatTemplate::Load(test::Fixture("qwen3_5-wrapper"), "").value();
    auto a = LoadLoraAdapter(test::Fixture("adapters/qwen3_5-wrapper-lora-gdn"), model->config(), {"gdn", false, nullptr});
    EXPECT_TRUE(a.ok());
    adapter = std::move(a).value();
    set.slots.push_back(&adapter);
  }
};

DecisionRequest Request(bool joint) {
  const json body = json::parse(R"({
    "instructions": "You review access logs.",
    "record": "10.0.0.1 GET /admin?id=1' OR '1'='1 403\n10.0.0.2 GET /index.html 200\n",
    "questions": [
      {"id": "malicious", "question": "Is this request malicious?", "choices": ["yes", "no"]},
      {"id": "category", "question": "Which category?", "choices": ["sqli", "cross site scripting", "none"]},
      {"id": "action", "question": "What now?", "choices": ["block the address", "allow"]}]})");
  auto r = ParseDecisionRequest(body, {});
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  r->joint = joint;
  return r.value();
}

double LogProbAt(const std::vector<float>& logits, int vocab, size_t row, int32_t token) {
  const float* p = logits.data() + row * vocab;
  double mx = *std::max_element(p, p + vocab), z = 0;
  for (int v = 0; v < vocab; ++v) z += std::exp(static_cast<double>(p[v]) - mx);
  return p[token] - mx - std::log(z);
}

TEST(Decisions, ProbabilitiesEqualScoringTheFullSequencesThroughLogits) {
  World w;
  CpuOps ops(ActDtype::kBF16, 2);
  for (bool joint : {false, true}) {
    DecisionScorer scorer(*w.model, ops, *w.tok, *w.tmpl, w.set);
    const DecisionRequest r = Request(joint);
    auto res = scorer.Score(r, 1);
    ASSERT_TRUE(res.ok()) << res.status().ToString();
    const int vocab = w.model->config().vocab_size;
    const auto prefix = scorer.layout().Prefix(r).value();
    std::vector<std::string> answers;
    for (size_t i = 0; i < r.questions.size(); ++i) {
      const auto qt = scorer.layout().Question(r, i, answers).value();
      std::vector<double> lps;
      for (const auto& choice : qt.choices) {
        std::vector<int32_t> seq = prefix;
        seq.insert(seq.end(), qt.rest.begin(), qt.rest.end());
        seq.insert(seq.end(), choice.begin(), choice.end());
        SequenceState st = w.model->NewState();
        std::vector<float> logits(seq.size() * vocab);
        ASSERT_TRUE(w.model->Forward(ops, seq.data(), static_cast<int>(seq.size()), st, logits.data(), 1, &w.set).ok());
        double lp = 0;
        for (size_t j = 0; j < choice.size(); ++j) lp += LogProbAt(logits, vocab, seq.size() - choice.size() - 1 + j, choice[j]);
        lps.push_back(lp);
      }
      double mx = *std::max_element(lps.begin(), lps.end()), z = 0;
      for (double lp : lps) z += std::exp(lp - mx);
      const QuestionResult& q = res->questions[i];
      for (size_t c = 0; c < lps.size(); ++c) {
        EXPECT_NEAR(q.scores[c].logprob, lps[c], 1e-6 * std::max(1.0, std::fabs(lps[c])));
        EXPECT_NEAR(q.scores[c].probability, std::exp(lps[c] - mx) / z, 1e-6);
      }
      answers.push_back(q.choice);
    }
  }
}

TEST(Decisions, PrefixSharingAndThePrefixCacheChangeNoBits) {
  World w;
  CpuOps ops(ActDtype::kBF16, 2);
  DecisionScorer scorer(*w.model, ops, *w.tok, *w.tmpl, w.set);
  const DecisionRequest r = Request(false);
  const auto shared = scorer.Score(r, 1, true).value();
  const auto alone = scorer.Score(r, 1, false).value();
  const auto cached = scorer.Score(r, 1, true).value();
  EXPECT_EQ(shared.cached_tokens, 0);
  EXPECT_EQ(cached.cached_tokens, cached.record_tokens);
  EXPECT_GT(cached.record_tokens, 20);
  for (size_t i = 0; i < r.questions.size(); ++i) {
    for (size_t c = 0; c < r.questions[i].choices.size(); ++c) {
      EXPECT_EQ(shared.questions[i].scores[c].logprob, alone.questions[i].scores[c].logprob);
      EXPECT_EQ(shared.questions[i].scores[c].logprob, cached.questions[i].scores[c].logprob);
    }
  }
  // The base (slot 0) is cached separately from the adapter: other numbers.
  const auto base = scorer.Score(r, 0, true).value();
  EXPECT_EQ(base.cached_tokens, 0);
  EXPECT_NE(base.questions[0].scores[0].logprob, shared.questions[0].scores[0].logprob);
}

// The record prefilled in pieces (so a hung-up decision can stop between them) gives the same
// bits as at once; a cancelled decision stops with kCancelled.
TEST(Decisions, PrefillPiecesChangeNoBitsAndCancellationStops) {
  World w;
  CpuOps ops(ActDtype::kBF16, 2);
  const DecisionRequest r = Request(false);
  DecisionScorer whole(*w.model, ops, *w.tok, *w.tmpl, w.set, nullptr, 0);
  const auto a = whole.Score(r, 1).value();
  ASSERT_GT(a.record_tokens, 20);
  for (int piece : {1, 7, 16}) {
    DecisionScorer pieces(*w.model, ops, *w.tok, *w.tmpl, w.set, nullptr, 0);
    pieces.set_prefill_chunk(piece);
    const auto b = pieces.Score(r, 1).value();
    for (size_t i = 0; i < r.questions.size(); ++i) {
      for (size_t c = 0; c < r.questions[i].choices.size(); ++c) {
        EXPECT_EQ(a.questions[i].scores[c].logprob, b.questions[i].scores[c].logprob) << piece;
      }
    }
  }
  std::atomic<bool> cancelled{true};
  const auto gone = whole.Score(r, 1, true, &cancelled);
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.status().code(), StatusCode::kCancelled);
}

// Independent questions run together: each question's tokens on a fork of the record, one fork
// per multi-token choice with that choice's tokens but the last after them (a run), as many runs
// a piece as the pool's free state slots hold. With room for all, one piece after the record; in
// a pool of three slots (the record's state holds one) two runs a piece; in 64-row pieces as many
// runs as fit (at least one a piece) — and every way the bits of the questions run one by one
// from scratch.
TEST(Decisions, QuestionsRunTogetherAsThePoolAllowsWithTheSameBits) {
  World w;
  CpuOps ops(ActDtype::kBF16, 2);
  const DecisionRequest r = Request(false);
  DecisionScorer lone(*w.model, ops, *w.tok, *w.tmpl, w.set, nullptr, 0);
  const auto want = lone.Score(r, 1, false).value();
  auto pieces_of = [&](KvPool* pool, int chunk = 0) {
    DecisionScorer scorer(*w.model, ops, *w.tok, *w.tmpl, w.set, pool, 0);
    scorer.set_prefill_chunk(chunk);
    auto t = scorer.Begin(r, 1).value();
    bool done = false;
    while (!done) {
      auto step = scorer.Advance(t);
      EXPECT_TRUE(step.ok()) << step.status().ToString();
      if (!step.ok()) return -1;
      done = *step;
    }
    for (size_t i = 0; i < r.questions.size(); ++i) {
      for (size_t c = 0; c < r.questions[i].choices.size(); ++c) {
        EXPECT_EQ(t.result.questions[i].scores[c].logprob, want.questions[i].scores[c].logprob) << i << " " << c;
      }
    }
    return t.pieces;
  };
  EXPECT_EQ(pieces_of(nullptr), 2) << "the record, then every question with its choices' rows";
  // The runs: a question's multi-token choices, or the question alone.
  int runs = 0;
  int64_t longest = 0, total = 0;
  for (size_t i = 0; i < r.questions.size(); ++i) {
    const auto qt = lone.layout().Question(r, i, {}).value();
    const int multi = static_cast<int>(std::count_if(qt.choices.begin(), qt.choices.end(), [](const auto& c) { return c.size() > 1; }));
    runs += std::max(multi, 1);
    for (const auto& c : qt.choices) {
      const int64_t n = static_cast<int64_t>(qt.rest.size() + c.size()) - 1;
      if (c.size() > 1) longest = std::max(longest, n), total += n;
    }
    if (multi == 0) longest = std::max<int64_t>(longest, static_cast<int64_t>(qt.rest.size())), total += static_cast<int64_t>(qt.rest.size());
  }
  ASSERT_GT(runs, static_cast<int>(r.questions.size()) + 1) << "a question with two multi-token choices";
  auto pool = w.model->NewPool(16, 256, 3, /*growable=*/false);
  EXPECT_EQ(pieces_of(pool.get()), 1 + (runs + 1) / 2) << "the record, then two runs a piece";
  // Pieces of 64 rows: the runs in pieces of up to 64 rows, at least one a piece.
  const int64_t record = lone.Begin(r, 1).value().prefix.size();
  ASSERT_GT(total, 64) << "the request's runs must overflow one 64-row piece for this to test anything";
  const int record_pieces = static_cast<int>((record + 63) / 64);
  const int question_pieces = pieces_of(nullptr, 64) - record_pieces;
  EXPECT_GE(question_pieces, 2) << "runs of " << total << " rows (longest " << longest << ")";
  EXPECT_LE(question_pieces, runs) << "at least a run a piece";
}

TEST(Decisions, JointConditionsLaterQuestionsOnEarlierAnswers) {
  World w;
  CpuOps ops(ActDtype::kBF16, 2);
  DecisionScorer scorer(*w.model, ops, *w.tok, *w.tmpl, w.set);
  const DecisionRequest joint = Request(true), independent = Request(false);
  const auto a = scorer.layout().Question(joint, 1, {"yes"}).value();
  const auto b = scorer.layout().Question(joint, 1, {"no"}).value();
  EXPECT_NE(a.rest, b.rest);  // the earlier answer is part of the later question's prompt
  const std::string text = w.tok->Decode(a.rest);
  EXPECT_NE(text.find("Is this request malicious?"), std::string::npos);
  EXPECT_NE(text.find("yes<|im_end|>"), std::string::npos) << text;
  EXPECT_EQ(scorer.layout().Question(independent, 1, {}).value().rest,
            scorer.layout().Question(independent, 1, {"yes"}).value().rest);
  const auto rj = scorer.Score(joint, 1).value();
  const auto ri = scorer.Score(independent, 1).value();
  EXPECT_EQ(rj.questions[0].scores[0].logprob, ri.questions[0].scores[0].logprob);  // the first question is the same
  EXPECT_NE(rj.questions[1].scores[0].logprob, ri.questions[1].scores[0].logprob);
}

TEST(Decisions, BadRequestsAreNamed) {
  struct Case {
    std::string body, expect;
  };
  const std::vector<Case> cases = {
      {"[1]", "must be a JSON object"},
      {R"({"questions": [{"id": "a", "question": "q", "choices": ["x", "y"]}]})", "missing required field 'record'"},
      {R"({"record": 5, "questions": []})", "'record' must be a string"},
      {R"({"record": "r", "questions": []})", "'questions' is empty"},
      {R"({"record": "r"})", "'questions' must be an array"},
      {R"({"record": "r", "questions": [{"id": "a", "question": "q", "choices": ["x"]}]})", "needs at least 2 choices, got 1"},
      {R"({"record": "r", "questions": [{"id": "a", "question": "q", "choices": ["x", ""]}]})", "questions[0].choices[1] is empty"},
      {R"({"record": "r", "questions": [{"id": "a", "question": "q", "choices": ["x", "x"]}]})", "duplicate choice 'x'"},
      {R"({"record": "r", "questions": [{"id": "a", "question": "q", "choices": ["x", 3]}]})", "choices[1] must be a string"},
      {R"({"record": "r", "questions": [{"id": "a", "question": "q", "choices": ["x", "y"]}, {"id": "a", "question": "q", "choices": ["x", "y"]}]})",
       "questions[1].id: duplicate question id 'a'"},
      {R"({"record": "r", "questions": [{"question": "q", "choices": ["x", "y"]}]})", "questions[0]: missing required field 'id'"},
      {R"({"record": "r", "joint": "yes", "questions": [{"id": "a", "question": "q", "choices": ["x", "y"]}]})", "'joint' must be true or false"},
      {R"({"record": "r", "mode": "fast", "questions": [{"id": "a", "question": "q", "choices": ["x", "y"]}]})",
       "'mode' must be \"lora\" or \"exact\", not \"fast\""},
      {R"({"record": "r", "mode": 1, "questions": [{"id": "a", "question": "q", "choices": ["x", "y"]}]})", "'mode' must be a string"},
  };
  for (const auto& c : cases) {
    auto r = ParseDecisionRequest(json::parse(c.body), {});
    ASSERT_FALSE(r.ok()) << c.body;
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << c.body << " -> " << r.status().ToString();
  }
  DecisionLimits small;
  small.max_questions = 1;
  auto r = ParseDecisionRequest(json::parse(R"({"record": "r", "questions": [{"id": "a", "question": "q", "choices": ["x", "y"]},
    {"id": "b", "question": "q", "choices": ["x", "y"]}]})"), small);
  EXPECT_NE(r.status().message().find("2 questions; the limit is 1"), std::string::npos);
}

TEST(Decisions, DecideJobAnswersLineForLine) {
  World w;
  CpuOps ops(ActDtype::kBF16, 2);
  DecisionScorer scorer(*w.model, ops, *w.tok, *w.tmpl, w.set);
  test::TempDir d;
  test::WriteText(d.File("in.jsonl"),
                  "{\"record\": \"r\", \"questions\": [{\"id\": \"a\", \"question\": \"q\", \"choices\": [\"x\", \"y\"]}]}\n"
                  "garbage\n"
                  "{\"record\": \"a much longer record than the first one\", \"questions\": [{\"id\": \"z\", \"question\": \"q?\", \"choices\": [\"one\", \"two\"]}]}\n");
  DecideJob job{d.File("in.jsonl"), d.File("out.jsonl"), "gdn", AdapterSlots{1, -1, false}, "", {}};
  auto rep = RunDecide(scorer, job);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->lines, 3);
  EXPECT_EQ(rep->failed, 1);
  std::vector<json> out;
  std::istringstream in(test::ReadText(d.File("out.jsonl")));
  std::string line;
  while (std::getline(in, line)) out.push_back(json::parse(line));
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0]["decisions"][0]["id"], "a");
  EXPECT_EQ(out[0]["model"], "gdn");
  EXPECT_NEAR(out[0]["decisions"][0]["probabilities"]["x"].get<double>() + out[0]["decisions"][0]["probabilities"]["y"].get<double>(), 1.0, 1e-12);
  EXPECT_NE(out[1]["error"]["message"].get<std::string>().find("line 2: the line is not valid JSON"), std::string::npos);
  EXPECT_EQ(out[2]["decisions"][0]["id"], "z");
}

TEST(Decision, ANonFiniteLogitIsAnErrorNotANullProbability) {
  std::vector<float> row = {1.0f, 2.0f, 0.5f, -1.0f};
  auto ok = ChoiceLogProb(row.data(), 4, 1, "q");
  ASSERT_TRUE(ok.ok());
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(0.5) + std::exp(-1.0);
  EXPECT_NEAR(*ok, 2.0 - std::log(z), 1e-12);
  for (float bad : {std::nanf(""), INFINITY, -INFINITY}) {
    row[3] = bad;  // not the chosen token's: any non-finite entry spoils the normaliser
    auto r = ChoiceLogProb(row.data(), 4, 1, "question 'm', choice 'yes'");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInternal);
    EXPECT_NE(r.status().message().find("question 'm', choice 'yes': the model's logit for token 3 is"), std::string::npos)
        << r.status().message();
  }
}

TEST(Decision, RowsNormalisedOnThreadsAreEachRowsBitsAndNameTheBadRow) {
  const int vocab = 1000, n = 7;
  std::vector<float> rows(static_cast<size_t>(vocab) * n);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)) * 9.0);
  std::vector<const float*> ptrs;
  for (int r = 0; r < n; ++r) ptrs.push_back(rows.data() + static_cast<size_t>(r) * vocab);
  auto name = [](size_t i) { return "row " + std::to_string(i); };
  for (int threads : {1, 3, 16}) {
    auto got = LogSoftmaxOfRows(ptrs, vocab, threads, name);
    ASSERT_TRUE(got.ok()) << got.status().message();
    ASSERT_EQ(got->size(), static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
      auto one = LogSoftmaxOf(ptrs[static_cast<size_t>(r)], vocab, "x");
      ASSERT_TRUE(one.ok());
      for (int32_t tok : {0, 17, vocab - 1}) EXPECT_EQ((*got)[static_cast<size_t>(r)].LogProb(tok), one->LogProb(tok));
    }
  }
  rows[5 * static_cast<size_t>(vocab) + 3] = std::nanf("");
  auto bad = LogSoftmaxOfRows(ptrs, vocab, 4, name);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("row 5: the model's logit for token 3 is NaN"), std::string::npos)
      << bad.status().message();
}

}  // namespace
}  // namespace graft

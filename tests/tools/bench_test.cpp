// graft bench's measurement loop on the CPU backend: every row it promises, sane numbers, and
// the dummy adapter (issue 9's workload shape) loaded and changing what it should.
#include "tools/bench.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "adapters/dummy.h"
#include "adapters/lora_loader.h"
#include "engine/decision_scorer.h"
#include "engine/engine.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "backend/cpu/cpu_ops.h"
#include "model/projections.h"
#include "test_util.h"

namespace graft {
namespace {

std::string Repo(const std::string& rel) { return test::FixturesDir() + "/../" + rel; }

TEST(Bench, MeasuresPrefillAndDecodeWithAndWithoutTheAdapter) {
  auto model = LoadDummyModel(test::Fixture("qwen3_5-wrapper"), 3, 2);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const ModelConfig& c = (*model)->config();
  LoraAdapter ad = DummyAdapter(c, 8, 2, /*bf16=*/false, 5);
  int want_modules = 0;
  for (int l = c.num_layers - 2; l < c.num_layers; ++l) {
    want_modules += static_cast<int>(LayerProjections(c, c.layer_kinds[static_cast<size_t>(l)]).size());
  }
  EXPECT_EQ(ad.num_modules(), want_modules) << "every projection of the upper layers";
  EXPECT_EQ(ad.min_rank(), 8);
  AdapterSet set;
  set.slots.push_back(&ad);
  CpuOps ops(ActDtype::kBF16, 2);
  // The adapter changes the logits of the rows that select it, and only those.
  const std::vector<int32_t> ids = {5, 6, 7, 8};
  std::vector<float> base(4 * static_cast<size_t>(c.vocab_size)), with(base.size());
  SequenceState s0 = (*model)->NewState(), s1 = (*model)->NewState();
  ASSERT_TRUE((*model)->Forward(ops, ids.data(), 4, s0, base.data(), 0, &set).ok());
  ASSERT_TRUE((*model)->Forward(ops, ids.data(), 4, s1, with.data(), 1, &set).ok());
  EXPECT_NE(base, with);
  BenchJob job;
  job.prefill_lengths = {16, 48};
  job.decode_batches = {1, 3};
  job.decode_steps = 3;
  job.repeats = 1;
  auto rep = RunBench(**model, ops, set, job);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  ASSERT_EQ(rep->rows.size(), 8u);
  for (const BenchRow& r : rep->rows) {
    EXPECT_GT(r.seconds, 0) << r.kind << " " << r.tokens;
    EXPECT_GT(r.tokens_per_s, 0);
    EXPECT_GT(r.share, 0);
    if (r.kind == "prefill") {
      EXPECT_GT(r.tflops, 0);
    }
  }
  EXPECT_EQ(rep->rows[0].adapter, "");
  EXPECT_EQ(rep->rows[4].adapter, ad.name);
  EXPECT_NE(rep->Table().find("decode"), std::string::npos);
  EXPECT_NE(rep->Json("m", "cpu").find("\"tokens_per_s\""), std::string::npos);
}

// A dummy adapter with a synthetic exact representation (issue 11's workload): its residual
// touches about the asked share of each projection, and the bench measures it in both modes.
TEST(Bench, DummyExactAdapterIsMeasuredInBothModes) {
  auto model = LoadDummyModel(test::Fixture("qwen3_5-wrapper"), 3, 2);
  ASSERT_TRUE(model.ok());
  const ModelConfig& c = (*model)->config();
  LoraAdapter ad = DummyAdapter(c, 4, 2, /*bf16=*/false, 5);
  AddDummyExact(ad, 0.02, 9);
  ASSERT_TRUE(ad.has_exact);
  int64_t values = 0, elements = 0;
  for (const auto& l : ad.layers)
    for (const auto& t : l.targets)
      for (const LoraModule& m : t) values += m.exact->values(), elements += m.b.rows * m.a.cols;
  EXPECT_NEAR(static_cast<double>(values) / static_cast<double>(elements), 0.02, 0.004);
  AdapterSet set;
  const int32_t lora = set.Add(&ad, false), exact = set.Add(&ad, true);
  CpuOps ops(ActDtype::kBF16, 2);
  const std::vector<int32_t> ids = {5, 6, 7, 8};
  std::vector<std::vector<float>> out(3, std::vector<float>(4 * static_cast<size_t>(c.vocab_size)));
  for (int32_t slot : {0, lora, exact}) {
    SequenceState st = (*model)->NewState();
    ASSERT_TRUE((*model)->Forward(ops, ids.data(), 4, st, out[static_cast<size_t>(slot)].data(), slot, &set).ok());
  }
  EXPECT_NE(out[0], out[2]);
  EXPECT_NE(out[1], out[2]);
  BenchJob job;
  job.prefill_lengths = {16};
  job.decode_batches = {1};
  job.decode_steps = 2;
  job.repeats = 1;
  auto rep = RunBench(**model, ops, set, job);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  ASSERT_EQ(rep->rows.size(), 6u);
  EXPECT_EQ(rep->rows[2].adapter, ad.name);
  EXPECT_EQ(rep->rows[4].adapter, ad.name + " [exact]");
  EXPECT_EQ(rep->rows[4].kind, "prefill");
  EXPECT_GT(rep->rows[4].seconds, 0);
}

// Decision latency by record bucket on the demo models: every request counted once per slot,
// in the bucket of its record's length, with p50 <= p95.
TEST(Bench, DecisionLatencyByRecordBucket) {
  auto model = LoadModel(Repo("models/base"));
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto ad = LoadLoraAdapter(Repo("models/release-lora"), (*model)->config(), {"release", false, nullptr});
  ASSERT_TRUE(ad.ok()) << ad.status().ToString();
  AdapterSet set;
  set.slots.push_back(&*ad);
  auto tok = Tokenizer::FromFile(Repo("models/base/tokenizer.json"));
  auto tmpl = ChatTemplate::Load(Repo("models/base"), "");
  ASSERT_TRUE(tok.ok() && tmpl.ok());
  std::ifstream in(Repo("fixtures/demo-gate/requests.jsonl"));
  std::vector<DecisionRequest> reqs;
  std::string line;
  while (reqs.size() < 3 && std::getline(in, line)) {
    auto r = ParseDecisionRequest(nlohmann::json::parse(line), DecisionLimits{});
    ASSERT_TRUE(r.ok());
    reqs.push_back(std::move(r).value());
  }
  CpuOps ops(ActDtype::kBF16, 2);
  DecisionScorer scorer(**model, ops, **tok, **tmpl, set);
  auto rows = RunDecisionBench(scorer, reqs, set, **model, ops);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  int base = 0, adapter = 0;
  for (const DecisionLatency& r : *rows) {
    (r.adapter.empty() ? base : adapter) += r.count;
    EXPECT_LE(r.p50, r.p95);
    EXPECT_GT(r.p50, 0);
    EXPECT_EQ(r.bucket, r.mean_record_tokens <= 1000 ? "<=1K" : r.mean_record_tokens <= 4000 ? "1K-4K" : "4K-10K");
    EXPECT_GT(r.prefill_p50, 0);
    EXPECT_GT(r.ratio_p50, 0.5) << "a decision prefills its record and more: not much less than the record alone";
    // The questions' phases (medians of each): the forward pass is there, and no phase is longer
    // than the questions' whole time can be.
    EXPECT_GT(r.questions_times.forward, 0);
    for (double phase : {r.questions_times.plan, r.questions_times.forward, r.questions_times.finish}) {
      EXPECT_GE(phase, 0);
      EXPECT_LE(phase, r.p95);
    }
  }
  EXPECT_EQ(base, 3);
  EXPECT_EQ(adapter, 3);
  BenchReport rep;
  rep.decisions = *rows;
  // Through the engine: concurrent copies of a decision equal it alone; chat streams all finish.
  Engine engine(EngineConfig{}, **model, std::make_unique<CpuOps>(ActDtype::kBF16, 2), **tok, **tmpl, set);
  auto dc = RunDecisionConcurrency(engine, reqs, 1, 4);  // the three requests, the first twice
  ASSERT_TRUE(dc.ok()) << dc.status().ToString();
  EXPECT_EQ(dc->n, 4);
  EXPECT_EQ(dc->unequal, 0);
  EXPECT_EQ(dc->failed, 0);
  EXPECT_GT(dc->alone_seconds, 0);
  EXPECT_GT(dc->seconds, 0);
  auto cs = RunChatStreams(engine, {5, 6, 7, 8, 9}, 3, 4);
  ASSERT_TRUE(cs.ok()) << cs.status().ToString();
  EXPECT_EQ(cs->streams, 3);
  EXPECT_EQ(cs->decisions, 0);
  EXPECT_GT(cs->tokens, 0);
  EXPECT_LE(cs->tokens, 12);
  EXPECT_GT(cs->tokens_per_s, 0);
  EXPECT_LE(cs->gap_p50, cs->gap_p99);
  auto beside = RunChatStreams(engine, {5, 6, 7, 8, 9}, 2, 4, reqs, 2, 1);
  ASSERT_TRUE(beside.ok()) << beside.status().ToString();
  EXPECT_EQ(beside->decisions, 2);
  EXPECT_GT(beside->tokens, 0);
  EXPECT_FALSE(RunChatStreams(engine, {5, 6}, 1, 2, {}, 1, 0).ok()) << "decisions beside with no requests";
  EXPECT_FALSE(RunDecisionConcurrency(engine, {}, 0, 2).ok()) << "no requests";
  engine.Stop();
  rep.concurrency.push_back(*dc);
  rep.chat.push_back(*cs);
  rep.chat.push_back(*beside);
  const std::string table = rep.Table(), json = rep.Json("m", "cpu");
  EXPECT_NE(table.find("p95"), std::string::npos);
  EXPECT_NE(table.find("x prefill"), std::string::npos);
  EXPECT_NE(table.find("0 unequal"), std::string::npos);
  EXPECT_NE(table.find("gap p99 ms"), std::string::npos);
  EXPECT_NE(table.find("forward ms"), std::string::npos) << "the questions' phases";
  for (const char* key : {"\"ratio_p50\"", "\"alone_seconds\"", "\"gap_p99\"", "\"questions_score_p50\""}) {
    EXPECT_NE(json.find(key), std::string::npos) << key;
  }
  for (const char* key : {"\"decisions\"", "\"concurrency\"", "\"chat\""}) EXPECT_NE(json.find(key), std::string::npos) << key;
}

// Mixed adapters: three dummy adapters, a prefill step of one sequence each and a decode batch
// spread over them, each timed against the same step on the first alone; more asked for than the
// set holds is refused.
TEST(Bench, MixedAdaptersAreTimedAgainstOne) {
  auto model = LoadModel(Repo("models/base"));
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  std::vector<LoraAdapter> ads;
  for (uint64_t seed : {1u, 2u, 3u}) {
    ads.push_back(DummyAdapter((*model)->config(), 4, 2, false, seed));
    ads.back().name += "-" + std::to_string(seed);
  }
  AdapterSet set;
  for (const LoraAdapter& a : ads) set.Add(&a, false);
  CpuOps ops(ActDtype::kBF16, 2);
  BenchJob job;
  job.prefill_lengths = {30};
  job.decode_batches = {2, 3};  // 2 < 3 adapters: no mixed decode row for it
  job.decode_steps = 2;
  job.repeats = 1;
  job.mixed_adapters = 3;
  auto rep = RunBench(**model, ops, set, job);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  ASSERT_EQ(rep->mixed.size(), 2u);
  EXPECT_EQ(rep->mixed[0].kind, "prefill");
  EXPECT_EQ(rep->mixed[0].tokens, 30);
  EXPECT_EQ(rep->mixed[1].kind, "decode");
  EXPECT_EQ(rep->mixed[1].tokens, 3);
  for (const MixedAdapters& m : rep->mixed) {
    EXPECT_EQ(m.adapters, 3);
    EXPECT_GT(m.one, 0);
    EXPECT_GT(m.spread, 0);
  }
  int adapter_rows = 0;  // the per-slot rows: the base and the first adapter only
  for (const BenchRow& r : rep->rows) adapter_rows += r.adapter == ads[1].name;
  EXPECT_EQ(adapter_rows, 0);
  EXPECT_NE(rep->Table().find("mixed adapters, decode 3: a step on 3 adapters"), std::string::npos) << rep->Table();
  EXPECT_NE(rep->Json("m", "cpu").find("\"mixed_adapters\""), std::string::npos);
  job.mixed_adapters = 4;
  EXPECT_EQ(RunBench(**model, ops, set, job).status().code(), StatusCode::kInvalidArgument);
}

// What serve's turn snapshots cost and save, on the bundled Qwen3.5 model: both first tokens and
// both next turns timed, and the continued next turn reporting the first turn's part as cached
// (the recomputed one has nothing to continue from). A bad shape is refused.
TEST(Bench, TurnSnapshotCostTimesBothTurnsBothWays) {
  auto model = LoadModel(Repo("models/base"));
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto tok = Tokenizer::FromFile(Repo("models/base/tokenizer.json"));
  auto tmpl = ChatTemplate::Load(Repo("models/base"), "");
  ASSERT_TRUE(tok.ok() && tmpl.ok());
  AdapterSet none;
  Engine engine(EngineConfig{}, **model, std::make_unique<CpuOps>(ActDtype::kBF16, 2), **tok, **tmpl, none);
  auto tc = RunTurnSnapshotCost(engine, (*tok)->vocab_size(), 40, 8, 1);
  ASSERT_TRUE(tc.ok()) << tc.status().ToString();
  EXPECT_EQ(tc->prompt_tokens, 40);
  EXPECT_EQ(tc->cached_tokens, 40 - TurnSnapshotCost::kTurnPartFromEnd) << "the next turn continues where it parts";
  for (double t : {tc->first_plain, tc->first_snapshot, tc->next_recomputed, tc->next_continued}) EXPECT_GT(t, 0);
  BenchReport rep;
  rep.turns.push_back(*tc);
  EXPECT_NE(rep.Table().find("turn snapshots, a 40-token chat prompt"), std::string::npos) << rep.Table();
  EXPECT_NE(rep.Json("m", "cpu").find("\"next_continued\""), std::string::npos);
  auto bad = RunTurnSnapshotCost(engine, (*tok)->vocab_size(), TurnSnapshotCost::kTurnPartFromEnd, 8, 1);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  engine.Stop();
}

}  // namespace
}  // namespace graft

#include "tools/bench.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <future>
#include <random>

#include "engine/decision_scorer.h"
#include "util/progress.h"

namespace graft {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int64_t Elements(const Weight& w) { return w.rows * w.cols; }

// Parameters of the projections a token runs through (not the embedding gather, not the head).
int64_t ProjectionParams(const ModelWeights& w) {
  int64_t n = 0;
  for (const LayerWeights& l : w.layers) {
    for (const Weight* x : {&l.attn.qkv, &l.attn.o, &l.gdn.in_proj, &l.gdn.out, &l.gate_up, &l.down}) n += Elements(*x);
  }
  return n;
}

int64_t AdapterParams(const LoraAdapter* a) {
  int64_t n = 0;
  if (!a) return 0;
  for (const LoraLayer& l : a->layers) {
    for (const auto& mods : l.targets) {
      for (const LoraModule& m : mods) n += Elements(m.a) + Elements(m.b);
    }
  }
  return n;
}

double PrefillFlops(const Model& m, const LoraAdapter* a, int L) {
  const ModelConfig& c = m.config();
  double f = 2.0 * static_cast<double>(ProjectionParams(m.weights()) + AdapterParams(a)) * L;
  f += 2.0 * static_cast<double>(Elements(m.weights().head()));  // one logit row
  f += 2.0 * c.num_heads * c.head_dim * static_cast<double>(L) * L * c.num_layers_of(LayerKind::kFullAttention);
  f += 4.0 * c.linear_num_value_heads * c.linear_key_head_dim * c.linear_value_head_dim * static_cast<double>(L) *
       c.num_layers_of(LayerKind::kLinearAttention);
  return f;
}

int64_t StepWeightBytes(const Model& m, const LoraAdapter* a) {
  const ModelWeights& w = m.weights();
  int64_t b = w.head().bytes();
  for (const LayerWeights& l : w.layers) {
    for (const Weight* x : {&l.attn.qkv, &l.attn.o, &l.gdn.in_proj, &l.gdn.out, &l.gdn.conv, &l.gate_up, &l.down}) {
      b += x->bytes();
    }
  }
  if (a) b += a->bytes();
  return b;
}

// The slots a bench measures: the base, then every adapter slot (LoRA and exact) in order.
std::vector<int32_t> BenchSlots(const AdapterSet& set) {
  std::vector<int32_t> slots{0};
  for (size_t s = 1; s < set.slots.size(); ++s) {
    if (set.slots[s]) slots.push_back(static_cast<int32_t>(s));
  }
  return slots;
}

// How a slot is named in the table: "" (base), the adapter's name, "+ [exact]" for exact mode.
std::string SlotName(const AdapterSet& set, int32_t slot) {
  if (slot == 0) return "";
  return set.slots[static_cast<size_t>(slot)]->name + (set.is_exact(static_cast<size_t>(slot)) ? " [exact]" : "");
}

std::vector<int32_t> RandomIds(std::mt19937_64& rng, int n, int vocab) {
  std::uniform_int_distribution<int32_t> d(0, vocab - 1);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

// The mixed-adapter pair of (kind, tokens): its one-adapter time first, then the spread one.
void AddMixed(BenchReport& rep, const std::string& kind, int adapters, int tokens, bool spread, double seconds) {
  for (MixedAdapters& m : rep.mixed) {
    if (m.kind == kind && m.tokens == tokens) {
      (spread ? m.spread : m.one) = seconds;
      return;
    }
  }
  MixedAdapters m{kind, adapters, tokens};
  (spread ? m.spread : m.one) = seconds;
  rep.mixed.push_back(m);
}

// A decode batch of B sequences (row i on slot_of(i)) after their random prompts: the median
// time of its steps after the first (which warms up and captures a graph).
Result<double> TimeDecodeSteps(const Model& model, Ops& ops, const AdapterSet& adapters, const BenchJob& job, int B,
                               const std::function<int32_t(int)>& slot_of, std::mt19937_64& rng,
                               const StepRunner& run_step) {
  const int vocab = model.config().vocab_size;
  std::vector<SequenceState> states;
  StepBatch prefill;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < B; ++i) {
    GRAFT_ASSIGN_OR_RETURN(SequenceState st, model.NewState(ops));
    states.push_back(std::move(st));
    prompts.push_back(RandomIds(rng, job.decode_prompt, vocab));
  }
  for (int i = 0; i < B; ++i) {
    prefill.Add(&states[static_cast<size_t>(i)], prompts[static_cast<size_t>(i)].data(), job.decode_prompt, slot_of(i));
  }
  prefill.logits = LogitRows::None();
  GRAFT_RETURN_IF_ERROR(model.Forward(ops, prefill, adapters, nullptr).WithContext("decode prompts"));
  std::vector<double> times;
  std::vector<float> logits(static_cast<size_t>(B) * vocab);
  for (int s = 0; s < job.decode_steps; ++s) {
    const auto toks = RandomIds(rng, B, vocab);
    StepBatch step;
    std::vector<int32_t> rows;
    for (int i = 0; i < B; ++i) {
      step.Add(&states[static_cast<size_t>(i)], &toks[static_cast<size_t>(i)], 1, slot_of(i));
      rows.push_back(i);
    }
    step.logits = LogitRows::Only(rows);
    const double t0 = Now();
    GRAFT_RETURN_IF_ERROR((run_step ? run_step(step, adapters, logits.data(), nullptr)
                                    : model.Forward(ops, step, adapters, logits.data()))
                              .WithContext(fmt::format("decode step of batch {}", B)));
    if (s > 0) times.push_back(Now() - t0);  // step 0 warms up (and captures a graph)
  }
  return Median(times);
}

}  // namespace

Result<BenchReport> RunBench(const Model& model, Ops& ops, const AdapterSet& adapters, const BenchJob& job,
                             const StepRunner& run_step) {
  const int vocab = model.config().vocab_size;
  std::mt19937_64 rng(job.seed);
  BenchReport rep;
  std::vector<int32_t> slots = BenchSlots(adapters);
  const int mixed = job.mixed_adapters;
  if (mixed > 1) {
    if (static_cast<int>(adapters.slots.size()) <= mixed) {
      return InvalidArgument(fmt::format("mixed adapters: {} asked for, {} in the set", mixed, adapters.slots.size() - 1));
    }
    slots = {0, 1};
  }
  const uint64_t units = slots.size() * (job.prefill_lengths.size() * (job.repeats + 1) + job.decode_batches.size());
  Progress bar("bench", units, /*bytes=*/false);
  for (int32_t slot : slots) {
    // FLOPs and bytes: an exact slot runs the merged model's (the base's) matmuls; the
    // reconstruction is overhead, not useful work.
    const LoraAdapter* a = slot && !adapters.is_exact(static_cast<size_t>(slot)) ? adapters.slots[static_cast<size_t>(slot)] : nullptr;
    const std::string name = SlotName(adapters, slot);
    for (int L : job.prefill_lengths) {
      std::vector<double> times;
      for (int r = 0; r <= job.repeats; ++r) {  // run 0 warms up
        const auto ids = RandomIds(rng, L, vocab);
        GRAFT_ASSIGN_OR_RETURN(SequenceState st, model.NewState(ops));
        std::vector<float> logits(static_cast<size_t>(vocab));
        const double t0 = Now();
        GRAFT_RETURN_IF_ERROR(model.Forward(ops, ids.data(), L, st, logits.data(), slot, &adapters,
                                            LogitRows::Only({L - 1}))
                                  .WithContext(fmt::format("prefill of {} tokens", L)));
        if (r > 0) times.push_back(Now() - t0);
        bar.Add(1);
      }
      BenchRow row{"prefill", name, L, Median(times)};
      row.tflops = PrefillFlops(model, a, L) / row.seconds / 1e12;
      row.share = row.tflops / job.peak_tflops;
      row.tokens_per_s = L / row.seconds;
      rep.rows.push_back(row);
      spdlog::info("bench: prefill {} tokens{}: {:.4f} s, {:.1f} TFLOP/s ({:.1f}% of peak)", L, slot ? " + " + name : "",
                   row.seconds, row.tflops, 100 * row.share);
    }
    for (int B : job.decode_batches) {
      GRAFT_ASSIGN_OR_RETURN(const double step,
                             TimeDecodeSteps(model, ops, adapters, job, B, [slot](int) { return slot; }, rng, run_step));
      bar.Add(1);
      BenchRow row{"decode", name, B, step};
      row.share = static_cast<double>(StepWeightBytes(model, a)) / (job.copy_tbps * 1e12) / row.seconds;
      row.tokens_per_s = B / row.seconds;
      rep.rows.push_back(row);
      spdlog::info("bench: decode batch {}{}: {:.4f} s/step, {:.1f} tokens/s, bandwidth floor {:.1f}% of the step", B,
                   slot ? " + " + name : "", row.seconds, row.tokens_per_s, 100 * row.share);
    }
  }
  bar.Finish();
  // Mixed adapters: `mixed` sequences in one step, sequence i on slot 1 + i % mixed, against the
  // same step with every sequence on slot 1 — prefill (each sequence L / mixed tokens) and decode
  // (batch B's rows). The same random tokens both ways; the medians of `repeats` (after a warm-up).
  for (int pass = 0; mixed > 1 && pass < 2; ++pass) {
    const bool spread = pass == 1;
    const std::string name = spread ? fmt::format("{} adapters", mixed) : "1 adapter";
    for (int L : job.prefill_lengths) {
      const int each = L / mixed;
      if (each < 1) continue;
      std::mt19937_64 ids_rng(job.seed + static_cast<uint64_t>(L));
      std::vector<double> times;
      for (int r = 0; r <= job.repeats; ++r) {
        std::vector<SequenceState> states;
        std::vector<std::vector<int32_t>> ids;
        StepBatch b;
        for (int i = 0; i < mixed; ++i) {
          GRAFT_ASSIGN_OR_RETURN(SequenceState st, model.NewState(ops));
          states.push_back(std::move(st));
          ids.push_back(RandomIds(ids_rng, each, vocab));
        }
        for (int i = 0; i < mixed; ++i) {
          b.Add(&states[static_cast<size_t>(i)], ids[static_cast<size_t>(i)].data(), each, spread ? 1 + i : 1);
        }
        b.logits = LogitRows::None();
        const double t0 = Now();
        GRAFT_RETURN_IF_ERROR(model.Forward(ops, b, adapters, nullptr).WithContext("mixed adapters' prefill"));
        ops.Synchronize();
        if (r > 0) times.push_back(Now() - t0);
      }
      BenchRow row{"prefill", fmt::format("{} seqs, {}", mixed, name), each * mixed, Median(times)};
      row.tokens_per_s = row.tokens / row.seconds;
      rep.rows.push_back(row);
      AddMixed(rep, "prefill", mixed, row.tokens, spread, row.seconds);
    }
    for (int B : job.decode_batches) {
      if (B < mixed) continue;
      std::mt19937_64 ids_rng(job.seed + 7 * static_cast<uint64_t>(B));
      auto slot_of = [&](int i) { return spread ? 1 + i % mixed : 1; };
      GRAFT_ASSIGN_OR_RETURN(const double step, TimeDecodeSteps(model, ops, adapters, job, B, slot_of, ids_rng, run_step));
      BenchRow row{"decode", name, B, step};
      row.tokens_per_s = B / row.seconds;
      rep.rows.push_back(row);
      AddMixed(rep, "decode", mixed, B, spread, row.seconds);
    }
  }
  return rep;
}

Result<std::vector<DecisionLatency>> RunDecisionBench(DecisionScorer& scorer, const std::vector<DecisionRequest>& requests,
                                                      const AdapterSet& adapters, const Model& model, Ops& ops,
                                                      const std::function<void(bool)>& on_questions) {
  static const char* kBuckets[] = {"<=1K", "1K-4K", "4K-10K", ">10K"};
  auto bucket = [](int t) { return t <= 1000 ? 0 : t <= 4000 ? 1 : t <= 10000 ? 2 : 3; };
  auto pct = [](std::vector<double> v, double q) {
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
  };
  std::vector<DecisionLatency> out;
  const std::vector<int32_t> slots = BenchSlots(adapters);
  const int vocab = model.config().vocab_size;
  Progress bar("decisions", slots.size() * requests.size(), /*bytes=*/false);
  for (int32_t slot : slots) {
    std::vector<double> times[4], prefills[4], ratios[4], prepares[4], records[4], questions[4];
    std::vector<PieceTimes> question_phases[4];
    double tokens[4] = {0, 0, 0, 0};
    for (size_t i = 0; i < requests.size(); ++i) {
      scorer.ClearCache();  // a cold record each time
      // DecisionScorer::Score, its phases timed: Begin, then each Advance (a record piece until
      // the prefix is ready, then question pieces), each waited for (a device runs a record
      // piece after Advance returns: its time would show in the questions).
      const double t0 = Now();
      auto begun = scorer.Begin(requests[i], slot);
      if (!begun.ok()) return begun.status().WithContext(fmt::format("decision {}", i + 1));
      DecisionTask& run = *begun;
      double prepare = Now() - t0, record = 0, asked = 0;
      PieceTimes phases;
      for (bool done = false; !done;) {
        const bool on_record = !run.prefix_ready;
        if (!on_record && on_questions) on_questions(true);
        const double a0 = Now();
        auto step = scorer.Advance(run, on_record ? nullptr : &phases);
        if (!step.ok()) return step.status().WithContext(fmt::format("decision {}", i + 1));
        ops.Synchronize();
        if (!on_record && on_questions) on_questions(false);
        done = *step;
        (on_record ? record : asked) += Now() - a0;
      }
      const double dt = Now() - t0;
      const DecisionResult* r = &run.result;
      // The record's prefill alone: the decision's own prefix tokens in the scorer's pieces (as
      // the decision runs them), the last row's logits.
      GRAFT_ASSIGN_OR_RETURN(DecisionTask task, scorer.Begin(requests[i], slot));
      const int n = static_cast<int>(task.prefix.size());
      const int piece = scorer.prefill_chunk() > 0 ? scorer.prefill_chunk() : n;
      GRAFT_ASSIGN_OR_RETURN(SequenceState st, model.NewState(ops));
      std::vector<float> logits(static_cast<size_t>(vocab));
      const double p0 = Now();
      for (int at = 0; at < n; at += piece) {
        const int len = std::min(piece, n - at);
        GRAFT_RETURN_IF_ERROR(model.Forward(ops, task.prefix.data() + at, len, st, logits.data(), slot, &adapters,
                                            at + len == n ? LogitRows::Only({len - 1}) : LogitRows::None())
                                  .WithContext(fmt::format("decision {}'s record prefill", i + 1)));
      }
      const double pt = Now() - p0;
      const int b = bucket(r->record_tokens);
      times[b].push_back(dt);
      prepares[b].push_back(prepare);
      records[b].push_back(record);
      questions[b].push_back(asked);
      question_phases[b].push_back(phases);
      prefills[b].push_back(pt);
      ratios[b].push_back(dt / pt);
      tokens[b] += r->record_tokens;
      bar.Add(1);
    }
    for (int b = 0; b < 4; ++b) {
      if (times[b].empty()) continue;
      DecisionLatency row;
      row.bucket = kBuckets[b];
      row.adapter = SlotName(adapters, slot);
      row.count = static_cast<int>(times[b].size());
      row.p50 = pct(times[b], 0.5);
      row.p95 = pct(times[b], 0.95);
      row.mean_record_tokens = tokens[b] / static_cast<double>(times[b].size());
      row.prefill_p50 = pct(prefills[b], 0.5);
      row.ratio_p50 = pct(ratios[b], 0.5);
      row.prepare_p50 = pct(prepares[b], 0.5);
      row.record_p50 = pct(records[b], 0.5);
      row.questions_p50 = pct(questions[b], 0.5);
      for (double PieceTimes::*phase : {&PieceTimes::plan, &PieceTimes::forward, &PieceTimes::finish}) {
        std::vector<double> v;
        for (const PieceTimes& p : question_phases[b]) v.push_back(p.*phase);
        row.questions_times.*phase = pct(v, 0.5);
      }
      out.push_back(row);
    }
  }
  bar.Finish();
  return out;
}

namespace {

bool SameBits(const DecisionResult& a, const DecisionResult& b) {
  if (a.questions.size() != b.questions.size()) return false;
  for (size_t q = 0; q < a.questions.size(); ++q) {
    const auto &x = a.questions[q].scores, &y = b.questions[q].scores;
    if (x.size() != y.size()) return false;
    for (size_t c = 0; c < x.size(); ++c) {
      if (std::memcmp(&x[c].logprob, &y[c].logprob, sizeof(double)) != 0) return false;
    }
  }
  return true;
}

}  // namespace

Result<DecisionConcurrency> RunDecisionConcurrency(Engine& engine, const std::vector<DecisionRequest>& requests,
                                                   int32_t slot, int n) {
  if (requests.empty()) return InvalidArgument("no decision requests");
  const size_t distinct = std::min(requests.size(), static_cast<size_t>(n));
  std::vector<DecisionResult> alone;
  DecisionConcurrency out;
  out.n = n;
  for (size_t i = 0; i < distinct; ++i) {
    const double t0 = Now();
    GRAFT_ASSIGN_OR_RETURN(DecisionResult r, engine.Decide(requests[i], slot));
    if (i == 0) out.alone_seconds = Now() - t0;
    alone.push_back(std::move(r));
  }
  // The N at once from a cold cache: a record they share is computed once, by the first.
  engine.ForgetDecisionPrefixes();
  std::vector<std::future<Result<DecisionResult>>> futures;
  const double t0 = Now();
  for (int i = 0; i < n; ++i) {
    const DecisionRequest& r = requests[static_cast<size_t>(i) % distinct];
    futures.push_back(std::async(std::launch::async, [&engine, &r, slot] { return engine.Decide(r, slot); }));
  }
  for (int i = 0; i < n; ++i) {
    Result<DecisionResult> r = futures[static_cast<size_t>(i)].get();
    if (!r.ok()) ++out.failed;
    else if (!SameBits(*r, alone[static_cast<size_t>(i) % distinct])) ++out.unequal;
  }
  out.seconds = Now() - t0;
  return out;
}

Result<ChatStreams> RunChatStreams(Engine& engine, const std::vector<int32_t>& prompt, int streams, int max_tokens,
                                   const std::vector<DecisionRequest>& beside, int decisions, int32_t slot) {
  struct Done {
    std::promise<Status> p;
    int64_t tokens = 0;
    std::vector<double> itl;  // the engine's gap before each token after the first (RequestTimes)
  };
  if (decisions > 0 && beside.empty()) return InvalidArgument("decisions beside the chat streams need requests");
  // The decisions first (their records cold; up to --max-decisions of them in progress at once,
  // sharing steps), then the streams at once.
  if (decisions > 0) engine.ForgetDecisionPrefixes();
  std::vector<std::future<Result<DecisionResult>>> work;
  for (int i = 0; i < decisions; ++i) {
    const DecisionRequest& r = beside[static_cast<size_t>(i) % beside.size()];
    work.push_back(std::async(std::launch::async, [&engine, &r, slot] { return engine.Decide(r, slot); }));
  }
  std::vector<std::unique_ptr<Done>> done;
  engine.ForgetSlowestSteps();
  const double t0 = Now();
  for (int i = 0; i < streams; ++i) {
    done.push_back(std::make_unique<Done>());
    Done* d = done.back().get();
    GenerationRequest r;
    r.prompt = prompt;
    r.max_tokens = max_tokens;
    // The gaps as the engine times its tokens (not text deltas: a token whose text is empty or
    // held back, as random ids of a dummy model often are, sends none).
    r.on_event = [d](const GenEvent& ev) {
      if (ev.kind == GenEvent::Kind::kDone) {
        d->tokens = ev.completion_tokens;
        d->itl = ev.times.itl;
        d->p.set_value(Status::Ok());
      }
      if (ev.kind == GenEvent::Kind::kError) d->p.set_value(ev.error);
    };
    GRAFT_RETURN_IF_ERROR(engine.Submit(std::move(r)).WithContext(fmt::format("chat stream {}", i + 1)));
  }
  ChatStreams out;
  out.streams = streams;
  out.decisions = decisions;
  std::vector<double> gaps;
  for (auto& d : done) {
    GRAFT_RETURN_IF_ERROR(d->p.get_future().get());
    out.tokens += d->tokens;
    gaps.insert(gaps.end(), d->itl.begin(), d->itl.end());
  }
  out.seconds = Now() - t0;
  out.tokens_per_s = static_cast<double>(out.tokens) / out.seconds;
  out.slowest = engine.Stats().slowest_steps;
  if (!gaps.empty()) {
    std::sort(gaps.begin(), gaps.end());
    out.gap_p50 = gaps[gaps.size() / 2];
    out.gap_p99 = gaps[std::min(gaps.size() - 1, static_cast<size_t>(0.99 * static_cast<double>(gaps.size())))];
  }
  for (size_t i = 0; i < work.size(); ++i) {
    Result<DecisionResult> r = work[i].get();
    if (!r.ok()) return r.status().WithContext(fmt::format("decision {} beside the chat streams", i + 1));
  }
  return out;
}

Result<TurnSnapshotCost> RunTurnSnapshotCost(Engine& engine, int vocab, int prompt_tokens, int next_tokens,
                                             int repeats) {
  constexpr int kPart = TurnSnapshotCost::kTurnPartFromEnd;
  if (prompt_tokens <= kPart || next_tokens < 1 || repeats < 1 || vocab < 1) {
    return InvalidArgument(fmt::format("a turn's snapshot cost needs a prompt of more than {} tokens, a next turn and "
                                       "a run",
                                       kPart));
  }
  std::mt19937_64 rng(11);
  auto random_ids = [&](int n) { return RandomIds(rng, n, vocab); };
  // One request's first-token time (the engine's), its cached tokens into *cached.
  auto first_token = [&](std::vector<int32_t> prompt, int snapshot_at, int* cached) -> Result<double> {
    auto done = std::make_shared<std::promise<Result<std::pair<double, int>>>>();
    GenerationRequest r;
    r.prompt = std::move(prompt);
    r.max_tokens = 1;
    r.snapshot_at = snapshot_at;
    r.on_event = [done](const GenEvent& ev) {
      if (ev.kind == GenEvent::Kind::kDone) done->set_value(std::make_pair(ev.times.ttft, ev.cached_tokens));
      if (ev.kind == GenEvent::Kind::kError) done->set_value(ev.error);
    };
    auto answer = done->get_future();
    GRAFT_RETURN_IF_ERROR(engine.Submit(std::move(r)));
    GRAFT_ASSIGN_OR_RETURN(const auto got, answer.get());
    if (cached != nullptr) *cached = got.second;
    return got.first;
  };
  const int part = prompt_tokens - kPart;
  std::vector<double> plain, snap, recomputed, continued;
  TurnSnapshotCost out;
  out.prompt_tokens = prompt_tokens;
  out.next_tokens = next_tokens;
  for (int i = 0; i < repeats; ++i) {
    for (bool snapshot : {false, true}) {
      const std::vector<int32_t> first = random_ids(prompt_tokens);
      std::vector<int32_t> next(first.begin(), first.begin() + part);
      const std::vector<int32_t> more = random_ids(next_tokens);
      next.insert(next.end(), more.begin(), more.end());
      GRAFT_ASSIGN_OR_RETURN(const double t1, first_token(first, snapshot ? part : 0, nullptr));
      int cached = 0;
      GRAFT_ASSIGN_OR_RETURN(const double t2, first_token(next, 0, &cached));
      (snapshot ? snap : plain).push_back(t1);
      (snapshot ? continued : recomputed).push_back(t2);
      if (snapshot) out.cached_tokens = cached;
    }
  }
  out.first_plain = Median(plain);
  out.first_snapshot = Median(snap);
  out.next_recomputed = Median(recomputed);
  out.next_continued = Median(continued);
  return out;
}

std::string BenchReport::Table() const {
  std::string t = fmt::format("{:<8} {:<22} {:>7} {:>11} {:>11} {:>9} {:>12}\n", "kind", "adapter", "tokens", "seconds",
                              "TFLOP/s", "share", "tokens/s");
  for (const BenchRow& r : rows) {
    t += fmt::format("{:<8} {:<22} {:>7} {:>11.4f} {:>11.1f} {:>8.1f}% {:>12.1f}\n", r.kind,
                     r.adapter.empty() ? "-" : r.adapter, r.tokens, r.seconds, r.tflops, 100 * r.share, r.tokens_per_s);
  }
  t += "share: prefill = of the bf16 peak; decode = weight-bytes floor at the copy bandwidth / step time\n";
  for (const MixedAdapters& m : mixed) {
    t += fmt::format("mixed adapters, {} {}: a step on {} adapters {:.3f}x the same step on one ({:.4f} against {:.4f} s)\n",
                     m.kind, m.tokens, m.adapters, m.one > 0 ? m.spread / m.one : 0.0, m.spread, m.one);
  }
  if (!decisions.empty()) {
    t += fmt::format("\n{:<8} {:<22} {:>6} {:>14} {:>10} {:>10} {:>12} {:>12}\n", "bucket", "adapter", "count",
                     "record tokens", "p50 s", "p95 s", "prefill p50", "x prefill");
    for (const DecisionLatency& r : decisions) {
      t += fmt::format("{:<8} {:<22} {:>6} {:>14.0f} {:>10.4f} {:>10.4f} {:>12.4f} {:>12.3f}\n", r.bucket,
                       r.adapter.empty() ? "-" : r.adapter, r.count, r.mean_record_tokens, r.p50, r.p95, r.prefill_p50,
                       r.ratio_p50);
    }
    t += "x prefill: a decision's time over its record's prefill alone in the same pieces (median)\n";
    t += fmt::format("{:<8} {:<22} {:>12} {:>12} {:>12} {:>10} {:>10} {:>10}\n", "bucket", "adapter", "prepare ms",
                     "record s", "questions ms", "plan ms", "forward ms", "score ms");
    for (const DecisionLatency& r : decisions) {
      t += fmt::format("{:<8} {:<22} {:>12.1f} {:>12.4f} {:>12.1f} {:>10.1f} {:>10.1f} {:>10.1f}\n", r.bucket,
                       r.adapter.empty() ? "-" : r.adapter, 1e3 * r.prepare_p50, r.record_p50, 1e3 * r.questions_p50,
                       1e3 * r.questions_times.plan, 1e3 * r.questions_times.forward, 1e3 * r.questions_times.finish);
    }
    t += "questions: planning them (forks, pages), the forward pass with its logits' copy, scoring (medians)\n";
  }
  for (const DecisionConcurrency& r : concurrency) {
    t += fmt::format("\n{} decisions at once: {} unequal to each alone, {} failed, {:.3f} s ({:.2f}x the first alone, "
                     "{:.3f} s)\n",
                     r.n, r.unequal, r.failed, r.seconds, r.alone_seconds > 0 ? r.seconds / r.alone_seconds : 0.0,
                     r.alone_seconds);
  }
  if (!chat.empty()) {
    t += fmt::format("\n{:<8} {:>10} {:>10} {:>10} {:>12} {:>12} {:>12}\n", "streams", "decisions", "tokens", "seconds",
                     "tokens/s", "gap p50 ms", "gap p99 ms");
  }
  for (const ChatStreams& r : chat) {
    t += fmt::format("{:<8} {:>10} {:>10} {:>10.3f} {:>12.1f} {:>12.2f} {:>12.2f}\n", r.streams, r.decisions, r.tokens,
                     r.seconds, r.tokens_per_s, 1e3 * r.gap_p50, 1e3 * r.gap_p99);
  }
  for (const ChatStreams& r : chat) {
    if (r.slowest.empty()) continue;
    t += fmt::format("slowest steps, {} streams beside {} decisions:", r.streams, r.decisions);
    const size_t shown = std::min<size_t>(r.slowest.size(), 4);
    for (size_t i = 0; i < shown; ++i) {
      const StepRecord& s = r.slowest[i];
      t += fmt::format(" {:.1f} ms ({} decode, {} prompt", 1e3 * s.seconds, s.decode_rows, s.prompt_rows);
      if (s.decision_rows > 0) {
        t += s.questions ? fmt::format(", {} question rows in {} runs", s.decision_rows, s.decision_seqs)
                         : fmt::format(", {} record rows", s.decision_rows);
      }
      t += fmt::format("; forward {:.1f} ms", 1e3 * s.forward_seconds);
      if (s.decision_rows > 0) t += fmt::format(", decision host {:.1f} ms", 1e3 * s.decision_host_seconds);
      t += ")";
      t += i + 1 < shown ? ";" : "\n";
    }
  }
  for (const TurnSnapshotCost& r : turns) {
    t += fmt::format("\nturn snapshots, a {}-token chat prompt: first token {:.1f} ms alone, {:.1f} ms keeping the next "
                     "turn's copy ({:.2f}x); the next turn (+{} tokens) {:.1f} ms recomputed, {:.1f} ms continued "
                     "({} tokens cached)\n",
                     r.prompt_tokens, 1e3 * r.first_plain, 1e3 * r.first_snapshot,
                     r.first_plain > 0 ? r.first_snapshot / r.first_plain : 0.0, r.next_tokens, 1e3 * r.next_recomputed,
                     1e3 * r.next_continued, r.cached_tokens);
  }
  return t;
}

std::string BenchReport::Json(const std::string& model, const std::string& device) const {
  nlohmann::json j;
  j["model"] = model;
  j["device"] = device;
  for (const BenchRow& r : rows) {
    j["rows"].push_back({{"kind", r.kind}, {"adapter", r.adapter}, {"tokens", r.tokens}, {"seconds", r.seconds},
                         {"tflops", r.tflops}, {"share", r.share}, {"tokens_per_s", r.tokens_per_s}});
  }
  for (const DecisionLatency& r : decisions) {
    j["decisions"].push_back({{"bucket", r.bucket}, {"adapter", r.adapter}, {"count", r.count},
                              {"mean_record_tokens", r.mean_record_tokens}, {"p50", r.p50}, {"p95", r.p95},
                              {"prefill_p50", r.prefill_p50}, {"ratio_p50", r.ratio_p50}, {"prepare_p50", r.prepare_p50},
                              {"record_p50", r.record_p50}, {"questions_p50", r.questions_p50},
                              {"questions_plan_p50", r.questions_times.plan},
                              {"questions_forward_p50", r.questions_times.forward},
                              {"questions_score_p50", r.questions_times.finish}});
  }
  for (const DecisionConcurrency& r : concurrency) {
    j["concurrency"].push_back({{"n", r.n}, {"unequal", r.unequal}, {"failed", r.failed}, {"seconds", r.seconds},
                                {"alone_seconds", r.alone_seconds}});
  }
  for (const ChatStreams& r : chat) {
    nlohmann::json slowest = nlohmann::json::array();
    for (const StepRecord& s : r.slowest) {
      slowest.push_back({{"seconds", s.seconds}, {"decode_rows", s.decode_rows}, {"prompt_rows", s.prompt_rows},
                         {"decision_rows", s.decision_rows}, {"decision_seqs", s.decision_seqs},
                         {"questions", s.questions}, {"forward_seconds", s.forward_seconds},
                         {"decision_host_seconds", s.decision_host_seconds}});
    }
    j["chat"].push_back({{"streams", r.streams}, {"decisions", r.decisions}, {"tokens", r.tokens}, {"seconds", r.seconds},
                         {"tokens_per_s", r.tokens_per_s}, {"gap_p50", r.gap_p50}, {"gap_p99", r.gap_p99},
                         {"slowest_steps", slowest}});
  }
  for (const MixedAdapters& m : mixed) {
    j["mixed_adapters"].push_back(
        {{"kind", m.kind}, {"adapters", m.adapters}, {"tokens", m.tokens}, {"one", m.one}, {"spread", m.spread}});
  }
  for (const TurnSnapshotCost& r : turns) {
    j["turn_snapshots"].push_back({{"prompt_tokens", r.prompt_tokens}, {"next_tokens", r.next_tokens},
                                   {"first_plain", r.first_plain}, {"first_snapshot", r.first_snapshot},
                                   {"next_recomputed", r.next_recomputed}, {"next_continued", r.next_continued},
                                   {"cached_tokens", r.cached_tokens}});
  }
  return j.dump(2);
}

}  // namespace graft

// `graft bench`: prefill and decode timings of one model on one backend, with and without an
// adapter, as a table and JSON.
//
//   prefill  a decision-like step: L random tokens from an empty cache, logits for the last row
//            only; the median of `repeats` runs after a warm-up. FLOPs = 2 x (projection
//            parameters) x L, plus causal attention 2 x heads x head_dim x L^2 per full-attention
//            layer, plus the Gated DeltaNet recurrence 4 x Hv x dk x dv x L per GDN layer, plus
//            the LoRA products 2 x rank x (K + N) x L per module; reported as TFLOP/s and as a
//            share of `peak_tflops`.
//   decode   B sequences with a short prompt each, then `steps` steps of one token per
//            sequence (through `run_step` when given: CUDA graphs); tokens/s, and the bandwidth
//            floor (weight bytes per step / `copy_tbps`) as a share of the measured step time.
//   decisions  with --decisions: latency by record-length bucket, and against the record's
//              prefill alone (DecisionLatency below); --concurrency N of them at once through
//              the engine against one alone; --chat-streams throughput and inter-token gaps,
//              alone and (with --concurrency) while decisions run.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "engine/engine.h"
#include "model/model.h"
#include "util/status.h"

namespace graft {

struct BenchJob {
  std::vector<int> prefill_lengths{1024, 4096};
  std::vector<int> decode_batches{1, 8, 64};
  int decode_prompt = 64;
  int decode_steps = 16;
  int repeats = 3;
  double peak_tflops = 800.0;  // the H200's measured bf16 dense GEMM ceiling
  double copy_tbps = 4.2;      // its measured copy bandwidth
  uint64_t seed = 1;
  // Above 1: the adapter set's slots 1..mixed_adapters are that many adapters, and RunBench
  // measures steps whose sequences are spread over all of them against the same steps on slot 1
  // alone (issue 45's mixed adapters); the per-slot rows then cover the base and slot 1 only.
  int mixed_adapters = 0;
};

struct BenchRow {
  std::string kind;     // "prefill" or "decode"
  std::string adapter;  // "" (base) or the adapter's name
  int tokens = 0;       // prefill length, or decode batch
  double seconds = 0;   // prefill: one step (median); decode: one step (median)
  double tflops = 0;    // prefill: achieved; decode: 0
  double share = 0;     // prefill: of peak_tflops; decode: bandwidth floor / step time
  double tokens_per_s = 0;
};

// Decision latency by record-length bucket (<=1K, 1-4K, 4-10K, >10K record tokens, as
// `graft gate` buckets): each request scored once per slot from a cold prefix cache
// (DecisionScorer::Score), p50 and p95 of its wall time; and its record's prefill alone (the
// same tokens and slot through Model::Forward in the scorer's prefill pieces, the last row's
// logits), p50 of that and of the ratio decision / prefill (issue 46 asks <= 1.15); and where a
// decision's time goes (medians): preparing it (template, tokens, prefix cache: Begin), its
// record pieces, its question pieces.
struct DecisionLatency {
  std::string bucket, adapter;
  int count = 0;
  double p50 = 0, p95 = 0;
  double mean_record_tokens = 0;
  double prefill_p50 = 0, ratio_p50 = 0;
  double prepare_p50 = 0, record_p50 = 0, questions_p50 = 0;
  PieceTimes questions_times;  // the questions' phases (each phase's median)
};

// N decisions submitted to the engine at once — the requests in turn (cycled) — against each
// alone: how many came back with other bits (must be 0: docs/design.md §3.2), how many failed,
// and the wall time for all n against the first one alone.
struct DecisionConcurrency {
  int n = 0, unequal = 0, failed = 0;
  double seconds = 0;        // wall time for all n
  double alone_seconds = 0;  // the first request alone on the idle engine
};

// Chat: `streams` greedy generations of `max_tokens` each submitted at once — throughput, and the
// gaps between a stream's tokens (p50 / p99 over every stream), alone or (decisions > 0) while
// that many decisions run on the engine beside them.
struct ChatStreams {
  int streams = 0;
  int decisions = 0;
  int64_t tokens = 0;
  double seconds = 0;
  double tokens_per_s = 0;
  double gap_p50 = 0, gap_p99 = 0;
  std::vector<StepRecord> slowest;  // the run's slowest engine steps, slowest first
};

// A chat's next turn on a recurrent model (the server's turn snapshots, kv/prefix_cache.h):
// a prompt's first-token time alone and with the engine keeping a copy of its cache where the
// next turn would part (GenerationRequest::snapshot_at, kTurnPartFromEnd tokens before its end:
// one more step), then the next turn's — the prompt up to there plus next_tokens new ones —
// recomputed, or continued from that copy. Medians, seconds; each run a fresh random prompt.
struct TurnSnapshotCost {
  static constexpr int kTurnPartFromEnd = 9;  // Qwen's generation prompt, which a past turn drops
  int prompt_tokens = 0, next_tokens = 0;
  double first_plain = 0, first_snapshot = 0;
  double next_recomputed = 0, next_continued = 0;
  int cached_tokens = 0;  // the continued turn's (0: no copy kept: no prefix cache or no recurrent layers)
};

// A step with its sequences on several adapters against the same step on one (BenchJob::mixed_adapters).
struct MixedAdapters {
  std::string kind;  // "prefill" (one sequence an adapter) or "decode" (the batch's rows in turn)
  int adapters = 0, tokens = 0;  // tokens: the prefill's, or the decode batch
  double one = 0, spread = 0;    // seconds a step (median)
};

struct BenchReport {
  std::vector<BenchRow> rows;
  std::vector<MixedAdapters> mixed;
  std::vector<DecisionLatency> decisions;  // RunDecisionBench's, when run
  std::vector<DecisionConcurrency> concurrency;
  std::vector<ChatStreams> chat;
  std::vector<TurnSnapshotCost> turns;
  std::string Table() const;
  std::string Json(const std::string& model, const std::string& device) const;
};

class DecisionScorer;
struct DecisionRequest;
// DecisionLatency rows for base and (slot 1, when present) the adapter. A request that fails
// is an error naming its place.
// model and ops run the prefills alone (the scorer's own). on_questions, when given, is called
// with true before each of a decision's question pieces and false after it (an op profile of the
// questions alone).
Result<std::vector<DecisionLatency>> RunDecisionBench(DecisionScorer& scorer,
                                                      const std::vector<DecisionRequest>& requests,
                                                      const AdapterSet& adapters, const Model& model, Ops& ops,
                                                      const std::function<void(bool)>& on_questions = nullptr);

class Engine;
// Each of the first min(n, requests) requests alone on `engine`, then n of them (in turn) at once
// from a cold prefix cache (a record they share is computed once, by the first): the time against
// the first alone, and how many differ from their lone run or fail.
Result<DecisionConcurrency> RunDecisionConcurrency(Engine& engine, const std::vector<DecisionRequest>& requests,
                                                   int32_t slot, int n);
// beside: decisions to run on the engine while the streams generate (the requests in turn, from a
// cold prefix cache; none: the streams alone); their results are waited for, a failure is an error.
Result<ChatStreams> RunChatStreams(Engine& engine, const std::vector<int32_t>& prompt, int streams, int max_tokens,
                                   const std::vector<DecisionRequest>& beside = {}, int decisions = 0, int32_t slot = 0);

// TurnSnapshotCost for prompts of prompt_tokens (> kTurnPartFromEnd) random ids below `vocab`,
// `repeats` runs of each kind.
Result<TurnSnapshotCost> RunTurnSnapshotCost(Engine& engine, int vocab, int prompt_tokens, int next_tokens = 64,
                                             int repeats = 3);

// adapters: slot 1, when present, is the adapter measured beside the base.
Result<BenchReport> RunBench(const Model& model, Ops& ops, const AdapterSet& adapters, const BenchJob& job,
                             const StepRunner& run_step = nullptr);

}  // namespace graft

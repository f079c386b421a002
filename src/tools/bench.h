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
//   decisions  with --decisions: latency by record-length bucket (DecisionLatency below);
//              --concurrency N copies of one through the engine; --chat-streams throughput.
#pragma once

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
// (DecisionScorer::Score), p50 and p95 of its wall time.
struct DecisionLatency {
  std::string bucket, adapter;
  int count = 0;
  double p50 = 0, p95 = 0;
  double mean_record_tokens = 0;
};

// N copies of one decision submitted to the engine at once, against the same decision alone:
// how many came back with other bits (must be 0: docs/design.md §3.2) and how many failed.
struct DecisionConcurrency {
  int n = 0, unequal = 0, failed = 0;
  double seconds = 0;  // wall time for all n
};

// Chat throughput: `streams` greedy generations of `max_tokens` each submitted at once.
struct ChatStreams {
  int streams = 0;
  int64_t tokens = 0;
  double seconds = 0;
  double tokens_per_s = 0;
};

struct BenchReport {
  std::vector<BenchRow> rows;
  std::vector<DecisionLatency> decisions;  // RunDecisionBench's, when run
  std::vector<DecisionConcurrency> concurrency;
  std::vector<ChatStreams> chat;
  std::string Table() const;
  std::string Json(const std::string& model, const std::string& device) const;
};

class DecisionScorer;
struct DecisionRequest;
// DecisionLatency rows for base and (slot 1, when present) the adapter. A request that fails
// is an error naming its place.
Result<std::vector<DecisionLatency>> RunDecisionBench(DecisionScorer& scorer,
                                                      const std::vector<DecisionRequest>& requests,
                                                      const AdapterSet& adapters);

class Engine;
Result<DecisionConcurrency> RunDecisionConcurrency(Engine& engine, const DecisionRequest& request, int32_t slot, int n);
Result<ChatStreams> RunChatStreams(Engine& engine, const std::vector<int32_t>& prompt, int streams, int max_tokens);

// adapters: slot 1, when present, is the adapter measured beside the base.
Result<BenchReport> RunBench(const Model& model, Ops& ops, const AdapterSet& adapters, const BenchJob& job,
                             const StepRunner& run_step = nullptr);

}  // namespace graft

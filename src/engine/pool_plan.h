// Pool sizes from a memory budget: how many KV tokens (one pool, chat and decisions together),
// how many of them decisions may hold, and how many state slots the engine reserves when the
// flags leave them to the budget (as vLLM sizes its cache from --gpu-memory-utilization). A pure
// function, so its rule is tested without a device.
//
// The rule, on what the budget leaves after weights, adapters and scratch (`available`):
//   1. keep a margin of 2% (at least 256 MiB) for what is allocated outside the budget's
//      count (graph instantiation, driver pools);
//   2. chat state slots (--max-running) default to 64, fewer where 64 would take more than half
//      of what is left (a Qwen3.5-27B slot is ~0.3 GB), at least one; decisions at once
//      (--max-decisions) default to 8, fewer where their slots (DecisionSlots) would take more than
//      a quarter, at least one;
//   3. the rest is the KV pool; decisions may hold a quarter of it, raised to the model's context
//      (one full-length record) where that fits in half. Chat sequences may hold any of it the
//      decisions do not (engine.h).
// An explicit value is kept as given (and the rest computed around it); explicit values that do
// not fit are an error naming what they need and what the budget leaves.
#pragma once

#include <cstdint>
#include <string>

#include "util/status.h"

namespace graft {

// The decision prefix cache's entries (records kept for later decisions on them).
constexpr int kDecisionCacheEntries = 4;
// The pool's state slots for max_decisions decisions at once: the prefix cache's entries, each
// decision's record (shared with the cache once whole, so up to four of these are free for
// forks), and three more for the forks of the questions' runs in a step.
constexpr int kDecisionForkSlots = 3;
inline int DecisionSlots(int max_decisions) { return kDecisionCacheEntries + max_decisions + kDecisionForkSlots; }

struct PoolNeeds {
  int64_t kv_bytes_per_token = 0;  // K and V of one token in every full-attention layer
  int64_t slot_bytes = 0;          // one recurrent-state slot (0: no recurrent layers)
  int context = 0;                 // the model's context: one record of this length should fit
  int page_size = 16;
};

// What the flags asked for; 0: from the budget.
struct PoolAsk {
  int64_t kv_tokens = 0, decision_tokens = 0;  // the pool; the most of it decisions hold
  int max_running = 0, max_decisions = 0;
};

struct PoolPlan {
  int64_t kv_tokens = 0, decision_tokens = 0;  // decision_tokens <= kv_tokens
  int max_running = 0, max_decisions = 0;
  int64_t bytes = 0;  // KV and state slots together
  std::string Describe() const;  // one line for the start-up log
};

Result<PoolPlan> PlanPools(int64_t available, const PoolNeeds& needs, const PoolAsk& ask);
// The asked values agree (decisions hold no more than the pool): kInvalidArgument naming both.
Status CheckPoolAsk(const PoolAsk& ask);

}  // namespace graft

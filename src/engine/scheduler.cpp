#include "engine/scheduler.h"

#include <algorithm>

namespace graft {

StepPlan Scheduler::Plan(std::vector<SchedSeq>& seqs) {
  StepPlan plan;
  int rows = 0;
  // Decode rows first: every admitted sequence whose prompt is done brings one token.
  for (const auto& s : seqs) {
    if (s.admitted && s.prefilled >= s.prompt_tokens && rows < max_step_tokens_) {
      plan.entries.push_back({s.id, 1});
      ++rows;
    }
  }
  // Then prefill chunks, admitting waiting sequences in order while the budgets allow.
  for (auto& s : seqs) {
    if (rows >= max_step_tokens_) break;
    if (s.prefilled >= s.prompt_tokens && s.admitted) continue;
    if (!s.admitted) {
      const int64_t need = int64_t{s.prompt_tokens} + s.max_new_tokens;
      if (need > kv_budget_) {
        plan.rejected.push_back(s.id);
        continue;
      }
      if (kv_reserved_ + need > kv_budget_) break;  // keep arrival order: later ones wait too
      kv_reserved_ += need;
      s.admitted = true;
      plan.admitted.push_back(s.id);
    }
    const int chunk = std::min(s.prompt_tokens - s.prefilled, max_step_tokens_ - rows);
    if (chunk > 0) {
      plan.entries.push_back({s.id, chunk});
      rows += chunk;
    }
  }
  return plan;
}

void Scheduler::Release(const SchedSeq& s) {
  if (s.admitted) kv_reserved_ -= int64_t{s.prompt_tokens} + s.max_new_tokens;
}

}  // namespace graft

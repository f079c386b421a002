#include "engine/scheduler.h"

#include <algorithm>

namespace graft {

int64_t Scheduler::Need(const SchedSeq& s) const {
  const int64_t tokens = int64_t{s.prompt_tokens} + s.max_new_tokens;
  return (tokens + page_size_ - 1) / page_size_ * page_size_;
}

int Scheduler::DecodeRows(const std::vector<SchedSeq>& seqs) const {
  int rows = 0;
  for (const auto& s : seqs) rows += s.admitted && s.prefilled >= s.prompt_tokens;
  return std::min(rows, max_step_tokens_);
}

StepPlan Scheduler::Plan(std::vector<SchedSeq>& seqs, int reserved) {
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
  const int limit = max_step_tokens_ - std::max(reserved, 0);
  for (auto& s : seqs) {
    if (rows >= limit) break;
    if (s.prefilled >= s.prompt_tokens && s.admitted) continue;
    if (!s.admitted) {
      const int64_t need = Need(s);
      if (need > kv_budget_) {
        plan.rejected.push_back(s.id);
        continue;
      }
      if (kv_reserved_ + need > kv_budget_ || running_ >= max_running_) break;  // keep arrival order
      kv_reserved_ += need;
      ++running_;
      s.admitted = true;
      plan.admitted.push_back(s.id);
    }
    int chunk = std::min(s.prompt_tokens - s.prefilled, limit - rows);
    if (s.stop_at > s.prefilled) chunk = std::min(chunk, s.stop_at - s.prefilled);
    if (chunk > 0) {
      plan.entries.push_back({s.id, chunk});
      rows += chunk;
    }
  }
  return plan;
}

void Scheduler::Release(const SchedSeq& s) {
  if (s.admitted) {
    kv_reserved_ -= Need(s);
    --running_;
  }
}

}  // namespace graft

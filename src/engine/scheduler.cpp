#include "engine/scheduler.h"

#include <algorithm>

namespace graft {

int Scheduler::DecodeRows(const std::vector<SchedSeq>& seqs) const {
  int rows = 0;
  for (const auto& s : seqs) rows += s.admitted && s.prefilled >= s.prompt_tokens;
  return std::min(rows, max_step_tokens_);
}

void Scheduler::Drop(SchedSeq& s) {
  Release(s);
  s.reserved = 0;
  s.admitted = false;
}

StepPlan Scheduler::Plan(std::vector<SchedSeq>& seqs, int reserved) {
  StepPlan plan;
  int rows = 0;
  std::vector<char> preempted(seqs.size(), 0);
  // Decode rows first, oldest first: each brings one token, and a page more of KV where that
  // token starts one. When the budget is full the newest admitted sequence gives its KV back (it
  // may be this one).
  for (size_t i = 0; i < seqs.size() && rows < max_step_tokens_; ++i) {
    SchedSeq& s = seqs[i];
    if (!s.admitted || s.prefilled < s.prompt_tokens) continue;
    const int64_t grow = Pages(int64_t{s.prompt_tokens} + s.decoded + 1) - s.reserved;
    while (grow > 0 && kv_reserved_ + grow > grow_room_ && s.admitted) {
      size_t victim = seqs.size();
      while (victim-- > i && !seqs[victim].admitted) {
      }
      Drop(seqs[victim]);
      preempted[victim] = 1;
      plan.preempted.push_back(seqs[victim].id);
    }
    if (!s.admitted) continue;
    if (grow > 0) {
      kv_reserved_ += grow;
      s.reserved += grow;
    }
    plan.entries.push_back({s.id, 1});
    ++rows;
  }
  // Then prefill chunks, admitting waiting sequences in order while the budgets allow (with room
  // for their prompt and first token).
  const int limit = max_step_tokens_ - std::max(reserved, 0);
  for (size_t i = 0; i < seqs.size(); ++i) {
    SchedSeq& s = seqs[i];
    if (rows >= limit) break;
    if (preempted[i]) break;  // keep arrival order: it starts over in a later step
    if (s.prefilled >= s.prompt_tokens && s.admitted) continue;
    if (!s.admitted) {
      if (Pages(int64_t{s.prompt_tokens} + s.max_new_tokens) > kv_budget_) {
        plan.rejected.push_back(s.id);
        continue;
      }
      const int64_t need = Pages(int64_t{s.prompt_tokens} + 1);
      if (kv_reserved_ + need > admit_room_ || running_ >= max_running_) break;  // keep arrival order
      kv_reserved_ += need;
      s.reserved = need;
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
    kv_reserved_ -= s.reserved;
    --running_;
  }
}

}  // namespace graft

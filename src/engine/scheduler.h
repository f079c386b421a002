// Scheduler: which sequences run in the next step and with how many tokens. Pure integer
// bookkeeping: no model, no threads, no GPU (docs/style.md 2).
//
// Each step holds at most `max_step_tokens` rows. Running (decoding) sequences get one row
// each, oldest first; then waiting sequences are admitted in arrival order while the row
// budget, the KV budget (`kv_token_budget` tokens) and the running limit (`max_running`, one
// recurrent-state slot each) allow; an admitted sequence prefills in chunks of whatever rows
// are left, never past its stop_at (where the engine keeps a copy of its cache).
// KV is held in whole pages of `page_size` tokens as a sequence needs it, as vLLM does: its
// prompt and first token at admission, then a page whenever a decode row starts one. When a
// decode row finds the budget full, the most recently admitted sequence gives all of its KV
// back and starts over (preempted: recomputed from its tokens so far, the same bits — a row's
// logits do not depend on how its sequence was split); the oldest always go on. A sequence
// whose prompt and max_tokens exceed the whole budget can never finish and is rejected.
// Where the pool is shared with other work (the engine's decisions), set_kv_room lowers the
// budget step by step: what running sequences may grow to, and what they may hold after an
// admission.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace graft {

struct SchedSeq {
  int64_t id = 0;
  int prompt_tokens = 0;    // tokens to prefill (after a preemption: the prompt and what was generated)
  int prefilled = 0;        // prompt tokens already processed
  int max_new_tokens = 0;   // tokens it may still generate after them
  bool admitted = false;    // holds KV
  int stop_at = 0;          // a prefill chunk ends at this prompt position (0: none)
  int decoded = 0;          // decode rows run since its prompt was prefilled (the caller counts them)
  int64_t reserved = 0;     // KV tokens it holds, whole pages (the scheduler's)
};

struct StepPlanEntry {
  int64_t id;
  int tokens;  // rows this sequence brings to the step
};

struct StepPlan {
  std::vector<StepPlanEntry> entries;  // in row order
  std::vector<int64_t> admitted;       // sequences that got their reservation this step
  std::vector<int64_t> rejected;       // can never fit
  std::vector<int64_t> preempted;      // gave their KV back this step: to start over (not in entries)
};

class Scheduler {
 public:
  Scheduler(int max_step_tokens, int64_t kv_token_budget, int page_size = 1, int max_running = 1 << 30)
      : max_step_tokens_(max_step_tokens), kv_budget_(kv_token_budget), page_size_(page_size), max_running_(max_running) {}

  // seqs: every live sequence, in arrival order. Marks admissions, preemptions (admitted false,
  // reserved 0) and KV held in `seqs`. `reserved` rows of the budget are kept for other work in
  // the step (a decision's piece): prefill chunks get what is left after the decode rows and them.
  StepPlan Plan(std::vector<SchedSeq>& seqs, int reserved = 0);
  // The decode rows Plan would give `seqs` (every admitted sequence whose prompt is done, up to
  // the budget).
  int DecodeRows(const std::vector<SchedSeq>& seqs) const;
  int max_step_tokens() const { return max_step_tokens_; }
  // The budget for the next Plan, in tokens (each at most kv_budget): running sequences may grow
  // to `grow` in all (past it a decode row's page preempts the newest) and admissions keep them
  // within `admit`. Until called (or after set_kv_room(kv_budget(), kv_budget())): the whole
  // budget.
  void set_kv_room(int64_t grow, int64_t admit) {
    grow_room_ = std::min(grow, kv_budget_);
    admit_room_ = std::min(admit, grow_room_);
  }
  // A finished or cancelled sequence gives its KV back.
  void Release(const SchedSeq& s);
  int64_t kv_reserved() const { return kv_reserved_; }
  int64_t kv_budget() const { return kv_budget_; }  // the whole pool: a sequence past it never fits

 private:
  int64_t Pages(int64_t tokens) const { return (tokens + page_size_ - 1) / page_size_ * page_size_; }
  // Gives s's KV back (a preemption or a release).
  void Drop(SchedSeq& s);
  int max_step_tokens_;
  int64_t kv_budget_;
  int64_t grow_room_ = kv_budget_, admit_room_ = kv_budget_;
  int page_size_;
  int max_running_;
  int64_t kv_reserved_ = 0;
  int running_ = 0;
};

}  // namespace graft

// Scheduler: which sequences run in the next step and with how many tokens. Pure integer
// bookkeeping: no model, no threads, no GPU (docs/style.md 2).
//
// Each step holds at most `max_step_tokens` rows. Running (decoding) sequences get one row
// each, oldest first; then waiting sequences are admitted in arrival order while the row
// budget, the KV budget (`kv_token_budget` tokens, each sequence reserving its prompt plus
// max_tokens rounded up to whole pages of `page_size`) and the running limit (`max_running`,
// one recurrent-state slot each) allow; an admitted sequence prefills in chunks of whatever
// rows are left, never past its stop_at (where the engine keeps a copy of its cache). A
// sequence whose reservation exceeds the whole budget is rejected.
#pragma once

#include <cstdint>
#include <vector>

namespace graft {

struct SchedSeq {
  int64_t id = 0;
  int prompt_tokens = 0;    // total prompt length
  int prefilled = 0;        // prompt tokens already processed
  int max_new_tokens = 0;
  bool admitted = false;    // holds a KV reservation
  int stop_at = 0;          // a prefill chunk ends at this prompt position (0: none)
};

struct StepPlanEntry {
  int64_t id;
  int tokens;  // rows this sequence brings to the step
};

struct StepPlan {
  std::vector<StepPlanEntry> entries;  // in row order
  std::vector<int64_t> admitted;       // sequences that got their reservation this step
  std::vector<int64_t> rejected;       // can never fit
};

class Scheduler {
 public:
  Scheduler(int max_step_tokens, int64_t kv_token_budget, int page_size = 1, int max_running = 1 << 30)
      : max_step_tokens_(max_step_tokens), kv_budget_(kv_token_budget), page_size_(page_size), max_running_(max_running) {}

  // seqs: every live sequence, in arrival order. Marks admissions in `seqs`. `reserved` rows of
  // the budget are kept for other work in the step (a decision's piece): prefill chunks get what
  // is left after the decode rows and them.
  StepPlan Plan(std::vector<SchedSeq>& seqs, int reserved = 0);
  // The decode rows Plan would give `seqs` (every admitted sequence whose prompt is done, up to
  // the budget).
  int DecodeRows(const std::vector<SchedSeq>& seqs) const;
  int max_step_tokens() const { return max_step_tokens_; }
  // A finished or cancelled sequence gives its reservation back.
  void Release(const SchedSeq& s);
  int64_t kv_reserved() const { return kv_reserved_; }
  int64_t kv_budget() const { return kv_budget_; }

 private:
  int64_t Need(const SchedSeq& s) const;
  int max_step_tokens_;
  int64_t kv_budget_;
  int page_size_;
  int max_running_;
  int64_t kv_reserved_ = 0;
  int running_ = 0;
};

}  // namespace graft

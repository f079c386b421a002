// DecisionScorer: runs decisions on a model (docs/design.md §4).
//
// The record prefix is computed once per request and every question forks its state (shared
// KV pages, a copy of the recurrent state); with share_prefix = false every question runs from
// scratch instead. A decision is a task (Begin) advanced one piece of work at a time: a piece of
// the record's prefill, or its questions (with their multi-token choices' rows) in one. A piece
// is rows of a step (Plan says which, on which sequences, and which rows' logits it reads; Finish
// takes those logits), so the engine runs it inside a step beside chat rows; Advance runs one
// piece on its own and Score a whole task.
// Every way gives the same bits: a row's logits do not depend on how its sequence is split or on
// the rows beside it.
// A small prefix cache keyed by (adapter slot, prefix tokens) lets repeated records skip the
// prefix entirely (usage.cached_tokens counts those tokens).
//
// Thread-safety: one thread at a time (it owns a prefix cache and drives `ops`).
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <utility>

#include "weights/lora.h"
#include "backend/ops.h"
#include "engine/decision.h"
#include "model/model.h"

namespace graft {

// log_softmax(row)[token] in double; an error naming `what` when the row holds a NaN or an
// infinity (the model's weights, an adapter or the arithmetic went wrong: no probability from
// such a row is meaningful, so the decision fails rather than answer with null probabilities).
Result<double> ChoiceLogProb(const float* row, int vocab, int32_t token, const std::string& what);
// The row's part of ChoiceLogProb, made once for all the tokens read from one row (a question's
// choices all start from the row after it): LogProb(token) is ChoiceLogProb's value, bit for bit.
struct RowLogSoftmax {
  const float* row = nullptr;
  double max = 0, log_z = 0;
  double LogProb(int32_t token) const { return static_cast<double>(row[token]) - max - log_z; }
};
Result<RowLogSoftmax> LogSoftmaxOf(const float* row, int vocab, const std::string& what);
// LogSoftmaxOf for many rows at once, spread over up to `threads` host threads, each row in 16
// fixed slices of the vocabulary (its Σ exp summed slice by slice in order, then the slices in
// order: LogSoftmaxOf's bits, whatever the thread count); what(i) names row i in an error. A
// decision's question rows: each a vocabulary's worth of exponentials (~1 ms at 248K alone).
Result<std::vector<RowLogSoftmax>> LogSoftmaxOfRows(const std::vector<const float*>& rows, int vocab, int threads,
                                                    const std::function<std::string(size_t)>& what);

// Where a decision piece's time went (DecisionScorer::Advance): planning it (forks, pages), the
// forward pass with its logits' copy to the host, and reading them (the scores).
struct PieceTimes {
  double plan = 0, forward = 0, finish = 0;
};

// A decision in progress: what Begin made of the request and how far its pieces have taken it.
// Owns its states (their pages go back to the pool when it is destroyed).
struct DecisionTask {
  DecisionRequest request;
  int32_t slot = 0;
  bool share_prefix = true;
  const std::atomic<bool>* cancelled = nullptr;
  std::vector<int32_t> prefix;     // the record's tokens (instructions and record)
  size_t prefilled = 0;            // prefix tokens already in prefix_state
  bool prefix_ready = false;       // the prefix is computed (or came from the cache)
  // The record's state (null until its first piece). Once the record is whole the prefix cache
  // shares it (no copy, no second state slot) and it is only forked, never written again.
  std::shared_ptr<SequenceState> prefix_state;
  size_t question = 0;             // questions taken into a group so far
  // The questions being asked together and not yet scored. Each is one or more runs, each a fork
  // of the record with the question's tokens and, for a multi-token choice, that choice's tokens
  // but the last: one run per multi-token choice (each gives the choice's rows, and the first
  // the row after the question), or one run of the question alone when every choice is a single
  // token. A piece runs as many runs as fit (usually all of them: one step for the questions).
  struct AskedQuestions {
    size_t first = 0;                    // the first question's index
    std::vector<QuestionTokens> tokens;
    // [question][choice]: the choice's first token's log-probability in the row after the
    // question, read as soon as that row's step has run (the rows themselves are not kept).
    std::vector<std::vector<double>> first_lp;
    struct Run {
      size_t q = 0;                      // the question (within the group)
      int c = -1;                        // its multi-token choice, or -1: the question alone
      bool first = false;                // gives the row after the question (first_lp)
      std::vector<int32_t> ids;          // the tokens it runs (share_prefix = false: the record's too)
      SequenceState state;               // its fork, while it runs
      std::vector<double> more_lp;       // the choice's tokens after its first: each one's log-probability, once run
    };
    std::vector<Run> runs;
    size_t runs_done = 0;                // runs finished so far (in order)
    size_t runs_running = 0;             // runs in the planned piece
  };
  std::optional<AskedQuestions> asked;
  // The planned piece's kind, until Finish.
  enum class Planned { kNone, kRecord, kRuns } planned = Planned::kNone;
  size_t record_end = 0;           // a planned record piece's end
  std::vector<std::string> answers;
  DecisionResult result;           // complete once every question is scored
  int pieces = 0;                  // pieces planned that did work
  bool done() const { return prefix_ready && question >= request.questions.size() && !asked; }
};

// A piece's rows: sequences in row order, each with its tokens, and the rows (counted from the
// piece's first) whose logits Finish reads, increasing. The states and tokens belong to the task.
struct DecisionRows {
  struct Seq {
    SequenceState* state;
    const int32_t* ids;
    int n;
  };
  std::vector<Seq> seqs;
  std::vector<int32_t> logit_rows;
  int rows() const {
    int r = 0;
    for (const auto& s : seqs) r += s.n;
    return r;
  }
};

class DecisionScorer {
 public:
  // pool: where the states live (nullptr: the model's own growable pool), on `account` of it
  // (KvPool accounts: a pool shared with other work counts and caps the decisions' part).
  DecisionScorer(const Model& model, Ops& ops, const Tokenizer& tok, const ChatTemplate& tmpl,
                 const AdapterSet& adapters, KvPool* pool = nullptr, size_t prefix_cache_entries = 4, int account = 0)
      : model_(model), ops_(ops), layout_(tok, tmpl), adapters_(adapters), pool_(pool), account_(account),
        cache_capacity_(prefix_cache_entries) {}

  // Scores every question of `r` with the rows selecting `adapter_slot`. The record is prefilled
  // in pieces of prefill_chunk tokens (0: at once; a row's bits do not depend on it), and
  // `cancelled`, when set, stops the work between pieces with kCancelled.
  Result<DecisionResult> Score(const DecisionRequest& r, int32_t adapter_slot, bool share_prefix = true,
                               const std::atomic<bool>* cancelled = nullptr);
  // Begin lays the request out (errors: a record or question longer than the context, a bad
  // request). It takes no pool memory: the record's state is taken by its first piece.
  Result<DecisionTask> Begin(const DecisionRequest& r, int32_t adapter_slot, bool share_prefix = true,
                             const std::atomic<bool>* cancelled = nullptr);
  // The task's next piece in at most max_rows rows (0: no limit): the record's next max_rows
  // tokens (a cached record: no rows at all); else runs of the questions (each question's tokens
  // on a fork of the record, one fork per multi-token choice with the choice's tokens but the last
  // after them): every remaining independent question together (joint mode or without a shared
  // record: one question at a time), a piece taking as many runs as the pool's free state slots
  // and pages hold and as fit in max_rows — at least one run, which may pass max_rows (with
  // must_run false none then: no rows, nothing planned, the task as it was). The pages its rows
  // need are taken here (kResourceExhausted when the pool cannot give them), so the step it runs
  // in cannot fail for them. kCancelled once `cancelled` is set. The task must not be done, nor
  // have a piece planned.
  Result<DecisionRows> Plan(DecisionTask& t, int max_rows, bool must_run = true);
  // The planned piece ran: logits [rows.logit_rows.size(), vocab], the rows Plan asked for.
  // Returns whether the task is done (t.result complete).
  Result<bool> Finish(DecisionTask& t, const float* logits);
  // Plan, the piece's rows on their own (prefill_chunk rows at most), Finish; with `times`, each
  // phase's wall time added to it.
  Result<bool> Advance(DecisionTask& task, PieceTimes* times = nullptr);
  // Rewinds t to where Begin left it, giving back every page and state slot it holds (a decision
  // that has to wait for memory starts over later: the same bits, as a row's do not depend on how
  // its sequence was split).
  void Restart(DecisionTask& t) const;
  // The pool pages t may still take before it is done, at most: its record's pages not yet taken
  // (none where the prefix cache holds the record) and one question run's (kQuestionPagesAhead).
  // What the engine keeps free for a decision beside others.
  static constexpr int64_t kQuestionPagesAhead = 8;
  int64_t PagesAhead(const DecisionTask& t) const;
  // Pages and state slots a piece's optional runs (those past its first) leave free in the pool:
  // other decisions' next pieces in the same step (the engine sets them before each Plan).
  void set_keep(int64_t pages, int slots) {
    keep_pages_ = pages;
    keep_slots_ = slots;
  }
  void set_prefill_chunk(int tokens) { prefill_chunk_ = tokens; }
  int prefill_chunk() const { return prefill_chunk_; }
  const DecisionLayout& layout() const { return layout_; }
  // Drops the least recently cached prefix (its pages and slot back to the pool, unless a decision
  // in progress still shares them); false when none.
  bool EvictOldest();
  // Whether the prefix cache holds `prefix` under `slot` (a decision on it takes no record rows).
  bool Cached(int32_t slot, const std::vector<int32_t>& prefix) const { return cache_.count({slot, prefix}) > 0; }
  // Forgets every cached prefix (their pages go back to the pool).
  void ClearCache() {
    cache_.clear();
    cache_order_.clear();
  }
  // Forgets the prefixes cached under `slot` (its adapter is going: the slot may next hold another).
  void ForgetSlot(int32_t slot) {
    for (auto it = cache_.begin(); it != cache_.end();) it = it->first.first == slot ? cache_.erase(it) : std::next(it);
    std::erase_if(cache_order_, [&](const auto& k) { return k.first == slot; });
  }

 private:
  Result<SequenceState> NewState();
  Result<DecisionRows> PlanRecord(DecisionTask& t, int max_rows);
  // t's whole record into the prefix cache (its state, shared), the oldest entry giving way past
  // the capacity.
  void Remember(const DecisionTask& t);
  // The next group of questions into t.asked (its runs laid out; nothing run yet).
  Status AskQuestions(DecisionTask& t);
  Result<DecisionRows> PlanRuns(DecisionTask& t, int max_rows, bool must_run);
  // Takes the pages `rows` need now (Model::ReserveRows on a batch of them alone).
  Status ReservePages(const DecisionRows& rows) const;
  // Question i's tokens fit the context after the record (an error naming the question if not).
  Status CheckContext(const DecisionTask& t, size_t i, const QuestionTokens& qt) const;
  // The planned runs' logits read: each run's rows normalised at once on the host's threads, the
  // log-probabilities the choices need kept (first_lp, more_lp).
  Status ReadRuns(DecisionTask& t, const float* logits);
  // Every question of t.asked scored (its runs all done): each choice's log-likelihood, its first
  // token's log-probability plus its later tokens' in order; t.asked cleared.
  Status ScoreAsked(DecisionTask& t);
  const Model& model_;
  Ops& ops_;
  DecisionLayout layout_;
  const AdapterSet& adapters_;
  KvPool* pool_;
  int account_;
  size_t cache_capacity_;
  int prefill_chunk_ = 0;
  int64_t keep_pages_ = 0;
  int keep_slots_ = 0;
  std::map<std::pair<int32_t, std::vector<int32_t>>, std::shared_ptr<SequenceState>> cache_;
  std::deque<std::pair<int32_t, std::vector<int32_t>>> cache_order_;  // oldest first
};

}  // namespace graft

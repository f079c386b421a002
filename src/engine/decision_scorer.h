// DecisionScorer: runs decisions on a model (docs/design.md §4).
//
// The record prefix is computed once per request and every question forks its state (shared
// KV pages, a copy of the recurrent state); with share_prefix = false every question runs from
// scratch instead. A decision is a task (Begin) advanced one piece of work at a time (Advance:
// a piece of the record's prefill, or one question with its choices), so that the engine can
// run other work between pieces; Score runs a task to its end.
// Both give the same bits: a row's logits do not depend on how its sequence is split.
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

// A decision in progress: what Begin made of the request and how far Advance has taken it.
// Owns its states (their pages go back to the pool when it is destroyed).
struct DecisionTask {
  DecisionRequest request;
  int32_t slot = 0;
  bool share_prefix = true;
  const std::atomic<bool>* cancelled = nullptr;
  std::vector<int32_t> prefix;     // the record's tokens (instructions and record)
  size_t prefilled = 0;            // prefix tokens already in prefix_state
  bool prefix_ready = false;       // the prefix is computed (or came from the cache)
  SequenceState prefix_state;
  size_t question = 0;             // questions scored so far
  // Questions run together whose tokens are done and whose multi-token choices' heads are the
  // next piece (ScoreQuestionsTogether's two steps are two pieces).
  struct AskedQuestions {
    size_t first = 0;                  // the first one's index
    std::vector<QuestionTokens> tokens;
    std::vector<SequenceState> states;  // each on its fork of the record, after its tokens
    std::vector<float> first_rows;      // [questions, vocab] the row after each question
  };
  std::optional<AskedQuestions> asked;
  std::vector<std::string> answers;
  DecisionResult result;           // complete once Advance returns true
  int pieces = 0;                  // Advance calls that did work
};

class DecisionScorer {
 public:
  // pool: where the states live (nullptr: the model's own growable pool).
  DecisionScorer(const Model& model, Ops& ops, const Tokenizer& tok, const ChatTemplate& tmpl,
                 const AdapterSet& adapters, KvPool* pool = nullptr, size_t prefix_cache_entries = 4)
      : model_(model), ops_(ops), layout_(tok, tmpl), adapters_(adapters), pool_(pool),
        cache_capacity_(prefix_cache_entries) {}

  // Scores every question of `r` with the rows selecting `adapter_slot`. The record is prefilled
  // in pieces of prefill_chunk tokens (0: at once; a row's bits do not depend on it), and
  // `cancelled`, when set, stops the work between pieces and questions with kCancelled.
  Result<DecisionResult> Score(const DecisionRequest& r, int32_t adapter_slot, bool share_prefix = true,
                               const std::atomic<bool>* cancelled = nullptr);
  // Score in steps: Begin lays the request out (errors: a record or question longer than the
  // context, a bad request), then each Advance runs one piece — the next prefill_chunk tokens of
  // the record (its cache entry made after the last; a cached record is one piece), else the
  // questions: as many together as the pool holds and (with prefill_chunk > 0) as fit in
  // prefill_chunk tokens, at least one, when they are independent (not joint, on a shared
  // record) — their tokens one piece, their multi-token choices' heads the next — one at a time
  // in joint mode; and returns true once every question is scored (task.result).
  // The result's bits do not depend on how the work was split. `cancelled` is checked at the
  // start of every piece (kCancelled).
  Result<DecisionTask> Begin(const DecisionRequest& r, int32_t adapter_slot, bool share_prefix = true,
                             const std::atomic<bool>* cancelled = nullptr);
  Result<bool> Advance(DecisionTask& task);
  void set_prefill_chunk(int tokens) { prefill_chunk_ = tokens; }
  int prefill_chunk() const { return prefill_chunk_; }
  const DecisionLayout& layout() const { return layout_; }
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
  // Runs ids on st; logits (resized) receives the rows `which` selects.
  Status Forward(const std::vector<int32_t>& ids, SequenceState& st, int32_t slot, const LogitRows& which,
                 std::vector<float>* logits);
  Result<SequenceState> NewState();
  Status PrefillPiece(DecisionTask& t);
  // Question i's tokens fit the context after the record (an error naming the question if not).
  Status CheckContext(const DecisionTask& t, size_t i, const QuestionTokens& qt) const;
  // Question i's result into t: each choice's log-likelihood from the row after the question
  // (first_row) and, for a multi-token choice c, the rows head_rows(c) gives after its tokens but
  // the last.
  Status AddQuestion(DecisionTask& t, size_t i, const QuestionTokens& qt, const float* first_row,
                     const std::function<Result<const float*>(size_t)>& head_rows);
  Status ScoreQuestion(DecisionTask& t);
  // The next independent questions (not joint, on a shared record) at once — as many as the
  // pool's free state slots and pages hold: their tokens in one step (this piece; t.asked holds
  // them after it), then the heads of their multi-token choices in a second (ChoiceHeads, the next
  // piece; when not even one question fits so, ScoreQuestion). The bits of ScoreQuestion's, one by
  // one (a row's bits do not depend on its batch).
  Status ScoreQuestionsTogether(DecisionTask& t);
  Status ChoiceHeads(DecisionTask& t);
  const Model& model_;
  Ops& ops_;
  DecisionLayout layout_;
  const AdapterSet& adapters_;
  KvPool* pool_;
  size_t cache_capacity_;
  int prefill_chunk_ = 0;
  std::map<std::pair<int32_t, std::vector<int32_t>>, SequenceState> cache_;
  std::deque<std::pair<int32_t, std::vector<int32_t>>> cache_order_;  // oldest first
};

}  // namespace graft

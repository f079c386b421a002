#include "engine/decision_scorer.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <functional>

namespace graft {
Result<RowLogSoftmax> LogSoftmaxOf(const float* row, int vocab, const std::string& what) {
  double mx = row[0];
  for (int v = 0; v < vocab; ++v) {
    if (!std::isfinite(row[v])) {
      return Internal(fmt::format("{}: the model's logit for token {} is {} (non-finite: the weights, the adapter or "
                                  "the arithmetic produced it), so no probability can be given",
                                  what, v, std::isnan(row[v]) ? "NaN" : row[v] > 0 ? "+inf" : "-inf"));
    }
    mx = std::max<double>(mx, row[v]);
  }
  double z = 0;
  for (int v = 0; v < vocab; ++v) z += std::exp(static_cast<double>(row[v]) - mx);
  return RowLogSoftmax{row, mx, std::log(z)};
}

Result<double> ChoiceLogProb(const float* row, int vocab, int32_t token, const std::string& what) {
  GRAFT_ASSIGN_OR_RETURN(const RowLogSoftmax ls, LogSoftmaxOf(row, vocab, what));
  return ls.LogProb(token);
}

Status DecisionScorer::Forward(const std::vector<int32_t>& ids, SequenceState& st, int32_t slot, const LogitRows& which,
                               std::vector<float>* logits) {
  const int vocab = model_.config().vocab_size;
  std::vector<float> local;
  std::vector<float>& out = logits ? *logits : local;
  out.resize(static_cast<size_t>(which.count(static_cast<int>(ids.size()))) * vocab);
  return model_.Forward(ops_, ids.data(), static_cast<int>(ids.size()), st, out.data(), slot, &adapters_, which);
}

Result<SequenceState> DecisionScorer::NewState() {
  if (pool_) return model_.NewState(*pool_);
  return model_.NewState(ops_);
}

Result<DecisionTask> DecisionScorer::Begin(const DecisionRequest& r, int32_t slot, bool share_prefix,
                                           const std::atomic<bool>* cancelled) {
  const int ctx = model_.config().max_position_embeddings;
  DecisionTask t;
  t.request = r;
  t.slot = slot;
  t.share_prefix = share_prefix;
  t.cancelled = cancelled;
  t.result.model = r.model;
  GRAFT_ASSIGN_OR_RETURN(t.prefix, layout_.Prefix(r));
  t.result.record_tokens = static_cast<int>(t.prefix.size());
  if (ctx > 0 && t.prefix.size() >= static_cast<size_t>(ctx)) {
    return InvalidArgument(fmt::format("the record needs {} tokens; the model's context is {}", t.prefix.size(), ctx));
  }
  GRAFT_ASSIGN_OR_RETURN(t.prefix_state, NewState());
  t.prefix_ready = !share_prefix || t.prefix.empty();
  return t;
}

Status DecisionScorer::PrefillPiece(DecisionTask& t) {
  auto key = std::make_pair(t.slot, t.prefix);
  if (t.prefilled == 0) {
    auto hit = cache_.find(key);
    if (hit != cache_.end()) {
      GRAFT_ASSIGN_OR_RETURN(t.prefix_state, hit->second.Fork());
      t.result.cached_tokens = static_cast<int>(t.prefix.size());
      t.prefilled = t.prefix.size();
      t.prefix_ready = true;
      return Status::Ok();
    }
  }
  const size_t piece = prefill_chunk_ > 0 ? static_cast<size_t>(prefill_chunk_) : t.prefix.size();
  const size_t end = std::min(t.prefix.size(), t.prefilled + piece);
  const std::vector<int32_t> part(t.prefix.begin() + static_cast<std::ptrdiff_t>(t.prefilled),
                                  t.prefix.begin() + static_cast<std::ptrdiff_t>(end));
  GRAFT_RETURN_IF_ERROR(Forward(part, t.prefix_state, t.slot, LogitRows::None(), nullptr));
  t.prefilled = end;
  if (t.prefilled < t.prefix.size()) return Status::Ok();
  t.prefix_ready = true;
  if (cache_capacity_ > 0) {
    if (cache_.size() >= cache_capacity_) {
      cache_.erase(cache_order_.front());
      cache_order_.pop_front();
    }
    GRAFT_ASSIGN_OR_RETURN(SequenceState kept, t.prefix_state.Fork());
    cache_.emplace(key, std::move(kept));
    cache_order_.push_back(std::move(key));
  }
  return Status::Ok();
}

Status DecisionScorer::CheckContext(const DecisionTask& t, size_t i, const QuestionTokens& qt) const {
  const int ctx = model_.config().max_position_embeddings;
  size_t longest = 0;
  for (const auto& c : qt.choices) longest = std::max(longest, c.size());
  if (ctx > 0 && t.prefix.size() + qt.rest.size() + longest > static_cast<size_t>(ctx)) {
    return InvalidArgument(fmt::format("question '{}' needs {} tokens; the model's context is {}", t.request.questions[i].id,
                                       t.prefix.size() + qt.rest.size() + longest, ctx));
  }
  if (qt.rest.empty()) return Internal("decision layout produced an empty question");
  return Status::Ok();
}

Status DecisionScorer::AddQuestion(DecisionTask& t, size_t i, const QuestionTokens& qt, const float* first_row,
                                   const std::function<Result<const float*>(size_t)>& head_rows) {
  const int vocab = model_.config().vocab_size;
  const DecisionQuestion& dq = t.request.questions[i];
  t.result.question_tokens += static_cast<int>(qt.rest.size());
  QuestionResult q;
  q.id = dq.id;
  // The row after the question is every choice's first: normalised once (a vocabulary's worth of
  // exponentials on the host, ~1 ms at 248K tokens).
  GRAFT_ASSIGN_OR_RETURN(const RowLogSoftmax first,
                         LogSoftmaxOf(first_row, vocab, fmt::format("question '{}', choice '{}'", dq.id, dq.choices[0])));
  for (size_t c = 0; c < qt.choices.size(); ++c) {
    const auto& toks = qt.choices[c];
    const std::string what = fmt::format("question '{}', choice '{}'", dq.id, dq.choices[c]);
    double lp = first.LogProb(toks[0]);
    if (toks.size() > 1) {
      GRAFT_ASSIGN_OR_RETURN(const float* rows, head_rows(c));
      for (size_t k = 1; k < toks.size(); ++k) {
        GRAFT_ASSIGN_OR_RETURN(double more_lp, ChoiceLogProb(rows + (k - 1) * static_cast<size_t>(vocab), vocab, toks[k], what));
        lp += more_lp;
      }
      t.result.question_tokens += static_cast<int>(toks.size() - 1);
    }
    q.scores.push_back({dq.choices[c], lp, 0.0});
  }
  FinishQuestion(q);
  t.answers.push_back(q.choice);
  t.result.questions.push_back(std::move(q));
  return Status::Ok();
}

Status DecisionScorer::ScoreQuestion(DecisionTask& t) {
  const size_t i = t.question;
  GRAFT_ASSIGN_OR_RETURN(QuestionTokens qt, layout_.Question(t.request, i, t.answers));
  GRAFT_RETURN_IF_ERROR(CheckContext(t, i, qt));
  SequenceState st;
  if (t.share_prefix) {
    GRAFT_ASSIGN_OR_RETURN(st, t.prefix_state.Fork());
  } else {
    GRAFT_ASSIGN_OR_RETURN(st, NewState());
  }
  std::vector<int32_t> run = qt.rest;
  if (!t.share_prefix) run.insert(run.begin(), t.prefix.begin(), t.prefix.end());
  std::vector<float> logits, more;
  GRAFT_RETURN_IF_ERROR(Forward(run, st, t.slot, LogitRows::Only({static_cast<int32_t>(run.size() - 1)}), &logits));
  // A multi-token choice's rows: its tokens but the last on a fork of the question, one at a time.
  auto head_rows = [&](size_t c) -> Result<const float*> {
    GRAFT_ASSIGN_OR_RETURN(SequenceState cs, st.Fork());
    const std::vector<int32_t> head(qt.choices[c].begin(), qt.choices[c].end() - 1);
    GRAFT_RETURN_IF_ERROR(Forward(head, cs, t.slot, LogitRows{}, &more));
    return more.data();
  };
  GRAFT_RETURN_IF_ERROR(AddQuestion(t, i, qt, logits.data(), head_rows));
  ++t.question;
  return Status::Ok();
}

Status DecisionScorer::ScoreQuestionsTogether(DecisionTask& t) {
  const DecisionRequest& r = t.request;
  const int vocab = model_.config().vocab_size;
  // The questions from t.question on that fit the pool's free state slots and pages at once
  // (each its fork and one a multi-token choice; pages for their tokens, a partial page each
  // copied on write).
  // With prefill pieces (prefill_chunk > 0) a piece of questions also keeps to that many tokens
  // (at least one question), so the chat steps between pieces wait for no more than a record piece.
  std::vector<QuestionTokens> qts;
  int64_t slots = 0, pages = 0, tokens = 0;
  for (size_t i = t.question; i < r.questions.size(); ++i) {
    GRAFT_ASSIGN_OR_RETURN(QuestionTokens qt, layout_.Question(r, i, {}));
    GRAFT_RETURN_IF_ERROR(CheckContext(t, i, qt));
    int64_t q_tokens = static_cast<int64_t>(qt.rest.size());
    for (const auto& c : qt.choices) q_tokens += c.size() < 2 ? 0 : static_cast<int64_t>(c.size()) - 1;
    if (prefill_chunk_ > 0 && !qts.empty() && tokens + q_tokens > prefill_chunk_) break;
    int64_t s = 1, p = 0;
    if (pool_ != nullptr) p = static_cast<int64_t>(qt.rest.size()) / pool_->page_size() + 2;
    for (const auto& c : qt.choices) {
      if (c.size() < 2) continue;
      ++s;
      if (pool_ != nullptr) p += static_cast<int64_t>(c.size()) / pool_->page_size() + 2;
    }
    const bool fits = pool_ == nullptr || ((!pool_->has_gdn() || slots + s <= pool_->free_slots()) &&
                                           pages + p <= pool_->free_pages());
    if (!fits) break;
    slots += s;
    pages += p;
    tokens += q_tokens;
    qts.push_back(std::move(qt));
  }
  // Not even the next question with all its choices' forks at once: it alone, a choice at a time.
  if (qts.empty()) return ScoreQuestion(t);
  const size_t n = qts.size();
  // Step 1 (this piece): every question's tokens, each on its own fork of the record.
  DecisionTask::AskedQuestions asked;
  asked.first = t.question;
  asked.states.resize(n);
  StepBatch batch;
  std::vector<int32_t> last_rows;
  for (size_t i = 0; i < n; ++i) {
    GRAFT_ASSIGN_OR_RETURN(asked.states[i], t.prefix_state.Fork());
  }
  for (size_t i = 0; i < n; ++i) {
    batch.Add(&asked.states[i], qts[i].rest.data(), static_cast<int>(qts[i].rest.size()), t.slot);
    last_rows.push_back(batch.rows() - 1);
  }
  batch.logits = LogitRows::Only(last_rows);
  asked.first_rows.resize(n * static_cast<size_t>(vocab));
  GRAFT_RETURN_IF_ERROR(model_.Forward(ops_, batch, adapters_, asked.first_rows.data()));
  asked.tokens = std::move(qts);
  t.question = asked.first + n;
  t.asked = std::move(asked);
  // Without multi-token choices there are no heads to run: the questions are scored now.
  bool heads = false;
  for (const auto& qt : t.asked->tokens) {
    for (const auto& c : qt.choices) heads |= c.size() > 1;
  }
  return heads ? Status::Ok() : ChoiceHeads(t);
}

Status DecisionScorer::ChoiceHeads(DecisionTask& t) {
  const int vocab = model_.config().vocab_size;
  DecisionTask::AskedQuestions asked = std::move(*t.asked);
  t.asked.reset();
  const size_t n = asked.tokens.size();
  const auto& qts = asked.tokens;
  // Step 2: every choice longer than a token, its tokens but the last on a fork of its question;
  // head_row0[i][c] is where its rows start.
  std::vector<std::vector<int>> head_row0(n);
  std::vector<SequenceState> head_states;
  std::vector<std::vector<int32_t>> head_tokens;
  for (size_t i = 0; i < n; ++i) {
    head_row0[i].assign(qts[i].choices.size(), -1);
    for (size_t c = 0; c < qts[i].choices.size(); ++c) {
      if (qts[i].choices[c].size() < 2) continue;
      GRAFT_ASSIGN_OR_RETURN(SequenceState cs, asked.states[i].Fork());
      head_states.push_back(std::move(cs));
      head_tokens.emplace_back(qts[i].choices[c].begin(), qts[i].choices[c].end() - 1);
    }
  }
  std::vector<float> more;
  if (!head_states.empty()) {
    StepBatch hb;
    for (size_t i = 0, h = 0; i < n; ++i) {
      for (size_t c = 0; c < qts[i].choices.size(); ++c) {
        if (qts[i].choices[c].size() < 2) continue;
        head_row0[i][c] = hb.rows();
        hb.Add(&head_states[h], head_tokens[h].data(), static_cast<int>(head_tokens[h].size()), t.slot);
        ++h;
      }
    }
    more.resize(static_cast<size_t>(hb.rows()) * vocab);
    GRAFT_RETURN_IF_ERROR(model_.Forward(ops_, hb, adapters_, more.data()));
  }
  for (size_t i = 0; i < n; ++i) {
    auto head_rows = [&](size_t c) -> Result<const float*> {
      return more.data() + static_cast<size_t>(head_row0[i][c]) * static_cast<size_t>(vocab);
    };
    GRAFT_RETURN_IF_ERROR(
        AddQuestion(t, asked.first + i, qts[i], asked.first_rows.data() + i * static_cast<size_t>(vocab), head_rows));
  }
  return Status::Ok();
}

Result<bool> DecisionScorer::Advance(DecisionTask& t) {
  const auto done = [&] { return t.prefix_ready && t.question >= t.request.questions.size() && !t.asked; };
  if (done()) return true;
  if (t.cancelled && t.cancelled->load()) return Cancelled("the client went away before the decision was done");
  ++t.pieces;
  if (t.asked) {
    GRAFT_RETURN_IF_ERROR(ChoiceHeads(t));
  } else if (!t.prefix_ready) {
    GRAFT_RETURN_IF_ERROR(PrefillPiece(t));
  } else if (!t.request.joint && t.share_prefix) {
    GRAFT_RETURN_IF_ERROR(ScoreQuestionsTogether(t));
  } else {
    GRAFT_RETURN_IF_ERROR(ScoreQuestion(t));
  }
  return done();
}

Result<DecisionResult> DecisionScorer::Score(const DecisionRequest& r, int32_t slot, bool share_prefix,
                                             const std::atomic<bool>* cancelled) {
  GRAFT_ASSIGN_OR_RETURN(DecisionTask t, Begin(r, slot, share_prefix, cancelled));
  while (true) {
    GRAFT_ASSIGN_OR_RETURN(const bool done, Advance(t));
    if (done) break;
  }
  return std::move(t.result);
}

}  // namespace graft

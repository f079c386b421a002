#include "engine/decision_scorer.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <utility>

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

Status DecisionScorer::ReservePages(const DecisionRows& rows) const {
  StepBatch b;
  for (const auto& s : rows.seqs) b.Add(s.state, s.ids, s.n, 0);
  return model_.ReserveRows(b);
}

Result<DecisionRows> DecisionScorer::PlanRecord(DecisionTask& t, int max_rows) {
  DecisionRows rows;
  if (t.prefilled == 0) {
    auto hit = cache_.find(std::make_pair(t.slot, t.prefix));
    if (hit != cache_.end()) {  // no rows at all: the record's state is a fork of the cached one
      GRAFT_ASSIGN_OR_RETURN(t.prefix_state, hit->second.Fork());
      t.result.cached_tokens = static_cast<int>(t.prefix.size());
      t.prefilled = t.prefix.size();
      t.prefix_ready = true;
      return rows;
    }
  }
  const size_t piece = max_rows > 0 ? static_cast<size_t>(max_rows) : t.prefix.size();
  const size_t end = std::min(t.prefix.size(), t.prefilled + piece);
  rows.seqs.push_back({&t.prefix_state, t.prefix.data() + t.prefilled, static_cast<int>(end - t.prefilled)});
  GRAFT_RETURN_IF_ERROR(ReservePages(rows));
  t.planned = 1;
  t.record_end = end;
  return rows;
}

Result<DecisionRows> DecisionScorer::PlanQuestions(DecisionTask& t, int max_rows) {
  const DecisionRequest& r = t.request;
  // Independent questions on a shared record run together; joint ones (each after the answers
  // before it) and those without a shared record one at a time.
  const bool together = !r.joint && t.share_prefix;
  // The questions from t.question on whose forks fit the pool's free state slots and pages at
  // once, their multi-token choices' forks too (a fork each; pages for their tokens, a partial
  // page each copied on write), and (max_rows > 0) max_rows tokens — at least one question.
  std::vector<QuestionTokens> qts;
  int64_t slots = 0, pages = 0, tokens = 0;
  for (size_t i = t.question; i < r.questions.size(); ++i) {
    GRAFT_ASSIGN_OR_RETURN(QuestionTokens qt, layout_.Question(r, i, together ? std::vector<std::string>{} : t.answers));
    GRAFT_RETURN_IF_ERROR(CheckContext(t, i, qt));
    int64_t q_tokens = static_cast<int64_t>(qt.rest.size());
    for (const auto& c : qt.choices) q_tokens += c.size() < 2 ? 0 : static_cast<int64_t>(c.size()) - 1;
    if (max_rows > 0 && !qts.empty() && tokens + q_tokens > max_rows) break;
    int64_t s = 1, p = 0;
    if (pool_ != nullptr) p = static_cast<int64_t>(qt.rest.size()) / pool_->page_size() + 2;
    for (const auto& c : qt.choices) {
      if (c.size() < 2) continue;
      ++s;
      if (pool_ != nullptr) p += static_cast<int64_t>(c.size()) / pool_->page_size() + 2;
    }
    const bool fits = pool_ == nullptr || ((!pool_->has_gdn() || slots + s <= pool_->free_slots()) &&
                                           pages + p <= pool_->free_pages());
    if (!fits && !qts.empty()) break;  // the first goes alone (its heads then run as the pool allows)
    slots += s;
    pages += p;
    tokens += q_tokens;
    qts.push_back(std::move(qt));
    if (!together) break;
  }
  const size_t n = qts.size();
  // Every question's tokens on its own fork of the record (without a shared record: the record
  // and the question on a fresh state), the row after each read.
  DecisionTask::AskedQuestions asked;
  asked.first = t.question;
  asked.states.resize(n);
  for (size_t i = 0; i < n; ++i) {
    if (t.share_prefix) {
      GRAFT_ASSIGN_OR_RETURN(asked.states[i], t.prefix_state.Fork());
    } else {
      GRAFT_ASSIGN_OR_RETURN(asked.states[i], NewState());
      asked.run = t.prefix;
      asked.run.insert(asked.run.end(), qts[i].rest.begin(), qts[i].rest.end());
    }
  }
  DecisionRows rows;
  int row = 0;
  for (size_t i = 0; i < n; ++i) {
    const std::vector<int32_t>& ids = t.share_prefix ? qts[i].rest : asked.run;
    rows.seqs.push_back({&asked.states[i], ids.data(), static_cast<int>(ids.size())});
    row += static_cast<int>(ids.size());
    rows.logit_rows.push_back(row - 1);
  }
  for (size_t i = 0; i < n; ++i) {
    for (size_t c = 0; c < qts[i].choices.size(); ++c) {
      if (qts[i].choices[c].size() < 2) continue;
      DecisionTask::AskedQuestions::Head h;
      h.q = i;
      h.c = c;
      h.ids.assign(qts[i].choices[c].begin(), qts[i].choices[c].end() - 1);
      asked.heads.push_back(std::move(h));
    }
  }
  GRAFT_RETURN_IF_ERROR(ReservePages(rows));
  asked.tokens = std::move(qts);  // the rows point at the vectors' heap storage: moving keeps it
  t.asked = std::move(asked);
  t.question += n;
  t.planned = 2;
  return rows;
}

Result<DecisionRows> DecisionScorer::PlanHeads(DecisionTask& t) {
  DecisionTask::AskedQuestions& a = *t.asked;
  // The next heads whose forks the pool's free slots and pages hold, at least one.
  size_t k = a.heads_done;
  int64_t slots = 0, pages = 0;
  for (; k < a.heads.size(); ++k) {
    const int64_t p = pool_ != nullptr ? static_cast<int64_t>(a.heads[k].ids.size()) / pool_->page_size() + 2 : 0;
    const bool fits = pool_ == nullptr || ((!pool_->has_gdn() || slots + 1 <= pool_->free_slots()) &&
                                           pages + p <= pool_->free_pages());
    if (!fits && k > a.heads_done) break;
    ++slots;
    pages += p;
  }
  DecisionRows rows;
  int row = 0;
  for (size_t h = a.heads_done; h < k; ++h) {
    DecisionTask::AskedQuestions::Head& head = a.heads[h];
    GRAFT_ASSIGN_OR_RETURN(head.state, a.states[head.q].Fork());
    rows.seqs.push_back({&head.state, head.ids.data(), static_cast<int>(head.ids.size())});
    for (size_t j = 0; j < head.ids.size(); ++j) rows.logit_rows.push_back(row++);
  }
  GRAFT_RETURN_IF_ERROR(ReservePages(rows));
  a.heads_running = k - a.heads_done;
  t.planned = 3;
  return rows;
}

Status DecisionScorer::ScoreAsked(DecisionTask& t) {
  const int vocab = model_.config().vocab_size;
  DecisionTask::AskedQuestions a = std::move(*t.asked);
  t.asked.reset();
  for (size_t i = 0; i < a.tokens.size(); ++i) {
    auto head_rows = [&](size_t c) -> Result<const float*> {
      for (const auto& h : a.heads) {
        if (h.q == i && h.c == c) return h.rows.data();
      }
      return Internal("a multi-token choice's head rows are missing");
    };
    GRAFT_RETURN_IF_ERROR(AddQuestion(t, a.first + i, a.tokens[i], a.first_rows.data() + i * static_cast<size_t>(vocab),
                                      head_rows));
  }
  return Status::Ok();
}

Result<DecisionRows> DecisionScorer::Plan(DecisionTask& t, int max_rows) {
  if (t.planned != 0) return Internal("a decision piece is already planned and not finished");
  if (t.done()) return Internal("the decision has no work left");
  if (t.cancelled && t.cancelled->load()) return Cancelled("the client went away before the decision was done");
  ++t.pieces;
  if (t.asked) return PlanHeads(t);
  if (!t.prefix_ready) return PlanRecord(t, max_rows);
  return PlanQuestions(t, max_rows);
}

Result<bool> DecisionScorer::Finish(DecisionTask& t, const float* logits) {
  const int vocab = model_.config().vocab_size;
  switch (std::exchange(t.planned, 0)) {
    case 1:  // a record piece: the prefix cached once whole
      t.prefilled = t.record_end;
      if (t.prefilled < t.prefix.size()) break;
      t.prefix_ready = true;
      if (cache_capacity_ > 0) {
        auto key = std::make_pair(t.slot, t.prefix);
        if (cache_.size() >= cache_capacity_) {
          cache_.erase(cache_order_.front());
          cache_order_.pop_front();
        }
        GRAFT_ASSIGN_OR_RETURN(SequenceState kept, t.prefix_state.Fork());
        cache_.emplace(key, std::move(kept));
        cache_order_.push_back(std::move(key));
      }
      break;
    case 2: {  // the questions' tokens: the row after each
      DecisionTask::AskedQuestions& a = *t.asked;
      a.first_rows.assign(logits, logits + a.tokens.size() * static_cast<size_t>(vocab));
      if (a.heads.empty()) GRAFT_RETURN_IF_ERROR(ScoreAsked(t));
      break;
    }
    case 3: {  // heads: each its rows, its fork given back
      DecisionTask::AskedQuestions& a = *t.asked;
      const float* at = logits;
      for (size_t h = a.heads_done; h < a.heads_done + a.heads_running; ++h) {
        const size_t n = a.heads[h].ids.size() * static_cast<size_t>(vocab);
        a.heads[h].rows.assign(at, at + n);
        at += n;
        a.heads[h].state = SequenceState();
      }
      a.heads_done += a.heads_running;
      a.heads_running = 0;
      if (a.heads_done == a.heads.size()) GRAFT_RETURN_IF_ERROR(ScoreAsked(t));
      break;
    }
    default:  // nothing planned (a cached record)
      break;
  }
  return t.done();
}

Result<bool> DecisionScorer::Advance(DecisionTask& t) {
  if (t.done()) return true;
  GRAFT_ASSIGN_OR_RETURN(const DecisionRows rows, Plan(t, prefill_chunk_));
  std::vector<float> logits;
  if (!rows.seqs.empty()) {
    StepBatch b;
    for (const auto& s : rows.seqs) b.Add(s.state, s.ids, s.n, t.slot);
    b.logits = LogitRows::Only(rows.logit_rows);
    logits.resize(rows.logit_rows.size() * static_cast<size_t>(model_.config().vocab_size));
    GRAFT_RETURN_IF_ERROR(model_.Forward(ops_, b, adapters_, logits.data()));
  }
  return Finish(t, logits.data());
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

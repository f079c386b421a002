#include "engine/decision_scorer.h"

#include <fmt/core.h>

#include <cmath>

namespace graft {
Result<double> ChoiceLogProb(const float* row, int vocab, int32_t token, const std::string& what) {
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
  return static_cast<double>(row[token]) - mx - std::log(z);
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

Status DecisionScorer::ScoreQuestion(DecisionTask& t) {
  const DecisionRequest& r = t.request;
  const size_t i = t.question;
  const int vocab = model_.config().vocab_size;
  const int ctx = model_.config().max_position_embeddings;
  GRAFT_ASSIGN_OR_RETURN(QuestionTokens qt, layout_.Question(r, i, t.answers));
  size_t longest = 0;
  for (const auto& c : qt.choices) longest = std::max(longest, c.size());
  if (ctx > 0 && t.prefix.size() + qt.rest.size() + longest > static_cast<size_t>(ctx)) {
    return InvalidArgument(fmt::format("question '{}' needs {} tokens; the model's context is {}", r.questions[i].id,
                                       t.prefix.size() + qt.rest.size() + longest, ctx));
  }
  SequenceState st;
  if (t.share_prefix) {
    GRAFT_ASSIGN_OR_RETURN(st, t.prefix_state.Fork());
  } else {
    GRAFT_ASSIGN_OR_RETURN(st, NewState());
  }
  std::vector<int32_t> run = qt.rest;
  if (!t.share_prefix) run.insert(run.begin(), t.prefix.begin(), t.prefix.end());
  if (run.empty()) return Internal("decision layout produced an empty question");
  std::vector<float> logits, more;
  GRAFT_RETURN_IF_ERROR(Forward(run, st, t.slot, LogitRows::Only({static_cast<int32_t>(run.size() - 1)}), &logits));
  t.result.question_tokens += static_cast<int>(qt.rest.size());
  const float* last = logits.data();
  QuestionResult q;
  q.id = r.questions[i].id;
  for (size_t c = 0; c < qt.choices.size(); ++c) {
    const auto& toks = qt.choices[c];
    const std::string what = fmt::format("question '{}', choice '{}'", r.questions[i].id, r.questions[i].choices[c]);
    GRAFT_ASSIGN_OR_RETURN(double lp, ChoiceLogProb(last, vocab, toks[0], what));
    if (toks.size() > 1) {
      GRAFT_ASSIGN_OR_RETURN(SequenceState cs, st.Fork());
      std::vector<int32_t> head(toks.begin(), toks.end() - 1);
      GRAFT_RETURN_IF_ERROR(Forward(head, cs, t.slot, LogitRows{}, &more));
      for (size_t j = 1; j < toks.size(); ++j) {
        GRAFT_ASSIGN_OR_RETURN(double more_lp,
                               ChoiceLogProb(more.data() + (j - 1) * static_cast<size_t>(vocab), vocab, toks[j], what));
        lp += more_lp;
      }
      t.result.question_tokens += static_cast<int>(head.size());
    }
    q.scores.push_back({r.questions[i].choices[c], lp, 0.0});
  }
  FinishQuestion(q);
  t.answers.push_back(q.choice);
  t.result.questions.push_back(std::move(q));
  ++t.question;
  return Status::Ok();
}

Result<bool> DecisionScorer::Advance(DecisionTask& t) {
  if (t.question >= t.request.questions.size() && t.prefix_ready) return true;
  if (t.cancelled && t.cancelled->load()) return Cancelled("the client went away before the decision was done");
  ++t.pieces;
  if (!t.prefix_ready) {
    GRAFT_RETURN_IF_ERROR(PrefillPiece(t));
  } else {
    GRAFT_RETURN_IF_ERROR(ScoreQuestion(t));
  }
  return t.prefix_ready && t.question >= t.request.questions.size();
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

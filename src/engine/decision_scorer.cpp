#include "engine/decision_scorer.h"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <thread>
#include <utility>

#include "util/parallel.h"

namespace graft {
namespace {

// The vocabulary in kNormSlices fixed slices: a row's Σ exp(x − max) is each slice's sum in
// order, the slices' sums then added in order — fixed by the vocabulary alone, so a row's value
// never depends on the threads that computed it, and 16 threads can share one row.
constexpr int kNormSlices = 16;

struct Slice {
  int begin, end;
};
Slice SliceOf(int vocab, int s) {
  const int per = (vocab + kNormSlices - 1) / kNormSlices;
  return {std::min(vocab, s * per), std::min(vocab, (s + 1) * per)};
}

// One slice's part of a row: its largest logit and first non-finite one (-1: none), then (a
// second pass, given the row's max) its Σ exp(x − max).
struct SlicePart {
  double max = -INFINITY, sum = 0;
  int bad = -1;
};

Result<RowLogSoftmax> Normalised(const float* row, double max, double log_z, int bad, const std::string& what) {
  if (bad >= 0) {
    const float x = row[bad];
    return Internal(fmt::format("{}: the model's logit for token {} is {} (non-finite: the weights, the adapter or "
                                "the arithmetic produced it), so no probability can be given",
                                what, bad, std::isnan(x) ? "NaN" : x > 0 ? "+inf" : "-inf"));
  }
  return RowLogSoftmax{row, max, log_z};
}

}  // namespace

Result<RowLogSoftmax> LogSoftmaxOf(const float* row, int vocab, const std::string& what) {
  GRAFT_ASSIGN_OR_RETURN(std::vector<RowLogSoftmax> one,
                         LogSoftmaxOfRows({row}, vocab, 1, [&](size_t) { return what; }));
  return one[0];
}

Result<std::vector<RowLogSoftmax>> LogSoftmaxOfRows(const std::vector<const float*>& rows, int vocab, int threads,
                                                    const std::function<std::string(size_t)>& what) {
  if (vocab < 1) return InvalidArgument("log-softmax of an empty row");
  const int64_t tasks = static_cast<int64_t>(rows.size()) * kNormSlices;
  std::vector<SlicePart> parts(static_cast<size_t>(tasks));
  std::vector<double> max(rows.size(), -INFINITY);
  ParallelFor(tasks, threads, [&](int64_t b, int64_t e) {  // each slice's max and first non-finite logit
    for (int64_t i = b; i < e; ++i) {
      const float* row = rows[static_cast<size_t>(i / kNormSlices)];
      const Slice sl = SliceOf(vocab, static_cast<int>(i % kNormSlices));
      SlicePart& p = parts[static_cast<size_t>(i)];
      for (int v = sl.begin; v < sl.end && p.bad < 0; ++v) {
        if (!std::isfinite(row[v])) p.bad = v;
        p.max = std::max<double>(p.max, row[v]);
      }
    }
  });
  std::vector<int> bad(rows.size(), -1);
  for (int64_t i = 0; i < tasks; ++i) {
    const size_t r = static_cast<size_t>(i / kNormSlices);
    const SlicePart& p = parts[static_cast<size_t>(i)];
    if (bad[r] < 0 && p.bad >= 0) bad[r] = p.bad;  // slices in order: the row's first
    max[r] = std::max(max[r], p.max);               // exact in any order
  }
  ParallelFor(tasks, threads, [&](int64_t b, int64_t e) {  // each slice's Σ exp(x − max), in order
    for (int64_t i = b; i < e; ++i) {
      const size_t r = static_cast<size_t>(i / kNormSlices);
      if (bad[r] >= 0) continue;
      const float* row = rows[r];
      const Slice sl = SliceOf(vocab, static_cast<int>(i % kNormSlices));
      double z = 0;
      for (int v = sl.begin; v < sl.end; ++v) z += std::exp(static_cast<double>(row[v]) - max[r]);
      parts[static_cast<size_t>(i)].sum = z;
    }
  });
  std::vector<RowLogSoftmax> out;
  out.reserve(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    double z = 0;
    for (int s = 0; s < kNormSlices; ++s) z += parts[r * kNormSlices + static_cast<size_t>(s)].sum;
    GRAFT_ASSIGN_OR_RETURN(RowLogSoftmax n,
                           Normalised(rows[r], max[r], std::log(z), bad[r], bad[r] >= 0 ? what(r) : std::string()));
    out.push_back(n);
  }
  return out;
}

Result<double> ChoiceLogProb(const float* row, int vocab, int32_t token, const std::string& what) {
  GRAFT_ASSIGN_OR_RETURN(const RowLogSoftmax ls, LogSoftmaxOf(row, vocab, what));
  return ls.LogProb(token);
}

Result<SequenceState> DecisionScorer::NewState() {
  if (pool_) return model_.NewState(*pool_, account_);
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
  if (ctx > 0 && t.prefix.size() >= static_cast<size_t>(ctx)) {
    return InvalidArgument(fmt::format("the record needs {} tokens; the model's context is {}", t.prefix.size(), ctx));
  }
  Restart(t);
  return t;
}

void DecisionScorer::Restart(DecisionTask& t) const {
  t.prefix_state.reset();
  t.prefilled = 0;
  t.prefix_ready = !t.share_prefix || t.prefix.empty();
  t.question = 0;
  t.asked.reset();
  t.planned = DecisionTask::Planned::kNone;
  t.record_end = 0;
  t.answers.clear();
  t.result = DecisionResult();
  t.result.model = t.request.model;
  t.result.record_tokens = static_cast<int>(t.prefix.size());
}

int64_t DecisionScorer::PagesAhead(const DecisionTask& t) const {
  if (pool_ == nullptr) return 0;
  const int64_t ps = pool_->page_size();
  // The record's pages still to take (none once it is whole, nor for a record the prefix cache
  // holds: it is shared as it is), then one run's: a question's tokens and a choice's, with a
  // partial page copied on write.
  const bool cached = !t.prefix_ready && t.prefilled == 0 && t.share_prefix && Cached(t.slot, t.prefix);
  const int64_t record =
      t.prefix_ready || cached ? 0 : (static_cast<int64_t>(t.prefix.size() - t.prefilled) + ps - 1) / ps;
  return record + kQuestionPagesAhead;
}

bool DecisionScorer::EvictOldest() {
  if (cache_order_.empty()) return false;
  cache_.erase(cache_order_.front());
  cache_order_.pop_front();
  return true;
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

Status DecisionScorer::ReservePages(const DecisionRows& rows) const {
  StepBatch b;
  for (const auto& s : rows.seqs) b.Add(s.state, s.ids, s.n, 0);
  return model_.ReserveRows(b);
}

Result<DecisionRows> DecisionScorer::PlanRecord(DecisionTask& t, int max_rows) {
  DecisionRows rows;
  if (t.prefilled == 0) {
    auto hit = cache_.find(std::make_pair(t.slot, t.prefix));
    if (hit != cache_.end()) {  // no rows at all: the record's state is the cached one, shared
      t.prefix_state = hit->second;
      t.result.cached_tokens = static_cast<int>(t.prefix.size());
      t.prefilled = t.prefix.size();
      t.prefix_ready = true;
      return rows;
    }
  }
  if (!t.prefix_state) {
    GRAFT_ASSIGN_OR_RETURN(SequenceState fresh, NewState());
    t.prefix_state = std::make_shared<SequenceState>(std::move(fresh));
  }
  const size_t piece = max_rows > 0 ? static_cast<size_t>(max_rows) : t.prefix.size();
  const size_t end = std::min(t.prefix.size(), t.prefilled + piece);
  rows.seqs.push_back({t.prefix_state.get(), t.prefix.data() + t.prefilled, static_cast<int>(end - t.prefilled)});
  GRAFT_RETURN_IF_ERROR(ReservePages(rows));
  t.planned = DecisionTask::Planned::kRecord;
  t.record_end = end;
  return rows;
}

Status DecisionScorer::AskQuestions(DecisionTask& t) {
  const DecisionRequest& r = t.request;
  // Independent questions on a shared record are asked together; joint ones (each after the
  // answers before it) and those without a shared record one at a time.
  const bool together = !r.joint && t.share_prefix;
  DecisionTask::AskedQuestions asked;
  asked.first = t.question;
  for (size_t i = t.question; i < r.questions.size(); ++i) {
    GRAFT_ASSIGN_OR_RETURN(QuestionTokens qt, layout_.Question(r, i, together ? std::vector<std::string>{} : t.answers));
    GRAFT_RETURN_IF_ERROR(CheckContext(t, i, qt));
    const size_t q = asked.tokens.size();
    std::vector<int32_t> head = t.share_prefix ? std::vector<int32_t>{} : t.prefix;
    head.insert(head.end(), qt.rest.begin(), qt.rest.end());
    bool first = true;
    for (size_t c = 0; c < qt.choices.size(); ++c) {
      if (qt.choices[c].size() < 2) continue;
      DecisionTask::AskedQuestions::Run run;
      run.q = q;
      run.c = static_cast<int>(c);
      run.first = std::exchange(first, false);
      run.ids = head;
      run.ids.insert(run.ids.end(), qt.choices[c].begin(), qt.choices[c].end() - 1);
      asked.runs.push_back(std::move(run));
    }
    if (first) {  // single-token choices only: the question alone
      DecisionTask::AskedQuestions::Run run;
      run.q = q;
      run.first = true;
      run.ids = std::move(head);
      asked.runs.push_back(std::move(run));
    }
    asked.tokens.push_back(std::move(qt));
    if (!together) break;
  }
  asked.first_lp.resize(asked.tokens.size());
  t.question += asked.tokens.size();
  t.asked = std::move(asked);
  return Status::Ok();
}

Result<DecisionRows> DecisionScorer::PlanRuns(DecisionTask& t, int max_rows, bool must_run) {
  DecisionTask::AskedQuestions& a = *t.asked;
  // An empty record (nothing to prefill) still needs a state to fork.
  if (t.share_prefix && !t.prefix_state) {
    GRAFT_ASSIGN_OR_RETURN(SequenceState fresh, NewState());
    t.prefix_state = std::make_shared<SequenceState>(std::move(fresh));
  }
  // The next runs whose forks the pool's free state slots and pages hold (pages for their tokens,
  // a partial page each copied on write) beside what is kept for other decisions (set_keep) and,
  // with max_rows > 0, whose rows fit in it: at least one.
  size_t k = a.runs_done;
  int64_t slots = 0, pages = 0, rows_in = 0;
  for (; k < a.runs.size(); ++k) {
    const int64_t n = static_cast<int64_t>(a.runs[k].ids.size());
    const int64_t p = pool_ != nullptr ? n / pool_->page_size() + 2 : 0;
    const bool fits = (max_rows <= 0 || rows_in + n <= max_rows) &&
                      (pool_ == nullptr || ((!pool_->has_gdn() || slots + 1 + keep_slots_ <= pool_->free_slots(account_)) &&
                                            pages + p + keep_pages_ <= pool_->free_pages(account_)));
    if (!fits && (k > a.runs_done || !must_run)) break;
    ++slots;
    pages += p;
    rows_in += n;
  }
  DecisionRows rows;
  if (k == a.runs_done) return rows;  // (must_run false: not even one run fits)
  int row = 0;
  for (size_t j = a.runs_done; j < k; ++j) {
    DecisionTask::AskedQuestions::Run& run = a.runs[j];
    if (t.share_prefix) {
      GRAFT_ASSIGN_OR_RETURN(run.state, t.prefix_state->Fork());
    } else {
      GRAFT_ASSIGN_OR_RETURN(run.state, NewState());
    }
    const int n = static_cast<int>(run.ids.size());
    rows.seqs.push_back({&run.state, run.ids.data(), n});
    // The row after the question (its last token) where this run gives it, then the choice's rows.
    const int choice_rows =
        run.c < 0 ? 0 : static_cast<int>(a.tokens[run.q].choices[static_cast<size_t>(run.c)].size()) - 1;
    const int after_question = row + n - 1 - choice_rows;
    for (int r = run.first ? after_question : after_question + 1; r < row + n; ++r) rows.logit_rows.push_back(r);
    row += n;
  }
  GRAFT_RETURN_IF_ERROR(ReservePages(rows));
  a.runs_running = k - a.runs_done;
  t.planned = DecisionTask::Planned::kRuns;
  return rows;
}

Status DecisionScorer::ReadRuns(DecisionTask& t, const float* logits) {
  const int vocab = model_.config().vocab_size;
  DecisionTask::AskedQuestions& a = *t.asked;
  // The piece's logit rows in order: per run, the row after the question where it gives it, then
  // its choice's rows; each row's token and what it scores.
  struct Read {
    size_t run;
    int k;  // -1: the row after the question (every choice's first token); else the choice's token k + 1
  };
  std::vector<const float*> rows;
  std::vector<Read> reads;
  const float* at = logits;
  for (size_t j = a.runs_done; j < a.runs_done + a.runs_running; ++j) {
    const DecisionTask::AskedQuestions::Run& run = a.runs[j];
    const int more = run.c < 0 ? 0 : static_cast<int>(a.tokens[run.q].choices[static_cast<size_t>(run.c)].size()) - 1;
    for (int k = run.first ? -1 : 0; k < more; ++k, at += vocab) {
      rows.push_back(at);
      reads.push_back({j, k});
    }
  }
  auto name = [&](size_t i) {
    const DecisionTask::AskedQuestions::Run& run = a.runs[reads[i].run];
    const DecisionQuestion& dq = t.request.questions[a.first + run.q];
    return fmt::format("question '{}', choice '{}'", dq.id, dq.choices[run.c < 0 ? 0 : static_cast<size_t>(run.c)]);
  };
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  GRAFT_ASSIGN_OR_RETURN(const std::vector<RowLogSoftmax> norms, LogSoftmaxOfRows(rows, vocab, threads, name));
  for (size_t i = 0; i < reads.size(); ++i) {
    DecisionTask::AskedQuestions::Run& run = a.runs[reads[i].run];
    const QuestionTokens& qt = a.tokens[run.q];
    if (reads[i].k < 0) {
      for (const auto& toks : qt.choices) a.first_lp[run.q].push_back(norms[i].LogProb(toks[0]));
    } else {
      run.more_lp.push_back(norms[i].LogProb(qt.choices[static_cast<size_t>(run.c)][static_cast<size_t>(reads[i].k) + 1]));
    }
  }
  return Status::Ok();
}

Status DecisionScorer::ScoreAsked(DecisionTask& t) {
  DecisionTask::AskedQuestions a = std::move(*t.asked);
  t.asked.reset();
  for (size_t i = 0; i < a.tokens.size(); ++i) {
    const QuestionTokens& qt = a.tokens[i];
    const DecisionQuestion& dq = t.request.questions[a.first + i];
    if (a.first_lp[i].size() != qt.choices.size()) return Internal("a question's row was not read");
    t.result.question_tokens += static_cast<int>(qt.rest.size());
    QuestionResult q;
    q.id = dq.id;
    for (size_t c = 0; c < qt.choices.size(); ++c) {
      double lp = a.first_lp[i][c];
      if (qt.choices[c].size() > 1) {
        const auto run = std::find_if(a.runs.begin(), a.runs.end(),
                                      [&](const auto& r) { return r.q == i && r.c == static_cast<int>(c); });
        if (run == a.runs.end() || run->more_lp.size() + 1 != qt.choices[c].size()) {
          return Internal("a multi-token choice's rows are missing");
        }
        for (double more : run->more_lp) lp += more;
        t.result.question_tokens += static_cast<int>(qt.choices[c].size() - 1);
      }
      q.scores.push_back({dq.choices[c], lp, 0.0});
    }
    FinishQuestion(q);
    t.answers.push_back(q.choice);
    t.result.questions.push_back(std::move(q));
  }
  return Status::Ok();
}

Result<DecisionRows> DecisionScorer::Plan(DecisionTask& t, int max_rows, bool must_run) {
  if (t.planned != DecisionTask::Planned::kNone) return Internal("a decision piece is already planned and not finished");
  if (t.done()) return Internal("the decision has no work left");
  if (t.cancelled && t.cancelled->load()) return Cancelled("the client went away before the decision was done");
  ++t.pieces;
  if (!t.prefix_ready) return PlanRecord(t, max_rows);
  if (!t.asked) GRAFT_RETURN_IF_ERROR(AskQuestions(t));
  GRAFT_ASSIGN_OR_RETURN(DecisionRows rows, PlanRuns(t, max_rows, must_run));
  if (rows.seqs.empty()) --t.pieces;  // none planned
  return rows;
}

void DecisionScorer::Remember(const DecisionTask& t) {
  if (cache_capacity_ == 0) return;
  auto key = std::make_pair(t.slot, t.prefix);
  if (cache_.count(key)) return;  // (another decision computed the same record meanwhile)
  if (cache_.size() >= cache_capacity_) EvictOldest();
  cache_.emplace(key, t.prefix_state);  // shared: the state is whole and never written again
  cache_order_.push_back(std::move(key));
}

Result<bool> DecisionScorer::Finish(DecisionTask& t, const float* logits) {
  switch (std::exchange(t.planned, DecisionTask::Planned::kNone)) {
    case DecisionTask::Planned::kRecord:  // a record piece: the prefix cached once whole
      t.prefilled = t.record_end;
      if (t.prefilled < t.prefix.size()) break;
      t.prefix_ready = true;
      Remember(t);
      break;
    case DecisionTask::Planned::kRuns: {  // the questions' runs: the row after each question, each choice's rows
      GRAFT_RETURN_IF_ERROR(ReadRuns(t, logits));
      DecisionTask::AskedQuestions& a = *t.asked;
      for (size_t j = a.runs_done; j < a.runs_done + a.runs_running; ++j) {
        a.runs[j].state = SequenceState();  // its pages and slot back to the pool
      }
      a.runs_done += a.runs_running;
      a.runs_running = 0;
      if (a.runs_done == a.runs.size()) GRAFT_RETURN_IF_ERROR(ScoreAsked(t));
      break;
    }
    case DecisionTask::Planned::kNone:  // nothing planned (a cached record)
      break;
  }
  return t.done();
}

Result<bool> DecisionScorer::Advance(DecisionTask& t, PieceTimes* times) {
  if (t.done()) return true;
  using Clock = std::chrono::steady_clock;
  auto add = [&](double PieceTimes::*phase, Clock::time_point since) {
    if (times != nullptr) times->*phase += std::chrono::duration<double>(Clock::now() - since).count();
  };
  auto t0 = Clock::now();
  GRAFT_ASSIGN_OR_RETURN(const DecisionRows rows, Plan(t, prefill_chunk_));
  add(&PieceTimes::plan, t0);
  t0 = Clock::now();
  std::vector<float> logits;
  if (!rows.seqs.empty()) {
    StepBatch b;
    for (const auto& s : rows.seqs) b.Add(s.state, s.ids, s.n, t.slot);
    b.logits = LogitRows::Only(rows.logit_rows);
    logits.resize(rows.logit_rows.size() * static_cast<size_t>(model_.config().vocab_size));
    GRAFT_RETURN_IF_ERROR(model_.Forward(ops_, b, adapters_, logits.data()));
  }
  add(&PieceTimes::forward, t0);
  t0 = Clock::now();
  Result<bool> done = Finish(t, logits.data());
  add(&PieceTimes::finish, t0);
  return done;
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

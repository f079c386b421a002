#include "engine/engine.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>

namespace graft {
struct Engine::Live {
  int64_t id = 0;
  GenerationRequest req;
  SchedSeq sched;
  SequenceState state;
  std::unique_ptr<TokenConstraint> constraint;  // structured output, or null
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<StreamDecoder> decoder;
  int32_t next_token = -1;  // sampled, not yet fed to the model
  int generated = 0;
  std::string held;         // decoded text not yet emitted (a stop string may be starting)
  std::vector<TokenLogprob> held_logprobs;
  std::vector<TokenLogprob> prompt_lps;  // prompt_logprobs: gathered over the prefill chunks
  bool done = false;
  bool failed = false;       // a step failed on it: its cache is not kept
  int cached_tokens = 0;     // prompt tokens continued from the prefix cache
  std::vector<int32_t> fed;  // generated tokens that went through the model (every one but the last)
  // After a preemption: the tokens it prefills again (the prompt, then fed), the first fed_in_input
  // of `fed` among them; empty before (the prompt itself).
  std::vector<int32_t> input;
  size_t fed_in_input = 0;
  const std::vector<int32_t>& Input() const { return input.empty() ? req.prompt : input; }
  // Prefilling its tokens so far after a preemption: its prompt went through once already (its
  // prompt logprobs too).
  bool Recomputing() const { return !input.empty(); }
  // The timeline (RequestTimes): submitted, first scheduled, first and last token.
  std::chrono::steady_clock::time_point submitted, scheduled, first_token, last_token;
  bool was_scheduled = false;
  std::vector<double> itl;
};

Engine::Engine(const EngineConfig& cfg, const Model& model, std::unique_ptr<Ops> ops, const Tokenizer& tok,
               const ChatTemplate& tmpl, const AdapterSet& adapters, StepRunner run_step)
    : cfg_(cfg),
      model_(model),
      ops_(std::move(ops)),
      run_step_(std::move(run_step)),
      tok_(tok),
      adapters_(adapters),
      pool_(model.NewPool(cfg.page_size, static_cast<int>((cfg.kv_token_budget + cfg.page_size - 1) / cfg.page_size),
                          cfg.max_running + DecisionSlots(std::max(cfg.max_decisions, 1)), /*growable=*/false,
                          ops_->pool_memory())),
      scorer_(model, *ops_, tok, tmpl, adapters_, pool_.get(), kDecisionCacheEntries, kDecisionAccount),
      sched_(cfg.max_step_tokens, cfg.kv_token_budget, cfg.page_size, cfg.max_running),
      prefix_cache_(static_cast<size_t>(std::max(cfg.prefix_cache_entries, 0))) {
  cfg_.max_decisions = std::max(cfg_.max_decisions, 1);
  // The decisions' part is a part of the pool: a cap past it is the pool (else a decision larger
  // than the pool would wait for room that can never come instead of failing).
  cfg_.decision_kv_tokens = std::min(cfg_.decision_kv_tokens, cfg_.kv_token_budget);
  scorer_.set_prefill_chunk(cfg.decision_prefill_chunk);
  // State slots are each account's own (a slot is a whole sequence's recurrent state); pages are
  // shared, the decisions' capped before each use (CapDecisions).
  pool_->set_slot_cap(kChatAccount, cfg.max_running);
  pool_->set_slot_cap(kDecisionAccount, DecisionSlots(cfg_.max_decisions));
  pool_->set_reclaimer([this](int account) { return ReclaimFor(account); });
  stats_.kv_budget = cfg.kv_token_budget;
  stats_.pool_bytes = pool_->bytes();
  thread_ = std::thread([this] { Loop(); });
}

Engine::~Engine() { Stop(); }

Status Engine::PoolsReserved() const {
  return pool_->reserved().WithContext("the KV pool (--kv-tokens, --max-running, --max-decisions)");
}

void Engine::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Status Engine::Submit(GenerationRequest req) {
  const int ctx = model_.config().max_position_embeddings;
  const int64_t need = static_cast<int64_t>(req.prompt.size()) + req.max_tokens;
  if (req.prompt.empty()) return InvalidArgument("the prompt is empty");
  if (ctx > 0 && need > ctx) {
    return InvalidArgument(fmt::format("the prompt ({} tokens) plus max_tokens ({}) exceeds the model's context of {} tokens",
                                       req.prompt.size(), req.max_tokens, ctx));
  }
  if (need > cfg_.kv_token_budget) {
    return InvalidArgument(fmt::format("the prompt plus max_tokens ({} tokens) exceeds the KV pool of {} tokens (--kv-tokens)",
                                       need, cfg_.kv_token_budget));
  }
  if (req.adapter_slot < 0 || static_cast<size_t>(req.adapter_slot) >= adapters_.slots.size()) {
    return InvalidArgument("unknown adapter slot");
  }
  for (int32_t t : req.prompt) {
    if (t < 0 || t >= model_.config().vocab_size) return InvalidArgument(fmt::format("token {} is outside the vocabulary", t));
  }
  GRAFT_RETURN_IF_ERROR(ValidateSamplingParams(req.sampling, model_.config().vocab_size));
  for (int32_t t : req.stop_tokens) {
    if (t < 0 || t >= model_.config().vocab_size) {
      return InvalidArgument(fmt::format("stop token {} is outside the vocabulary (0..{})", t, model_.config().vocab_size - 1));
    }
  }
  if (req.min_tokens < 0 || req.min_tokens > req.max_tokens) {
    return InvalidArgument(fmt::format("min_tokens {} must be in [0, max_tokens = {}]", req.min_tokens, req.max_tokens));
  }
  if (req.snapshot_at < 0 || req.snapshot_at >= static_cast<int>(req.prompt.size())) {
    return InvalidArgument(fmt::format("snapshot_at {} must be in [0, the prompt's {} tokens)", req.snapshot_at,
                                       req.prompt.size()));
  }
  auto s = std::make_unique<Live>();
  s->submitted = std::chrono::steady_clock::now();
  s->sched.prompt_tokens = static_cast<int>(req.prompt.size());
  s->sched.max_new_tokens = req.max_tokens;
  // A snapshot serves only a recurrent model's prefix cache (an attention cache is cut back to
  // any shared start); a prompt_logprobs prompt runs whole and is never cached.
  if (prefix_cache_.capacity() > 0 && pool_->has_gdn() && !req.prompt_logprobs) s->sched.stop_at = req.snapshot_at;
  s->sampler = std::make_unique<Sampler>(req.sampling, req.prompt);
  if (req.min_tokens > 0) s->sampler->BanUntil({req.stop_tokens.begin(), req.stop_tokens.end()}, req.min_tokens);
  if (req.grammar) {
    std::call_once(vocab_once_, [&] { vocab_ = std::make_shared<const TokenVocab>(tok_, model_.config().vocab_size); });
    s->constraint = std::make_unique<TokenConstraint>(req.grammar, vocab_, req.stop_tokens, req.grammar_gate);
    s->sampler->Constrain(s->constraint.get());
  }
  s->decoder = std::make_unique<StreamDecoder>(tok_);
  s->req = std::move(req);
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stop_) return Unavailable("the server is shutting down");
    GRAFT_RETURN_IF_ERROR(SlotOpen(s->req.adapter_slot));
    if (live_count_ + decisions_pending_ >= cfg_.max_queue) {
      return ResourceExhausted(fmt::format("{} requests are queued or running; the limit is {}",
                                           live_count_ + decisions_pending_, cfg_.max_queue));
    }
    ++live_count_;
    incoming_.push_back(std::move(s));
  }
  cv_.notify_one();
  return Status::Ok();
}

Status Engine::DecideAsync(DecisionRequest r, int32_t slot, DecisionDone done,
                           std::shared_ptr<std::atomic<bool>> cancelled) {
  auto job = std::make_unique<DecisionJob>();
  job->request = std::move(r);
  job->slot = slot;
  job->done = std::move(done);
  job->cancelled = cancelled ? std::move(cancelled) : std::make_shared<std::atomic<bool>>(false);
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stop_) return Unavailable("the server is shutting down");
    if (slot < 0 || static_cast<size_t>(slot) >= adapters_.slots.size()) return InvalidArgument("unknown adapter slot");
    GRAFT_RETURN_IF_ERROR(SlotOpen(slot));
    if (live_count_ + decisions_pending_ >= cfg_.max_queue) {
      return ResourceExhausted(fmt::format("{} requests are queued or running; the limit is {}",
                                           live_count_ + decisions_pending_, cfg_.max_queue));
    }
    ++decisions_pending_;
    decisions_.push_back(std::move(job));
  }
  cv_.notify_one();
  return Status::Ok();
}

Result<DecisionResult> Engine::Decide(const DecisionRequest& r, int32_t slot) {
  auto promise = std::make_shared<std::promise<Result<DecisionResult>>>();
  auto fut = promise->get_future();
  GRAFT_RETURN_IF_ERROR(DecideAsync(r, slot, [promise](Result<DecisionResult> res) { promise->set_value(std::move(res)); }));
  return fut.get();
}

Status Engine::SlotOpen(int32_t slot) const {
  if (closed_slots_.count(slot)) return NotFound(fmt::format("adapter slot {} is being unloaded", slot));
  if (slot > 0 && adapters_.slots[static_cast<size_t>(slot)] == nullptr) {
    return NotFound(fmt::format("adapter slot {} holds no adapter", slot));
  }
  return Status::Ok();
}

Status Engine::AttachAdapter(int32_t slot, const LoraAdapter* a) {
  std::future<Status> done;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stop_) return Unavailable("the server is shutting down");
    if (a == nullptr || slot <= 0 || static_cast<size_t>(slot) >= adapters_.slots.size() ||
        adapters_.slots[static_cast<size_t>(slot)] != nullptr || closed_slots_.count(slot) ||
        std::any_of(adapter_commands_.begin(), adapter_commands_.end(), [&](const auto& c) { return c.slot == slot; })) {
      return InvalidArgument(fmt::format("adapter slot {} is not an empty slot", slot));
    }
    adapter_commands_.push_back(AdapterCommand{slot, a, {}});
    done = adapter_commands_.back().done.get_future();
  }
  cv_.notify_one();
  return done.get();
}

Status Engine::DetachAdapter(int32_t slot) {
  std::future<Status> done;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stop_) return Unavailable("the server is shutting down");
    if (slot <= 0 || static_cast<size_t>(slot) >= adapters_.slots.size() ||
        adapters_.slots[static_cast<size_t>(slot)] == nullptr || closed_slots_.count(slot)) {
      return InvalidArgument(fmt::format("adapter slot {} holds no adapter to unload", slot));
    }
    closed_slots_.insert(slot);  // from now on no new work for it
    adapter_commands_.push_back(AdapterCommand{slot, nullptr, {}});
    done = adapter_commands_.back().done.get_future();
  }
  cv_.notify_one();
  return done.get();
}

bool Engine::SlotInUse(int32_t slot) const {
  auto uses = [&](const auto& s) { return s->req.adapter_slot == slot; };
  return std::any_of(live_.begin(), live_.end(), uses) || std::any_of(incoming_.begin(), incoming_.end(), uses) ||
         std::any_of(decisions_.begin(), decisions_.end(), [&](const auto& j) { return j->slot == slot; }) ||
         std::any_of(waiting_.begin(), waiting_.end(), [&](const auto& j) { return j->slot == slot; }) ||
         std::any_of(active_.begin(), active_.end(), [&](const auto& j) { return j->slot == slot; });
}

void Engine::ApplyAdapterCommands() {
  for (auto it = adapter_commands_.begin(); it != adapter_commands_.end();) {
    const size_t slot = static_cast<size_t>(it->slot);
    if (it->adapter != nullptr) {
      // The factors into the slot's reserved device memory first (Ops::PlaceAdapter): an
      // adapter the backend cannot hold never reaches a row.
      if (Status placed = ops_->PlaceAdapter(*it->adapter, it->slot); !placed.ok()) {
        it->done.set_value(placed);
        it = adapter_commands_.erase(it);
        continue;
      }
      adapters_.slots[slot] = it->adapter;
      if (adapters_.exact.size() > slot) adapters_.exact[slot] = 0;
    } else if (!SlotInUse(it->slot)) {
      adapters_.slots[slot] = nullptr;
      scorer_.ForgetSlot(it->slot);
      prefix_cache_.ForgetSlot(it->slot);
      ops_->ForgetAdapter(it->slot);
      closed_slots_.erase(it->slot);
    } else {
      ++it;  // still in use: looked at again after the next step
      continue;
    }
    it->done.set_value(Status::Ok());
    it = adapter_commands_.erase(it);
  }
}

void Engine::ForgetDecisionPrefixes() {
  std::lock_guard<std::mutex> l(mu_);
  forget_prefixes_ = true;
}

EngineStats Engine::Stats() const {
  std::lock_guard<std::mutex> l(mu_);
  return stats_;
}

void Engine::Finish(Live& s, const std::string& reason) {
  if (s.done) return;
  s.done = true;
  if (!s.held.empty() || !s.held_logprobs.empty()) {
    GenEvent d;
    d.text = std::move(s.held);
    d.logprobs = std::move(s.held_logprobs);
    s.req.on_event(d);
  }
  GenEvent e;
  e.kind = GenEvent::Kind::kDone;
  e.finish_reason = reason;
  e.prompt_tokens = s.sched.prompt_tokens;
  e.completion_tokens = s.generated;
  e.cached_tokens = s.cached_tokens;
  auto secs = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
  const auto now = std::chrono::steady_clock::now();
  const auto scheduled = s.was_scheduled ? s.scheduled : now;
  const bool tokens = s.first_token.time_since_epoch().count() != 0;
  e.times.queue = secs(s.submitted, scheduled);
  e.times.prefill = secs(scheduled, tokens ? s.first_token : now);
  e.times.decode = tokens ? secs(s.first_token, s.last_token) : 0;
  e.times.ttft = secs(s.submitted, tokens ? s.first_token : now);
  e.times.e2e = secs(s.submitted, now);
  e.times.itl = std::move(s.itl);
  s.req.on_event(e);
}

namespace {

TokenLogprob Logprobs(const Tokenizer& tok, const float* row, int vocab, int32_t token, int top) {
  double mx = row[0];
  for (int v = 1; v < vocab; ++v) mx = std::max<double>(mx, row[v]);
  double z = 0;
  for (int v = 0; v < vocab; ++v) z += std::exp(static_cast<double>(row[v]) - mx);
  const double lz = std::log(z) + mx;
  TokenLogprob t{token, tok.Decode({token}), row[token] - lz, {}};
  if (top > 0) {
    std::vector<int32_t> idx(static_cast<size_t>(vocab));
    for (int v = 0; v < vocab; ++v) idx[v] = v;
    const int k = std::min(top, vocab);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
      return row[a] != row[b] ? row[a] > row[b] : a < b;
    });
    for (int i = 0; i < k; ++i) t.top.emplace_back(tok.Decode({idx[i]}), row[idx[i]] - lz);
  }
  return t;
}

// Length of the longest suffix of `text` that is a proper prefix of some stop string.
size_t HeldForStops(const std::string& text, const std::vector<std::string>& stops) {
  size_t keep = 0;
  for (const auto& s : stops) {
    for (size_t n = std::min(s.size() - 1, text.size()); n > keep; --n) {
      if (text.compare(text.size() - n, n, s, 0, n) == 0) {
        keep = n;
        break;
      }
    }
  }
  return keep;
}

}  // namespace

void Engine::FreeStateSlot() {
  KvPool& pool = *pool_;
  while (pool.has_gdn() && pool.free_slots(kChatAccount) == 0 && prefix_cache_.EvictOldest()) {
  }
}

bool Engine::ReclaimFor(int account) {
  KvPool& pool = *pool_;
  const int cap = pool.page_cap(account);
  if (cap >= 0 && cap - pool.pages_held(account) < pool.free_pages()) {
    return account == kDecisionAccount ? scorer_.EvictOldest() : prefix_cache_.EvictOldest();  // its own cap binds
  }
  return prefix_cache_.EvictOldest() || scorer_.EvictOldest();
}

bool Engine::CapDecisions() {
  KvPool& pool = *pool_;
  const int64_t own = DecisionPages();
  const int64_t left = pool.num_pages() - sched_.kv_reserved() / cfg_.page_size;
  pool.set_page_cap(kDecisionAccount, static_cast<int>(std::max<int64_t>(std::min(own, left), 0)));
  return left < own;
}

void Engine::RoomForChat(const std::vector<SchedSeq>& seqs) {
  KvPool& pool = *pool_;
  const int64_t ps = cfg_.page_size;
  int64_t ahead = 0;
  for (const auto& a : active_) ahead += scorer_.PagesAhead(*a->task);
  // The first prompt waiting for admission, and the room it needs (its prompt and first token).
  int64_t need = 0;
  for (const auto& s : seqs) {
    if (s.admitted) continue;
    need = (int64_t{s.prompt_tokens} + 1 + ps - 1) / ps * ps;
    break;
  }
  // (Only where it can help: were the decisions to hold nothing, it would fit.)
  const bool could_fit = sched_.kv_reserved() + need <= (pool.num_pages() - ahead) * ps;
  while (true) {
    const int64_t grow = (pool.num_pages() - pool.pages_held(kDecisionAccount)) * ps;
    const int64_t admit = grow - ahead * ps;
    sched_.set_kv_room(grow, admit);
    if (need == 0 || !could_fit || sched_.kv_reserved() + need <= admit || !scorer_.EvictOldest()) return;
  }
}

void Engine::Admit(Live& s) {
  KvPool& pool = *pool_;
  // The scheduler keeps admissions within the pool's slots; the prefix cache may hold the one
  // this sequence needs.
  FreeStateSlot();
  // prompt_logprobs needs every prompt row's logits: such a prompt runs whole.
  if (prefix_cache_.capacity() > 0 && !s.req.prompt_logprobs && !s.Recomputing()) {
    SequenceState continued;
    Result<int> n = prefix_cache_.Continue(s.req.adapter_slot, s.req.prompt, !pool.has_gdn(), &continued);
    std::lock_guard<std::mutex> l(mu_);
    ++stats_.prefix_cache_queries;
    stats_.prefix_cache_query_tokens += static_cast<int64_t>(s.req.prompt.size());
    if (n.ok() && *n > 0) {
      s.state = std::move(continued);
      s.sched.prefilled = *n;
      s.cached_tokens = *n;
      ++stats_.prefix_cache_hits;
      stats_.prefix_cache_hit_tokens += *n;
      return;
    }
  }
  s.state = std::move(model_.NewState(pool, kChatAccount)).value();  // a slot is free (above): cannot fail
}

void Engine::Preempt(Live& s) {
  // Its tokens so far become what it prefills again: with its prompt done, the prompt, the tokens
  // it fed and the one it was about to feed (whose row then gives its next token, as that decode
  // row would have); mid-prompt, the prompt from its start.
  if (s.sched.prefilled >= s.sched.prompt_tokens) {
    std::vector<int32_t> input = s.Input();
    input.insert(input.end(), s.fed.begin() + static_cast<std::ptrdiff_t>(s.fed_in_input), s.fed.end());
    input.push_back(s.next_token);
    s.fed.push_back(s.next_token);
    s.fed_in_input = s.fed.size();
    s.input = std::move(input);
  } else {
    s.prompt_lps.clear();
  }
  if (s.sched.stop_at > 0 && s.sched.prefilled >= s.sched.stop_at) s.sched.stop_at = 0;  // its copy is kept
  s.state.Clear();
  s.sched.prompt_tokens = static_cast<int>(s.Input().size());
  s.sched.prefilled = 0;
  s.sched.decoded = 0;
  s.sched.max_new_tokens = s.req.max_tokens - s.generated;
  std::lock_guard<std::mutex> l(mu_);
  ++stats_.preemptions;
}

void Engine::KeepSnapshot(Live& s) {
  // A copy of the cache after prompt[0, stop_at) for the prefix cache: a state slot of its own
  // (the cache's least recently used entries give theirs when none is free; none: no copy) and
  // the pages shared, the running sequence copying its partial page when it next writes.
  FreeStateSlot();
  Result<SequenceState> copy = s.state.Fork();
  if (!copy.ok()) return;
  prefix_cache_.Insert(s.req.adapter_slot,
                       std::vector<int32_t>(s.req.prompt.begin(), s.req.prompt.begin() + s.sched.stop_at),
                       std::move(copy).value());
}

void Engine::Retire(Live& s) {
  // The tokens its state holds: the prompt so far, then (once the prompt is whole) those fed.
  const std::vector<int32_t>& input = s.Input();
  std::vector<int32_t> tokens(input.begin(), input.begin() + std::min(s.sched.prefilled, s.sched.prompt_tokens));
  tokens.insert(tokens.end(), s.fed.begin() + static_cast<std::ptrdiff_t>(s.fed_in_input), s.fed.end());
  if (s.failed || !s.sched.admitted || s.state.pool != pool_.get() ||
      s.state.pos != static_cast<int>(tokens.size())) {
    s.state.Clear();
    return;
  }
  prefix_cache_.Insert(s.req.adapter_slot, std::move(tokens), std::move(s.state));  // (drops an empty one)
}

void Engine::FinishDecision(DecisionJob& j, Result<DecisionResult> r) {
  j.task.reset();  // its pages go back to the pool before the caller hears of it
  j.done(std::move(r));
  auto it = std::find_if(active_.begin(), active_.end(), [&](const auto& p) { return p.get() == &j; });
  if (it != active_.end()) {
    active_.erase(it);
  } else {
    std::erase_if(waiting_, [&](const auto& p) { return p.get() == &j; });
  }
  std::lock_guard<std::mutex> l(mu_);
  --decisions_pending_;
}

int Engine::DecisionRowsFor(int decode_rows, bool chat_prefill_waiting, bool questions) const {
  if (live_.empty()) return cfg_.decision_prefill_chunk;
  int left = std::max(cfg_.max_step_tokens - decode_rows, 0);
  if (chat_prefill_waiting) left /= 2;
  if (questions) return std::max(1, left / 2);
  const int rows = std::max(64, left / 64 * 64);
  return cfg_.decision_prefill_chunk > 0 ? std::min(cfg_.decision_prefill_chunk, rows) : rows;
}

bool Engine::RecordInProgress(const DecisionJob& j) const {
  if (scorer_.Cached(j.slot, j.task->prefix)) return false;
  return std::any_of(active_.begin(), active_.end(), [&](const auto& a) {
    return a->task && a->task->share_prefix && !a->task->prefix_ready && a->slot == j.slot &&
           a->task->prefix == j.task->prefix;
  });
}

bool Engine::DecisionRoom(const DecisionJob& j) {
  // A decision starting over after the pool ran short takes it alone until it is done.
  if (std::any_of(active_.begin(), active_.end(), [](const auto& a) { return a->retried; })) return false;
  KvPool& pool = *pool_;
  CapDecisions();
  const int64_t own = DecisionPages();
  // Alone, a decision needs its record and a run's pages, or (having started over for want of
  // room) all the decisions may hold; more than they may hold it cannot get: it starts and ends
  // with a 400 naming the cap when it runs short.
  int64_t pages = j.retried ? own : std::min(scorer_.PagesAhead(*j.task), own);
  for (const auto& a : active_) pages += scorer_.PagesAhead(*a->task);
  // Slots: its record, and a fork for each decision's questions (theirs and its own).
  const int slots = 1 + static_cast<int>(active_.size()) + 1;
  return pool.Reclaim(kDecisionAccount, static_cast<int>(pages), slots);
}

void Engine::StartDecisions() {
  // Those whose client went away end first, wherever they wait.
  for (size_t i = 0; i < waiting_.size();) {
    if (waiting_[i]->cancelled->load()) {
      FinishDecision(*waiting_[i], Cancelled("the client went away before the decision was done"));  // (erases it)
    } else {
      ++i;
    }
  }
  for (auto it = waiting_.begin(); it != waiting_.end() && static_cast<int>(active_.size()) < cfg_.max_decisions;) {
    DecisionJob& j = **it;
    if (!j.task) {
      Result<DecisionTask> t = scorer_.Begin(j.request, j.slot, true, j.cancelled.get());
      if (!t.ok()) {
        FinishDecision(j, t.status());
        it = waiting_.begin();
        continue;
      }
      j.task = std::make_unique<DecisionTask>(std::move(*t));
    }
    if (RecordInProgress(j)) {  // waits for the other's record, then continues from the cache
      ++it;
      continue;
    }
    if (!DecisionRoom(j)) break;  // in arrival order: no later one takes the room it waits for
    active_.push_back(std::move(*it));
    it = waiting_.erase(it);
  }
}

void Engine::RequeueDecision(DecisionJob& j) {
  scorer_.Restart(*j.task);
  j.planned = false;
  auto it = std::find_if(active_.begin(), active_.end(), [&](const auto& p) { return p.get() == &j; });
  // Before the jobs that never started (and behind those requeued already, in arrival order).
  auto at = std::find_if(waiting_.begin(), waiting_.end(), [](const auto& w) { return w->task == nullptr || w->task->pieces == 0; });
  waiting_.insert(at, std::move(*it));
  active_.erase(it);
  std::lock_guard<std::mutex> l(mu_);
  ++stats_.decision_restarts;
}

void Engine::DecisionShort(size_t i, const Status& st) {
  DecisionJob& j = *active_[i];
  if (i > 0) return RequeueDecision(j);  // a newer one: later, when the room is there
  // The oldest: the newer ones give their memory back, then the prefix cache; alone with the
  // cache empty it can never fit.
  const bool alone = active_.size() == 1;
  while (active_.size() > 1) RequeueDecision(*active_.back());
  if (j.retried && alone) {
    // Short because chat holds the room: it waits for chat to give it back (DecisionRoom), the
    // same bits later. Short of what decisions may hold at all: it can never fit.
    if (CapDecisions()) return RequeueDecision(j);
    return FinishDecision(j, InvalidArgument(fmt::format("this decision needs more KV memory than decisions may hold "
                                                         "({} tokens, --decision-kv-tokens): {}",
                                                         cfg_.decision_kv_tokens, st.message())));
  }
  scorer_.ClearCache();
  scorer_.Restart(*j.task);
  j.planned = false;
  j.retried = true;
}

std::vector<Engine::DecisionJob*> Engine::PlanDecisions(int decode_rows, bool chat_prefill_waiting) {
  std::vector<DecisionJob*> planned;
  const int record_cap = DecisionRowsFor(decode_rows, chat_prefill_waiting, false);  // 0: no limit
  const int question_cap = DecisionRowsFor(decode_rows, chat_prefill_waiting, true);
  int used = 0;
  for (size_t i = 0; i < active_.size();) {
    DecisionJob& j = *active_[i];
    const bool questions = j.task->prefix_ready;
    const int cap = questions ? question_cap : record_cap;
    int max_rows = 0;  // no limit
    if (cap > 0) {
      max_rows = cap - used;
      if (!questions) max_rows = max_rows / 64 * 64;  // later pieces too in whole tiles
      if (max_rows <= 0) {
        if (!planned.empty()) {
          ++i;
          continue;  // no rows left for it in this step
        }
        max_rows = cap;  // the first piece of a step gets its kind's rows
      }
    }
    // Optional question runs leave the newer decisions' next pages and a slot each.
    int64_t keep_pages = 0;
    for (size_t k = i + 1; k < active_.size(); ++k) keep_pages += scorer_.PagesAhead(*active_[k]->task);
    scorer_.set_keep(keep_pages, pool_->has_gdn() ? static_cast<int>(active_.size() - i - 1) : 0);
    // A later question piece only where its first run fits the rows and room left (the oldest
    // always runs one).
    Result<DecisionRows> rows = scorer_.Plan(*j.task, max_rows, /*must_run=*/planned.empty() || !questions);
    scorer_.set_keep(0, 0);
    if (!rows.ok()) {
      const DecisionJob* at = &j;
      if (rows.status().code() == StatusCode::kResourceExhausted) {
        DecisionShort(i, rows.status());
      } else {
        FinishDecision(j, rows.status());
      }
      // j may be gone (ended, or back in the queue): the next one is at i then. (The oldest
      // starting over plans again next step.)
      if (i < active_.size() && active_[i].get() == at) ++i;
      continue;
    }
    if (rows->seqs.empty() && questions) {  // no run fits beside the pieces before it: next step
      ++i;
      continue;
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      ++stats_.decision_pieces;
    }
    if (rows->seqs.empty()) {  // a cached record: no rows; its questions may come next in this step
      FinishDecisionPiece(j, Status::Ok(), nullptr);
      continue;  // (the same index: the job, still active, plans its questions; or the next one)
    }
    used += rows->rows();
    j.piece = std::move(*rows);
    j.planned = true;
    planned.push_back(&j);
    ++i;
  }
  return planned;
}

void Engine::ForgetSlowestSteps() {
  std::lock_guard<std::mutex> l(mu_);
  stats_.slowest_steps.clear();
}

void Engine::FinishDecisionPiece(DecisionJob& j, const Status& st, const float* logits) {
  j.planned = false;
  Result<bool> done = st.ok() ? scorer_.Finish(*j.task, logits) : Result<bool>(st);
  if (!done.ok() && done.status().code() == StatusCode::kResourceExhausted) {
    const auto it = std::find_if(active_.begin(), active_.end(), [&](const auto& p) { return p.get() == &j; });
    return DecisionShort(static_cast<size_t>(it - active_.begin()), done.status());
  }
  if (!done.ok()) return FinishDecision(j, done.status());
  if (*done) FinishDecision(j, std::move(j.task->result));
}

void Engine::Loop() {
  while (true) {
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] {
        return stop_ || !incoming_.empty() || !decisions_.empty() || !live_.empty() || !active_.empty() ||
               !waiting_.empty() || !adapter_commands_.empty();
      });
      if (stop_) break;
      while (!incoming_.empty()) {
        incoming_.front()->id = next_id_++;
        incoming_.front()->sched.id = incoming_.front()->id;
        live_.push_back(std::move(incoming_.front()));
        incoming_.pop_front();
      }
      ApplyAdapterCommands();  // between steps: no forward pass reads the slots now
      if (forget_prefixes_) {
        scorer_.ClearCache();  // decisions in progress keep their share of a cached record
        forget_prefixes_ = false;
      }
      while (!decisions_.empty()) {
        waiting_.push_back(std::move(decisions_.front()));
        decisions_.pop_front();
      }
    }
    StartDecisions();
    // One step: chat rows and pieces of the decisions in progress together.
    if (!active_.empty() || !live_.empty()) RunStep();
    // Drop finished and cancelled sequences.
    int removed = 0;
    for (auto& s : live_) {
      if (!s->done && s->req.cancelled->load()) s->done = true;  // the client is gone: no more events
      if (s->done) {
        sched_.Release(s->sched);
        Retire(*s);
        ++removed;
      }
    }
    live_.erase(std::remove_if(live_.begin(), live_.end(), [](const auto& s) { return s->done; }), live_.end());
    std::lock_guard<std::mutex> l(mu_);
    live_count_ -= removed;
    stats_.running = static_cast<int>(std::count_if(live_.begin(), live_.end(), [](const auto& s) { return s->sched.admitted; }));
    stats_.waiting = static_cast<int>(live_.size()) - stats_.running + static_cast<int>(incoming_.size());
    stats_.running_by_slot.clear();
    stats_.waiting_by_slot.clear();
    for (const auto& s : live_) (s->sched.admitted ? stats_.running_by_slot : stats_.waiting_by_slot)[s->req.adapter_slot]++;
    for (const auto& s : incoming_) stats_.waiting_by_slot[s->req.adapter_slot]++;
    stats_.kv_reserved = sched_.kv_reserved();
    stats_.kv_decisions = int64_t{pool_->pages_held(kDecisionAccount)} * cfg_.page_size;
    stats_.decisions_running = static_cast<int>(active_.size());
  }
  // Shutting down: whatever is left ends with an error.
  for (auto& s : live_) {
    if (!s->done) {
      GenEvent e;
      e.kind = GenEvent::Kind::kError;
      e.error = Unavailable("the server is shutting down");
      s->req.on_event(e);
    }
  }
  auto shut = [](auto& jobs) {
    for (auto& j : jobs) {
      j->task.reset();
      j->done(Unavailable("the server is shutting down"));
    }
    jobs.clear();
  };
  shut(active_);
  shut(waiting_);
  std::lock_guard<std::mutex> l(mu_);
  for (auto& c : adapter_commands_) c.done.set_value(Unavailable("the server is shutting down"));
  adapter_commands_.clear();
  for (auto& j : decisions_) j->done(Unavailable("the server is shutting down"));
  for (auto& s : incoming_) {
    GenEvent e;
    e.kind = GenEvent::Kind::kError;
    e.error = Unavailable("the server is shutting down");
    s->req.on_event(e);
  }
}

void Engine::RunStep() {
  const auto now = std::chrono::steady_clock::now();
  for (auto& s : live_) {
    const auto deadline = s->req.deadline;
    if (s->done || deadline == std::chrono::steady_clock::time_point{} || now <= deadline) continue;
    GenEvent e;
    e.kind = GenEvent::Kind::kError;
    e.error = DeadlineExceeded(fmt::format("the request ran past its time limit ({:.1f} s after it arrived; --request-timeout)",
                                           std::chrono::duration<double>(deadline - s->submitted).count()));
    s->req.on_event(e);
    s->done = true;
  }
  std::vector<SchedSeq> seqs;
  std::map<int64_t, Live*> by_id;
  for (auto& s : live_) {
    if (s->done || s->req.cancelled->load()) continue;
    seqs.push_back(s->sched);
    by_id[s->id] = s.get();
  }
  // The decisions' next pieces take their rows after the decode rows; chat prompts get the rest
  // of the budget.
  bool prefill_waiting = false;
  for (const auto& ss : seqs) prefill_waiting |= ss.prefilled < ss.prompt_tokens;
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  auto t0 = Clock::now();
  // The decisions plan first, within their cap and outside chat's reservation; chat's room is
  // then what they neither hold nor will take.
  CapDecisions();
  const std::vector<DecisionJob*> decisions = PlanDecisions(sched_.DecodeRows(seqs), prefill_waiting);
  const bool decide = !decisions.empty();
  int decision_rows = 0, decision_seqs = 0;  // (counted now: a finished decision is gone after the step)
  for (const DecisionJob* j : decisions) {
    decision_rows += j->piece.rows();
    decision_seqs += static_cast<int>(j->piece.seqs.size());
  }
  double decision_host = since(t0);
  RoomForChat(seqs);
  StepPlan plan = sched_.Plan(seqs, decision_rows);
  for (const auto& ss : seqs) {
    by_id[ss.id]->sched.admitted = ss.admitted;
    by_id[ss.id]->sched.reserved = ss.reserved;
  }
  for (int64_t id : plan.preempted) Preempt(*by_id[id]);  // their pages and slots first: admissions may need them
  for (int64_t id : plan.admitted) Admit(*by_id[id]);
  for (int64_t id : plan.rejected) {
    GenEvent e;
    e.kind = GenEvent::Kind::kError;
    e.error = InvalidArgument("the request does not fit the KV budget");
    by_id[id]->req.on_event(e);
    by_id[id]->done = true;
  }
  if (plan.entries.empty() && !decide) return;
  StepBatch batch;
  std::vector<Live*> order;
  int prompt_seqs = 0;
  const auto step_start = std::chrono::steady_clock::now();
  for (const auto& e : plan.entries) {
    Live* s = by_id[e.id];
    if (!s->was_scheduled) s->was_scheduled = true, s->scheduled = step_start;
    if (s->sched.prefilled < s->sched.prompt_tokens) {
      ++prompt_seqs;
      // (A prompt continued from the prefix cache brings fewer rows than were planned for it.)
      batch.Add(&s->state, s->Input().data() + s->sched.prefilled,
                std::min(e.tokens, s->sched.prompt_tokens - s->sched.prefilled), s->req.adapter_slot);
    } else {
      batch.Add(&s->state, &s->next_token, 1, s->req.adapter_slot);
    }
    order.push_back(s);
  }
  // Logits only for the rows that are sampled — a decode row, or the last row of a prompt that
  // completes in this step — and, for prompt_logprobs, each prompt row whose next token is the
  // prompt's (its first index in prompt_index[i]; rows ascend within and across sequences).
  std::vector<int> logit_index(order.size(), -1), prompt_index(order.size(), -1);
  batch.logits = LogitRows::None();
  bool prompt_rows_wanted = false;
  for (size_t i = 0; i < order.size(); ++i) {
    const Live& s = *order[i];
    const int rows = batch.seq_start[i + 1] - batch.seq_start[i];
    if (s.req.prompt_logprobs && !s.Recomputing() && s.sched.prefilled < s.sched.prompt_tokens) {
      prompt_index[i] = static_cast<int>(batch.logits.rows.size());
      for (int r = 0; r < rows && s.sched.prefilled + r + 1 < s.sched.prompt_tokens; ++r) {
        batch.logits.rows.push_back(batch.seq_start[i] + r);
        prompt_rows_wanted = true;
      }
    }
    if (s.sched.prefilled + rows >= s.sched.prompt_tokens) {
      logit_index[i] = static_cast<int>(batch.logits.rows.size());
      batch.logits.rows.push_back(batch.seq_start[i + 1] - 1);
    }
  }
  // The decision's rows after the chat rows, and the rows whose logits it reads.
  const int decision_row0 = batch.rows();
  bool decision_logits = false;
  for (DecisionJob* j : decisions) {
    const int row0 = batch.rows();
    j->logit0 = static_cast<int>(batch.logits.rows.size());
    for (const auto& ds : j->piece.seqs) batch.Add(ds.state, ds.ids, ds.n, j->slot);
    for (int32_t r : j->piece.logit_rows) batch.logits.rows.push_back(row0 + r);
    decision_logits |= !j->piece.logit_rows.empty();
  }
  // Candidates instead of whole rows when every sampled row can draw from its best few (never
  // beside a decision's rows: it reads whole rows).
  int k = 0;
  bool whole_rows = !cfg_.candidate_sampling || batch.logits.rows.empty() || prompt_rows_wanted ||
                    decision_logits;
  for (size_t i = 0; i < order.size() && !whole_rows; ++i) {
    if (logit_index[i] < 0) continue;
    const int need = order[i]->sampler->CandidatesNeeded(Ops::kMaxTopK);
    if (need == 0 || order[i]->req.top_logprobs >= 0) whole_rows = true;
    k = std::max(k, need);
  }
  const int vocab = model_.config().vocab_size;
  const int width = whole_rows ? vocab : std::min(k, vocab);
  if (!whole_rows) {
    batch.logits.top_k = width;
    for (size_t i = 0; i < order.size(); ++i) {
      if (logit_index[i] >= 0) batch.logits.temperature.push_back(order[i]->req.sampling.temperature);
    }
  }
  std::vector<float>& logits = step_logits_;  // kept between steps: a question step's are ~10 MB
  logits.resize(batch.logits.rows.size() * static_cast<size_t>(width));
  std::vector<int32_t> ids(whole_rows ? 0 : logits.size());
  // The rows' pages now, before a captured graph's check for pool growth (all or nothing; the
  // prefix caches give way where the pool is short, KvPool::Reclaim). Running sequences'
  // reservations never exceed their room, so with the caches empty they fit; were they short,
  // the step itself would fail on it, naming it.
  (void)model_.ReserveRows(batch);
  // Steps with decision rows run eagerly (a graph for each of their shapes would be captured
  // once and never replayed).
  t0 = Clock::now();
  const Status st = run_step_ && !decide ? run_step_(batch, adapters_, logits.data(), ids.data())
                                         : model_.Forward(*ops_, batch, adapters_, logits.data(), ids.data());
  const double forward = since(t0);
  t0 = Clock::now();
  // (Oldest first: a piece that fails for memory sends only newer decisions back.)
  for (DecisionJob* j : decisions) {
    const bool active = std::any_of(active_.begin(), active_.end(), [&](const auto& a) { return a.get() == j; });
    if (active && j->planned) FinishDecisionPiece(*j, st, logits.data() + static_cast<size_t>(j->logit0) * width);
  }
  decision_host += since(t0);
  int64_t prompt_rows = 0, sampled = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    Live& s = *order[i];
    const int rows = batch.seq_start[i + 1] - batch.seq_start[i];
    if (!st.ok()) {
      GenEvent e;
      e.kind = GenEvent::Kind::kError;
      e.error = st;
      s.req.on_event(e);
      s.done = true;
      s.failed = true;
      continue;
    }
    if (s.sched.prefilled >= s.sched.prompt_tokens) {  // its decode row ran
      s.fed.push_back(s.next_token);
      ++s.sched.decoded;
    }
    if (s.sched.prefilled < s.sched.prompt_tokens) {
      if (prompt_index[i] >= 0) {  // row r predicts the prompt's token at prefilled + r + 1
        for (int r = 0; r < rows && s.sched.prefilled + r + 1 < s.sched.prompt_tokens; ++r) {
          const float* prow = logits.data() + static_cast<size_t>(prompt_index[i] + r) * width;
          const int32_t next = s.req.prompt[static_cast<size_t>(s.sched.prefilled + r + 1)];
          s.prompt_lps.push_back(Logprobs(tok_, prow, vocab, next, std::max(s.req.top_logprobs, 0)));
        }
      }
      s.sched.prefilled += rows;
      prompt_rows += rows;
      if (s.sched.stop_at > 0 && s.sched.prefilled == s.sched.stop_at) KeepSnapshot(s);
      if (s.sched.prefilled < s.sched.prompt_tokens) continue;  // more prompt to go
      if (s.req.prompt_logprobs && !s.Recomputing()) {  // the whole prompt's, before any generated text
        GenEvent d;
        TokenLogprob first;
        first.token = s.req.prompt[0];
        first.text = tok_.Decode({first.token});
        first.known = false;
        d.prompt_logprobs.push_back(std::move(first));
        d.prompt_logprobs.insert(d.prompt_logprobs.end(), s.prompt_lps.begin(), s.prompt_lps.end());
        s.prompt_lps.clear();
        s.req.on_event(d);
      }
    }
    ++sampled;
    const auto now = std::chrono::steady_clock::now();  // this row's token: its time
    if (s.first_token.time_since_epoch().count() == 0) {
      s.first_token = now;
    } else {
      s.itl.push_back(std::chrono::duration<double>(now - s.last_token).count());
    }
    s.last_token = now;
    const float* row = logits.data() + static_cast<size_t>(logit_index[i]) * width;
    const int32_t tok = whole_rows ? s.sampler->Sample(row, vocab)
                                   : s.sampler->SampleCandidates(row, ids.data() + static_cast<size_t>(logit_index[i]) * width,
                                                                 width);
    if (tok < 0) {  // a constraint that allows no token at all: the grammar's text cannot go on
      s.held += s.decoder->Flush();
      Finish(s, "stop");
      continue;
    }
    if (s.generated >= s.req.min_tokens && s.req.stop_tokens.count(tok)) {
      s.held += s.decoder->Flush();  // an unfinished character before the stop token: U+FFFD, as at "length"
      Finish(s, "stop");
      continue;
    }
    ++s.generated;
    s.next_token = tok;
    s.sampler->Accept(tok);
    if (s.constraint) s.constraint->Accept(tok);
    if (s.req.top_logprobs >= 0) s.held_logprobs.push_back(Logprobs(tok_, row, vocab, tok, s.req.top_logprobs));
    s.held += s.decoder->Push(tok);
    // Before min_tokens no stop string counts: that text goes out whole (nothing held back).
    const bool may_stop = s.generated >= s.req.min_tokens;
    bool stopped = false;
    for (size_t k = 0; may_stop && k < s.req.stop_strings.size(); ++k) {
      const size_t at = s.held.find(s.req.stop_strings[k]);
      if (at != std::string::npos) {
        s.held.resize(at);
        stopped = true;
      }
    }
    if (stopped || (s.constraint && s.constraint->MustStop())) {
      if (!stopped) s.held += s.decoder->Flush();
      Finish(s, "stop");
      continue;
    }
    if (s.generated >= s.req.max_tokens) {
      s.held += s.decoder->Flush();
      Finish(s, "length");
      continue;
    }
    const size_t keep = may_stop ? HeldForStops(s.held, s.req.stop_strings) : 0;
    if (s.held.size() > keep) {
      GenEvent d;
      d.text = s.held.substr(0, s.held.size() - keep);
      s.held.erase(0, s.held.size() - keep);
      d.logprobs = std::move(s.held_logprobs);
      s.held_logprobs.clear();
      s.req.on_event(d);
    }
  }
  StepRecord rec;
  rec.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - now).count();
  rec.decode_rows = static_cast<int>(order.size()) - prompt_seqs;
  rec.prompt_rows = decision_row0 - rec.decode_rows;
  rec.decision_rows = batch.rows() - decision_row0;
  rec.decision_seqs = decision_seqs;
  rec.decisions = static_cast<int>(decisions.size());
  rec.questions = decision_logits;
  rec.forward_seconds = forward;
  rec.decision_host_seconds = decision_host;
  std::lock_guard<std::mutex> l(mu_);
  stats_.steps++;
  stats_.largest_step = std::max(stats_.largest_step, batch.rows());
  stats_.most_step_decisions = std::max(stats_.most_step_decisions, rec.decisions);
  auto& slow = stats_.slowest_steps;
  slow.insert(std::upper_bound(slow.begin(), slow.end(), rec,
                               [](const StepRecord& a, const StepRecord& b) { return a.seconds > b.seconds; }),
              rec);
  if (slow.size() > EngineStats::kSlowestSteps) slow.pop_back();
  stats_.prompt_tokens += prompt_rows;
  stats_.generated_tokens += sampled;
}

}  // namespace graft

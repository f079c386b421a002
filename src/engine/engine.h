// Engine: one thread that owns the model and runs every step; requests reach it through a
// queue and results leave through per-request callbacks (called on the engine thread).
//
// One scheduler for chat and decisions: each step holds at most max_step_tokens rows — the
// decode rows of running sequences first, then the next pieces of the decisions in progress
// (DecisionScorer::Plan: a chunk of a record, or a decision's questions with their choices'
// rows), then prefill chunks of waiting chat sequences (Scheduler) — every row selecting its
// sequence's adapter slot, all in one forward pass. A chat stream's gap while decisions run is
// one step of the budget, never a decision. Beside chat the decisions' pieces share the rows the
// decode rows leave (whole 64-token tiles, at least one; half of them while chat prompts wait to
// be prefilled); alone they share decision_prefill_chunk.
// Up to max_decisions decisions are in progress at once, in arrival order, sharing each step's
// decision rows oldest first: one's questions run beside another's record. A decision starts when
// the decisions' part of the KV pool has room for its record beside the pages the others still
// need (the prefix caches give way first); one whose record another decision in progress is
// computing (same adapter slot, same tokens) waits for it and continues from the prefix cache.
// When a piece finds the pool short all the same, the newest decisions give their memory back
// and start over later (the same bits); the oldest always goes on.
// Prefix caching (kv/prefix_cache.h): a chat sequence's cache is kept when it ends, and a
// later prompt that starts with its tokens continues from it (usage's cached_tokens); the
// entries give their room back whenever a step or an admission needs it.
// All cache memory is reserved when the engine starts: one KV pool (kv/kv_pool.h) of pages and
// state slots that chat sequences and decisions share, each on an account of its own. Decisions
// (their records, question forks and prefix cache) hold at most decision_kv_tokens of it and never
// a page a running chat sequence was promised; chat sequences are admitted and grow in what the
// decisions neither hold nor will take for the pieces they have left (DecisionScorer::PagesAhead),
// so neither kind takes the other's room: work that fits but not now waits. Both prefix caches
// give their pages back whenever either kind needs them (the pool's reclaimer). A sequence
// whose prompt plus max_tokens exceeds the pool is refused; others are admitted when their
// prompt fits and take KV pages as they grow; when their room runs out the newest running
// sequence is preempted — its cache freed, its tokens so far prefilled again later, the same
// bits (Scheduler).
// Cancelling a request (its flag) drops it at the next step. A request with a grammar draws only
// the tokens its TokenConstraint allows (structured output).
//
// Thread-safety: Submit, Decide, Stats and Stop may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "weights/lora.h"
#include "backend/ops.h"
#include "engine/decision_scorer.h"
#include "engine/pool_plan.h"
#include "kv/prefix_cache.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/token_constraint.h"
#include "model/model.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace graft {

struct EngineConfig {
  int max_step_tokens = 256;          // rows per step
  int page_size = 16;                 // KV page, in tokens
  int64_t kv_token_budget = 65536;    // the KV pool, in tokens, chat and decisions together (reserved at start-up)
  int max_running = 64;               // chat sequences running at once (one state slot each)
  int64_t decision_kv_tokens = 16384; // the most of the pool decisions hold at once (with their prefix cache)
  int max_decisions = 8;              // decisions in progress at once, sharing steps (the rest wait;
                                      // the pool's state slots for decisions: DecisionSlots)
  int max_queue = 256;                // waiting + running sequences and decisions before 429
  // A decision's record is prefilled in pieces of at most this many tokens (a multiple of 64; 0:
  // at once), so a hung-up client's decision stops within a piece; while chat sequences run, a
  // piece also keeps to what max_step_tokens leaves after the decode rows (whole 64-token tiles).
  // The bits do not depend on it.
  int decision_prefill_chunk = 0;
  // Sample from each row's best candidates picked by the backend (Ops::TopK) when every row of
  // a step allows it (greedy, or top_k <= Ops::kMaxTopK, and no logprobs), instead of copying
  // whole rows of logits to the host. Draws the very same tokens either way.
  bool candidate_sampling = true;
  // Chat caches kept for prefix caching (0: none). They only use pool room no running sequence
  // needs.
  int prefix_cache_entries = 32;
};

struct TokenLogprob {
  int32_t token = 0;
  std::string text;
  double logprob = 0;
  std::vector<std::pair<std::string, double>> top;
  bool known = true;  // false for a prompt's first token, which nothing predicts (null in the API)
};

// A finished request's timeline in seconds, as vLLM's metrics define it: queue (submitted ->
// first scheduled), prefill (-> first token), decode (first -> last token), ttft (submitted ->
// first token), e2e (submitted -> done), itl (the gap before each token after the first).
struct RequestTimes {
  double queue = 0, prefill = 0, decode = 0, ttft = 0, e2e = 0;
  std::vector<double> itl;
};

struct GenEvent {
  enum class Kind { kDelta, kDone, kError } kind = Kind::kDelta;
  std::string text;                    // kDelta: new text (complete UTF-8)
  std::vector<TokenLogprob> logprobs;  // kDelta: the tokens behind `text`, when asked
  // kDelta, once, before any generated text (prompt_logprobs): every prompt token's logprob
  // under the model given the tokens before it, the first one unknown.
  std::vector<TokenLogprob> prompt_logprobs;
  std::string finish_reason;           // kDone: "stop" or "length"
  int prompt_tokens = 0, completion_tokens = 0;
  int cached_tokens = 0;               // kDone: prompt tokens continued from the prefix cache
  RequestTimes times;                  // kDone
  Status error;                        // kError
};

struct GenerationRequest {
  std::vector<int32_t> prompt;
  int32_t adapter_slot = 0;
  SamplingParams sampling;
  int max_tokens = 256;
  std::set<int32_t> stop_tokens;
  std::vector<std::string> stop_strings;
  int min_tokens = 0;  // no stop (token or string) before this many tokens: stop tokens are never drawn
  int top_logprobs = -1;  // -1: no logprobs; 0..20: the sampled token's, plus that many alternatives
  bool prompt_logprobs = false;  // also the prompt's tokens' (echo with logprobs), top_logprobs alternatives each
  // Structured output: the text after `grammar_gate` (empty: all of it) is a sentence of this
  // grammar (engine/token_constraint.h); the sequence stops where the grammar's text is whole and
  // nothing may follow. nullptr: unconstrained.
  std::shared_ptr<const Grammar> grammar;
  std::string grammar_gate;
  // A request still waiting or running past this time ends with kDeadlineExceeded (the server's
  // --request-timeout). The epoch (the default): none.
  std::chrono::steady_clock::time_point deadline{};
  std::function<void(const GenEvent&)> on_event;
  std::shared_ptr<std::atomic<bool>> cancelled = std::make_shared<std::atomic<bool>>(false);
  // A prompt position (0 < p < the prompt's length) where the engine keeps a copy of the
  // sequence's cache in the prefix cache, so that a later prompt starting with prompt[0, p)
  // continues from it. For recurrent models (Gated DeltaNet), whose state cannot be cut back to
  // a shorter prefix: the server sets it where a chat's next turn will part from this prompt.
  // Ignored (0) without a prefix cache or on attention-only models, whose ended sequences serve
  // any shared start.
  int snapshot_at = 0;
};

// One engine step as it ran: its wall time (planning, the forward pass and what reads its
// logits) and its rows by kind. EngineStats keeps the slowest (graft bench prints them beside
// its chat gaps: the step behind a p99).
struct StepRecord {
  double seconds = 0;
  int decode_rows = 0, prompt_rows = 0;  // chat
  int decision_rows = 0, decision_seqs = 0;
  int decisions = 0;  // decisions with rows in it
  bool questions = false;  // the decision rows are its questions' runs (else a record piece)
  // Of `seconds`: the forward pass (with its logits' copy to the host), and the decision's host
  // work (planning its piece: forks, pages; reading its logits: the scores).
  double forward_seconds = 0, decision_host_seconds = 0;
};

struct EngineStats {
  int waiting = 0, running = 0;
  int64_t kv_reserved = 0, kv_budget = 0;  // chat's reservation (tokens) and the pool's size
  int64_t kv_decisions = 0;  // tokens of the pool the decisions hold (records, forks, their prefix cache)
  int64_t pool_bytes = 0;  // the KV pool and its state slots, reserved at start-up
  int64_t steps = 0, prompt_tokens = 0, generated_tokens = 0;
  // Prefix caching: admitted prompts looked up and those continued from an entry; their tokens,
  // and the tokens continued (not computed).
  int64_t prefix_cache_queries = 0, prefix_cache_hits = 0;
  int64_t prefix_cache_query_tokens = 0, prefix_cache_hit_tokens = 0;
  int64_t decision_pieces = 0;  // pieces of decision work run (record prefill chunks, questions)
  int decisions_running = 0;    // decisions in progress (the rest of decisions_pending wait)
  int most_step_decisions = 0;  // the most decisions with rows in one step
  int64_t decision_restarts = 0;  // decisions that gave their memory back to start over (pool short)
  int64_t preemptions = 0;      // running sequences that gave their KV back to start over (Scheduler)
  int largest_step = 0;         // the most rows one step has held (chat and decision rows together)
  static constexpr size_t kSlowestSteps = 8;
  std::vector<StepRecord> slowest_steps;  // the slowest steps since start-up or ForgetSlowestSteps, slowest first
  // Sequences by adapter slot (0: the base), running (holding KV) and waiting.
  std::map<int32_t, int> running_by_slot, waiting_by_slot;
};

// Runs one chat step in place of Model::Forward (same contract), e.g. from CUDA graphs.
using StepRunner = std::function<Status(const StepBatch&, const AdapterSet&, float* logits, int32_t* ids)>;

class Engine {
 public:
  Engine(const EngineConfig& cfg, const Model& model, std::unique_ptr<Ops> ops, const Tokenizer& tok,
         const ChatTemplate& tmpl, const AdapterSet& adapters, StepRunner run_step = nullptr);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a generation. kResourceExhausted when the queue is full, kInvalidArgument when the
  // request can never fit the KV budget or the context, kUnavailable after Stop().
  Status Submit(GenerationRequest req);
  // Queues a decision for the engine thread; `done` runs there with its result. Decisions count
  // in max_queue with chat (kResourceExhausted past it, returned here, and `done` never runs);
  // one that cannot fit what decisions may hold even with their prefix cache emptied is
  // kInvalidArgument, naming decision_kv_tokens; one that fits but not while chat holds the room
  // waits. Setting `cancelled` (the client hung up) stops it
  // between prefill chunks and questions, and `done` gets kCancelled.
  using DecisionDone = std::function<void(Result<DecisionResult>)>;
  Status DecideAsync(DecisionRequest r, int32_t adapter_slot, DecisionDone done,
                     std::shared_ptr<std::atomic<bool>> cancelled = nullptr);
  // Empties EngineStats::slowest_steps (a benchmark's phase starts afresh).
  void ForgetSlowestSteps();
  // DecideAsync, waiting for the result.
  Result<DecisionResult> Decide(const DecisionRequest& r, int32_t adapter_slot);
  EngineStats Stats() const;
  // Run-time adapters (graft serve --allow-runtime-adapters). AttachAdapter puts `a` (LoRA mode)
  // into `slot`, which must be an empty slot of the set the engine was made with, between two
  // steps. DetachAdapter closes `slot` to new work at once (Submit and DecideAsync answer
  // kNotFound), waits until no queued or running request or decision uses it, then empties it and
  // forgets the decision prefixes cached under it; rows of other slots are never touched. Both
  // block until the engine thread has done it (kUnavailable if it stops first). `a` must outlive
  // its detachment.
  Status AttachAdapter(int32_t slot, const LoraAdapter* a);
  Status DetachAdapter(int32_t slot);
  // Empties the decisions' prefix cache before the next decision starts (benchmarks: a cold
  // record on purpose). Returns at once.
  void ForgetDecisionPrefixes();
  // Whether the KV pool got all the memory it asked for (a device can run out).
  Status PoolsReserved() const;
  void Stop();

 private:
  struct Live;
  struct DecisionJob {
    DecisionRequest request;
    int32_t slot;
    DecisionDone done;
    std::shared_ptr<std::atomic<bool>> cancelled;
    std::unique_ptr<DecisionTask> task;  // null until begun
    bool retried = false;                // started over once with the prefix cache emptied
    // The piece planned for this step (its logits in the step's from logit0).
    bool planned = false;
    DecisionRows piece;
    int logit0 = 0;
  };
  struct AdapterCommand {
    int32_t slot;
    const LoraAdapter* adapter;  // null: detach
    std::promise<Status> done;
  };
  void Loop();
  void RunStep();
  // Carries out the attach commands and the detaches whose slot nothing uses any more.
  void ApplyAdapterCommands();  // engine thread, mu_ held
  bool SlotInUse(int32_t slot) const;  // engine thread, mu_ held
  Status SlotOpen(int32_t slot) const;  // mu_ held: kNotFound for a slot being detached or empty
  // Begins the waiting decisions that may start (arrival order; max_decisions; the pool's room,
  // DecisionRoom) into active_; a cancelled or malformed one ends here.
  void StartDecisions();
  // Whether the pool can take j's record beside the pages and slots the decisions in progress
  // may still take, within the decisions' cap and outside chat's reservation (the prefix caches'
  // entries give way first).
  bool DecisionRoom(const DecisionJob& j);
  // The decisions' page cap for what comes next: decision_kv_tokens, less whatever chat's
  // reservation leaves no room for. Whether chat's reservation is what binds it.
  bool CapDecisions();
  int64_t DecisionPages() const { return cfg_.decision_kv_tokens / cfg_.page_size; }  // the cap, chat aside
  // The chat scheduler's room for the step: what the decisions neither hold nor will take. The
  // decisions' prefix cache gives way where a waiting chat prompt needs its pages.
  void RoomForChat(const std::vector<SchedSeq>& seqs);
  // The pool's reclaimer (KvPool::Reclaim): a prefix-cache entry back to the pool for `account`'s
  // sake — its own cache where its cap binds, else the chat cache first, then the decisions'.
  bool ReclaimFor(int account);
  // Whether a decision in progress is computing j's record (same slot and tokens): j waits for
  // it and continues from the prefix cache.
  bool RecordInProgress(const DecisionJob& j) const;
  // Plans the decisions' pieces for a step, oldest first, in the rows DecisionRowsFor gives them
  // together (a record piece in whole 64-token tiles; the oldest always gets a piece). Returns
  // the planned jobs.
  std::vector<DecisionJob*> PlanDecisions(int decode_rows, bool chat_prefill_waiting);
  // Active decision i's pool ran short (kResourceExhausted): a newer one starts over later; the
  // oldest sends the newer ones back, empties the prefix cache and starts over once, and fails
  // when it cannot fit even alone.
  void DecisionShort(size_t i, const Status& st);
  // Active job j back to the waiting queue's front, its memory given back.
  void RequeueDecision(DecisionJob& j);
  // The rows a decision piece may take in this step: decision_prefill_chunk alone; beside chat
  // no more than that and what the decode rows leave of the budget in whole 64-token tiles (at
  // least one), half of that while chat prompts wait. Questions beside chat take half what a
  // record piece would (not in whole tiles; at least one run): each run is a sequence of its
  // own, a fork that walks the record's keys and recurrent state, so a question row costs a
  // step about twice a record row (H100, Qwen3.5-27B dims: 189 question rows in 4 runs 64 ms
  // against ~40 ms for 192 record rows), and the budget bounds a chat gap in time.
  int DecisionRowsFor(int decode_rows, bool chat_prefill_waiting, bool questions) const;
  // j's planned piece ran (its logits) or failed (`st`): the decision goes on or ends.
  void FinishDecisionPiece(DecisionJob& j, const Status& st, const float* logits);
  // j ends with r: its callback runs and it leaves active_ / waiting_ (it must be in one).
  void FinishDecision(DecisionJob& j, Result<DecisionResult> r);
  void Finish(Live& s, const std::string& reason);
  // s's state for its admission: continued from the prefix cache where an entry covers part of
  // its prompt (s.sched.prefilled moves past those tokens), else fresh; entries give up the slot
  // it needs.
  void Admit(Live& s);
  // The scheduler took s's KV back: its cache goes to the pool and it will prefill its tokens so
  // far again (a row's bits do not depend on how its sequence was split, so the same tokens).
  void Preempt(Live& s);
  // A sequence that ended: its cache into the prefix cache (when its tokens are known and no
  // step failed on it), else back to the pool.
  void Retire(Live& s);
  // Keeps a copy of s's cache, its prompt prefilled up to stop_at, in the prefix cache.
  void KeepSnapshot(Live& s);
  // On a pool with recurrent state, evicts prefix-cache entries (least recently used first) until
  // a state slot is free or the cache is empty.
  void FreeStateSlot();

  EngineConfig cfg_;
  const Model& model_;
  std::unique_ptr<Ops> ops_;
  StepRunner run_step_;
  const Tokenizer& tok_;
  AdapterSet adapters_;  // a copy: run-time adapters change its slots on the engine thread
  // The pool's accounts: chat sequences and their prefix cache; decisions and theirs.
  static constexpr int kChatAccount = 0, kDecisionAccount = 1;
  std::unique_ptr<KvPool> pool_;
  // The vocabulary as structured output reads it, built by the first constrained request.
  std::once_flag vocab_once_;
  std::shared_ptr<const TokenVocab> vocab_;
  DecisionScorer scorer_;
  std::vector<float> step_logits_;  // RunStep's logits, the buffer kept (no fresh pages each step)
  Scheduler sched_;
  PrefixCache prefix_cache_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Live>> incoming_;          // GUARDED_BY(mu_)
  std::deque<std::unique_ptr<DecisionJob>> decisions_;  // GUARDED_BY(mu_)
  bool stop_ = false;                                   // GUARDED_BY(mu_)
  int live_count_ = 0;                                  // GUARDED_BY(mu_): incoming + live
  int decisions_pending_ = 0;                           // GUARDED_BY(mu_): decisions queued or running
  EngineStats stats_;                                   // GUARDED_BY(mu_)
  std::deque<AdapterCommand> adapter_commands_;         // GUARDED_BY(mu_)
  std::set<int32_t> closed_slots_;                      // GUARDED_BY(mu_): being detached
  bool forget_prefixes_ = false;                        // GUARDED_BY(mu_): ForgetDecisionPrefixes asked

  std::vector<std::unique_ptr<Live>> live_;  // engine thread only
  // Decisions taken from decisions_ (engine thread only): in progress (arrival order) and waiting.
  std::vector<std::unique_ptr<DecisionJob>> active_;
  std::deque<std::unique_ptr<DecisionJob>> waiting_;
  int64_t next_id_ = 1;
  std::thread thread_;
};

}  // namespace graft

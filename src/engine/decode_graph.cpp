#include "engine/decode_graph.h"

#include <fmt/core.h>

#include <chrono>
#include <cstring>

namespace graft {
namespace {

template <typename T>
void Put(std::string& k, const T& v) {
  k.append(reinterpret_cast<const char*>(&v), sizeof(v));
}

int FirstAdapterRow(const StepBatch& b) {
  for (int r = 0; r < b.rows(); ++r) {
    if (b.row_adapter[static_cast<size_t>(r)] > 0) return r;
  }
  return -1;
}

}  // namespace

bool DecodeGraph::Capturable(const StepBatch& b) {
  if (b.rows() == 0) return false;
  for (int s = 0; s < b.num_seqs(); ++s) {
    if (b.seq_start[s + 1] - b.seq_start[s] != 1) return false;
    const SequenceState* st = b.states[s];
    if (!st || !st->pool) return false;
    const KvPool& pool = *st->pool;
    const int P = pool.page_size();
    const bool new_page = st->pos % P == 0;
    if (!new_page && !st->pages.empty() && pool.refcount(st->pages.back()) > 1) return false;  // copy-on-write
    if (new_page && pool.free_pages(st->account) - (pool.growable() ? 1 << 30 : 0) <= 0) return false;   // growth
  }
  return true;
}

std::string DecodeGraph::KeyOf(const StepBatch& b, const AdapterSet& adapters) {
  std::string k;
  Put(k, b.rows());
  Put(k, b.logits.all);
  Put(k, b.logits.top_k);
  for (int32_t r : b.logits.rows) Put(k, r);
  Put(k, -1);
  for (size_t s = 0; s < adapters.slots.size(); ++s) Put(k, adapters.slots[s]), Put(k, adapters.is_exact(s));
  Put(k, -1);
  for (int s = 0; s < b.num_seqs(); ++s) {
    const SequenceState* st = b.states[s];
    Put(k, b.seq_start[s + 1] - b.seq_start[s]);
    Put(k, st->pool);
    Put(k, st->pool->num_pages());
    Put(k, st->slot);
    Put(k, CudaOps::PageTableCapacity(st->pos / st->pool->page_size() + 1));
    for (int r = b.seq_start[s]; r < b.seq_start[s + 1]; ++r) Put(k, b.row_adapter[static_cast<size_t>(r)]);
  }
  return k;
}

Result<std::unique_ptr<DecodeGraph>> DecodeGraph::Capture(const Model& model, CudaOps& ops, const StepBatch& b,
                                                          const AdapterSet& adapters, float* logits, int32_t* ids) {
  if (!Capturable(b)) {
    return InvalidArgument("decode graph: only a step where every sequence brings one token, without copy-on-write "
                           "or pool growth, can be captured");
  }
  std::unique_ptr<DecodeGraph> g(new DecodeGraph(model, ops));
  g->key_ = KeyOf(b, adapters);
  g->adapter_rows_ = FirstAdapterRow(b) >= 0;
  GRAFT_RETURN_IF_ERROR(ops.BeginCapture());
  Status run = model.Forward(ops, b, adapters, logits, ids);
  auto captured = ops.EndCapture();
  GRAFT_RETURN_IF_ERROR(run);
  if (!captured.ok()) return captured.status();
  g->graph_ = std::move(captured).value();
  return g;
}

Status DecodeGraph::Replay(const StepBatch& b, const AdapterSet& adapters, float* logits, int32_t* ids) {
  if (const int r = FirstAdapterRow(b); r >= 0 && !adapter_rows_) {
    return InvalidArgument(fmt::format(
        "decode graph: row {} selects adapter slot {}, but this graph was captured for base rows only; an adapter "
        "row never runs inside a base graph (capture a graph for this step)",
        r, b.row_adapter[static_cast<size_t>(r)]));
  }
  if (KeyOf(b, adapters) != key_) {
    return InvalidArgument("decode graph: the step's shape (rows, sequences, adapters, page capacity) differs from "
                           "the captured one; capture a graph for it");
  }
  using Clock = std::chrono::steady_clock;
  const Clock::time_point t0 = Clock::now();
  GRAFT_RETURN_IF_ERROR(ops_.BeginRecord());
  Status run = model_.Forward(ops_, b, adapters, logits, ids);
  if (!run.ok()) {
    ops_.CancelRecord();
    return run;
  }
  const Clock::time_point t1 = Clock::now();
  GRAFT_RETURN_IF_ERROR(ops_.ReplayRecorded(*graph_));
  last_record_s_ = std::chrono::duration<double>(t1 - t0).count();
  last_run_s_ = std::chrono::duration<double>(Clock::now() - t1).count();
  ++replays_;
  return Status::Ok();
}

Status DecodeGraphCache::Run(const StepBatch& b, const AdapterSet& adapters, float* logits, int32_t* ids) {
  bool exact_rows = false;  // exact mode rebuilds weights on the fly: such steps run eagerly
  for (int32_t slot : b.row_adapter) exact_rows |= adapters.is_exact(static_cast<size_t>(slot));
  if (exact_rows || !DecodeGraph::Capturable(b)) {
    ++eager_;
    return model_.Forward(ops_, b, adapters, logits, ids);
  }
  for (size_t i = 0; i < graphs_.size(); ++i) {
    if (!graphs_[i]->Fits(b, adapters)) continue;
    std::unique_ptr<DecodeGraph> g = std::move(graphs_[i]);
    graphs_.erase(graphs_.begin() + static_cast<std::ptrdiff_t>(i));
    Status s = g->Replay(b, adapters, logits, ids);
    if (s.ok()) {
      ++replays_;
      record_s_ += g->last_record_seconds();
      run_s_ += g->last_run_seconds();
    }
    graphs_.push_back(std::move(g));
    return s;
  }
  auto g = DecodeGraph::Capture(model_, ops_, b, adapters, logits, ids);
  if (!g.ok()) return g.status();
  ++captures_;
  graphs_.push_back(std::move(g).value());
  if (static_cast<int>(graphs_.size()) > capacity_) graphs_.erase(graphs_.begin());
  return Status::Ok();
}

std::string DecodeGraphCache::Summary() const {
  const std::string phases =
      replays_ > 0 ? fmt::format(" (host recording {:.2f} ms + graph {:.2f} ms a step)", 1e3 * record_s_ / replays_,
                                 1e3 * run_s_ / replays_)
                   : "";
  return fmt::format("decode graphs: {} captured, {} steps replayed{}, {} steps run eagerly", captures_, replays_, phases,
                     eager_);
}

}  // namespace graft

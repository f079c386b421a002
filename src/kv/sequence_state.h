// SequenceState: the cache of one sequence inside a KvPool — its page table (positions -> pages,
// shared by all full-attention layers), its recurrent-state slot (Gated DeltaNet layers) and its
// length — and the page bookkeeping a step does for it: the pages its next rows need, taken
// with copy-on-write of a shared last page. Move-only; it gives its pages and slot back when
// destroyed. Fork() makes a sibling that shares the pages (copy-on-write) and copies the
// recurrent state: a decision's questions fork the record. A state draws on one account of its
// pool (KvPool::Account: chat or decisions), and so do its forks and the pages it copies.
//
// Thread-safety: none; its pool's thread.
#pragma once

#include <cstdint>
#include <vector>

#include "kv/kv_pool.h"
#include "util/status.h"

namespace graft {

struct SequenceState {
  int pos = 0;                  // tokens processed so far
  KvPool* pool = nullptr;
  int32_t slot = -1;            // -1 when the model has no GDN layer
  int account = 0;              // the pool account its pages and slot count against
  std::vector<int32_t> pages;   // [ceil(pos / page_size)]

  SequenceState() = default;
  SequenceState(SequenceState&& o) noexcept { *this = std::move(o); }
  SequenceState& operator=(SequenceState&& o) noexcept;
  SequenceState(const SequenceState&) = delete;
  SequenceState& operator=(const SequenceState&) = delete;
  ~SequenceState() { Clear(); }
  // A fresh (empty) sequence in `pool` on `account`: a state slot when the pool has recurrent
  // layers (kResourceExhausted when the account has none free).
  static Result<SequenceState> New(KvPool& pool, int account = 0);
  Result<SequenceState> Fork() const;
  // A fork holding only the first n tokens (n <= pos): the pages for them are shared, the rest
  // left out. A recurrent state cannot be cut back, so with a slot only n == pos (Fork) works.
  Result<SequenceState> ForkPrefix(int n) const;
  // Pages the next n rows (positions pos..pos+n-1) take from the pool: new pages past the table,
  // and a copy of the last page when it is partly filled and shared (copy-on-write).
  int PagesFor(int n) const;
  // Takes those pages (PagesFor(n) of them; the caller checked they are free).
  Status Grow(int n);
  void Clear();
};

}  // namespace graft

#include "kv/sequence_state.h"

#include <fmt/core.h>

#include <algorithm>

namespace graft {

SequenceState& SequenceState::operator=(SequenceState&& o) noexcept {
  if (this != &o) {
    Clear();
    pos = o.pos;
    pool = o.pool;
    slot = o.slot;
    account = o.account;
    pages = std::move(o.pages);
    o.pool = nullptr;
    o.slot = -1;
    o.pages.clear();
    o.pos = 0;
  }
  return *this;
}

void SequenceState::Clear() {
  if (pool) {
    for (int32_t p : pages) pool->Release(p);
    if (slot >= 0) pool->ReleaseSlot(slot);
  }
  pages.clear();
  slot = -1;
  pool = nullptr;
  pos = 0;
}

Result<SequenceState> SequenceState::New(KvPool& pool, int account) {
  SequenceState s;
  s.pool = &pool;
  s.account = account;
  if (pool.has_gdn()) {
    GRAFT_ASSIGN_OR_RETURN(s.slot, pool.AllocateSlot(account));
  }
  return s;
}

Result<SequenceState> SequenceState::Fork() const {
  if (!pool) return InvalidArgument("fork: the sequence has no pool");
  SequenceState f;
  if (slot >= 0) {
    GRAFT_ASSIGN_OR_RETURN(f.slot, pool->AllocateSlot(account, /*zeroed=*/false));
    pool->CopySlot(slot, f.slot);  // the whole slot: conv, S and the open chunk's rows
  }
  f.pool = pool;
  f.account = account;
  f.pos = pos;
  f.pages = pages;
  for (int32_t p : pages) pool->Retain(p);
  return f;
}

Result<SequenceState> SequenceState::ForkPrefix(int n) const {
  if (n == pos) return Fork();
  if (n < 0 || n > pos) return InvalidArgument(fmt::format("fork: {} tokens of a sequence of {}", n, pos));
  if (slot >= 0) return InvalidArgument("fork: a recurrent state cannot be cut back to fewer tokens");
  if (!pool) return InvalidArgument("fork: the sequence has no pool");
  SequenceState f;
  f.pool = pool;
  f.account = account;
  f.pos = n;
  const size_t keep = static_cast<size_t>((n + pool->page_size() - 1) / pool->page_size());
  f.pages.assign(pages.begin(), pages.begin() + static_cast<std::ptrdiff_t>(keep));
  for (int32_t p : f.pages) pool->Retain(p);
  return f;
}

int SequenceState::PagesFor(int n) const {
  const int P = pool->page_size();
  const int have = static_cast<int>(pages.size());
  int add = std::max((pos + n + P - 1) / P - have, 0);
  if (pos % P != 0 && have > 0 && pool->refcount(pages.back()) > 1) ++add;  // copy-on-write
  return add;
}

Status SequenceState::Grow(int n) {
  const int P = pool->page_size();
  if (pos % P != 0 && !pages.empty() && pool->refcount(pages.back()) > 1) {
    GRAFT_ASSIGN_OR_RETURN(int32_t fresh, pool->AllocatePage(account));
    pool->CopyPage(pages.back(), fresh);
    pool->Release(pages.back());
    pages.back() = fresh;
  }
  while (static_cast<int>(pages.size()) * P < pos + n) {
    GRAFT_ASSIGN_OR_RETURN(int32_t p, pool->AllocatePage(account));
    pages.push_back(p);
  }
  return Status::Ok();
}

}  // namespace graft

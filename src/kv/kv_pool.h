// KvPool: the memory every sequence's cache lives in, reserved up front (docs/design.md §3.5).
//
//   KV pages   for each full-attention layer, K and V storage [num_pages][page_size][nkv][hd]
//              in the memory's KV width (PoolMemory::kv_value_bytes: fp32, or bf16 on a device in
//              bf16 mode). A sequence's page table maps its positions to pages and is shared by
//              all layers.
//   state slots  for each Gated DeltaNet layer, one GdnState (conv + recurrent state) per slot.
//
// Pages are reference-counted: forking a sequence shares its pages, and the first write into
// a shared page copies it (copy-on-write), so a decision's questions all read one copy of the
// record's KV. A fixed pool refuses to grow (allocation fails: the caller waits or answers
// 429); a growable pool (offline tools running a sequence at a time) adds pages as needed.
//
// The pages and slots live in a PoolMemory (backend/pool_memory.h): host memory unless the
// backend hands in its own. A pool only reads and writes them through ops and PoolMemory.
//
// Accounts: one pool serves several kinds of work (the engine's chat sequences and decisions,
// docs/design.md §3.5). Every page and slot is taken on an account (0..kAccounts-1) and counted
// there until it is free again (a shared page: until its last holder lets go); an account may
// have a cap, past which its allocations fail as an empty pool's would. free_pages(account) is
// what that account can take now. Reclaim asks the pool's reclaimer (the owner of what holds
// pages only for later use: prefix caches) to give some back until an account can take what it
// needs.
//
// Thread-safety: none; one thread at a time.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "backend/ops.h"
#include "backend/pool_memory.h"
#include "io/model_config.h"
#include "util/status.h"

namespace graft {

class KvPool {
 public:
  // mem: where pages and slots live (nullptr: host memory); the pool keeps it alive.
  KvPool(const ModelConfig& c, int page_size, int num_pages, int num_slots, bool growable,
         std::shared_ptr<PoolMemory> mem = nullptr);
  ~KvPool();
  KvPool(const KvPool&) = delete;
  KvPool& operator=(const KvPool&) = delete;

  int page_size() const { return page_size_; }
  int64_t row_values() const { return row_values_; }  // one token of one layer: nkv * hd
  int kv_value_bytes() const { return kv_value_bytes_; }
  // K and V bytes a token takes in every full-attention layer.
  int64_t kv_bytes_per_token() const { return KvBytesPerToken(cfg_, kv_value_bytes_); }
  static int64_t KvBytesPerToken(const ModelConfig& c, int kv_value_bytes);
  // Bytes of one recurrent-state slot (every Gated DeltaNet layer's state; 0 without such layers).
  static int64_t SlotBytes(const ModelConfig& c);
  // K / V page storage of layer `layer` (a full-attention layer), in the memory's KV width.
  void* k(int layer) { return k_[static_cast<size_t>(layer)]; }
  void* v(int layer) { return v_[static_cast<size_t>(layer)]; }
  GdnState& state(int32_t slot, int layer) { return slots_[static_cast<size_t>(slot)][static_cast<size_t>(layer)]; }

  static constexpr int kAccounts = 2;
  // A page on `account`, its reference count 1 (kResourceExhausted: none free, or the account at
  // its cap).
  Result<int32_t> AllocatePage(int account = 0);
  void Retain(int32_t page) { ++refs_[static_cast<size_t>(page)]; }
  void Release(int32_t page);  // the last release frees it (and its account's count)
  int refcount(int32_t page) const { return refs_[static_cast<size_t>(page)]; }
  void CopyPage(int32_t from, int32_t to);  // every layer's K and V

  // A state slot: zeroed, or (zeroed = false) as its last owner left it, for a caller that
  // overwrites it whole (a fork's CopySlot) — a slot is ~300 MB at Qwen3.5-27B dims, and zeroing
  // it is one call a layer.
  Result<int32_t> AllocateSlot(int account = 0, bool zeroed = true);
  void ReleaseSlot(int32_t slot);
  void CopySlot(int32_t from, int32_t to);

  int num_pages() const { return static_cast<int>(refs_.size()); }
  int free_pages() const { return static_cast<int>(free_pages_.size()) + (growable_ ? 1 << 30 : 0); }
  int num_slots() const { return static_cast<int>(slots_.size()); }
  int free_slots() const { return static_cast<int>(free_slots_.size()); }
  // Per account: what it holds, its cap (-1: none) and what it can take now (the free ones, up
  // to its cap).
  int pages_held(int account) const { return page_held_[Acct(account)]; }
  int slots_held(int account) const { return slot_held_[Acct(account)]; }
  int free_pages(int account) const;
  int free_slots(int account) const;
  void set_page_cap(int account, int pages) { page_cap_[Acct(account)] = pages; }
  void set_slot_cap(int account, int slots) { slot_cap_[Acct(account)] = slots; }
  int page_cap(int account) const { return page_cap_[Acct(account)]; }
  // Called by Reclaim to free room for `account` (it returns false when it has nothing left to
  // give); none by default.
  void set_reclaimer(std::function<bool(int account)> r) { reclaimer_ = std::move(r); }
  // Asks the reclaimer until `account` can take `pages` pages and `slots` slots; whether it can.
  bool Reclaim(int account, int pages, int slots = 0);
  bool growable() const { return growable_; }
  bool has_gdn() const { return has_gdn_; }
  // Whether the pages and slots asked for at construction were all reserved (a device pool
  // can run out of memory: the error names how much it wanted).
  const Status& reserved() const { return reserved_; }
  int64_t bytes() const;

 private:
  static size_t Acct(int account) { return static_cast<size_t>(account); }
  Status AddPages(int n);  // all or nothing
  Status AddSlots(int n);
  const ModelConfig cfg_;
  int page_size_;
  int64_t row_values_;
  int kv_value_bytes_;
  int64_t page_floats_;                            // one page of one layer's K (or V), in PoolMemory floats
  bool growable_;
  bool has_gdn_;
  std::shared_ptr<PoolMemory> mem_;
  int64_t bytes_ = 0;
  Status reserved_;
  std::vector<float*> k_, v_;                      // [layer] -> pages * page_floats_; null: not full attention
  std::vector<int> refs_;                          // [pages]
  std::vector<uint8_t> page_account_;              // [pages] the account a held page counts on
  std::vector<int32_t> free_pages_;
  std::array<int, kAccounts> page_held_{}, slot_held_{};
  std::array<int, kAccounts> page_cap_{-1, -1}, slot_cap_{-1, -1};
  std::function<bool(int)> reclaimer_;
  // One GDN layer's share of a slot block, in this order (floats).
  struct SlotLayout {
    int64_t conv, S, pk, pvn, pgam, pkinv;
    int64_t layer() const { return conv + S + pk + pvn + pgam + pkinv; }
  };
  static SlotLayout LayoutOf(const ModelConfig& c);
  SlotLayout slot_layout_;
  int64_t slot_floats_;                            // slot_layout_.layer() * GDN layers
  std::vector<std::vector<GdnState>> slots_;       // [slot][layer], views into slot_blocks_
  std::vector<float*> slot_blocks_;                // [slot] one block holding all its layers' state
  std::vector<int32_t> free_slots_;
  std::vector<uint8_t> slot_account_;              // [slots]
};

}  // namespace graft

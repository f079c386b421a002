#include "kv/kv_pool.h"

#include <fmt/core.h>

#include <algorithm>

namespace graft {

KvPool::KvPool(const ModelConfig& c, int page_size, int num_pages, int num_slots, bool growable,
               std::shared_ptr<PoolMemory> mem)
    : cfg_(c),
      page_size_(page_size),
      row_values_(int64_t{c.num_kv_heads} * c.head_dim),
      growable_(growable),
      has_gdn_(c.num_layers_of(LayerKind::kLinearAttention) > 0),
      mem_(mem ? std::move(mem) : std::make_shared<HostPoolMemory>()) {
  slot_layout_ = LayoutOf(c);
  slot_floats_ = slot_layout_.layer() * c.num_layers_of(LayerKind::kLinearAttention);
  k_.assign(static_cast<size_t>(c.num_layers), nullptr);
  v_.assign(static_cast<size_t>(c.num_layers), nullptr);
  kv_value_bytes_ = mem_->kv_value_bytes();
  // A page in whole floats of the memory: the kernels address pages by value, so a page's
  // stride must be exact (bf16 pages of an odd value count would end mid-float).
  const int64_t page_bytes = int64_t{page_size} * row_values_ * kv_value_bytes_;
  page_floats_ = page_bytes / 4;
  if (page_bytes % 4 != 0) {
    reserved_ = InvalidArgument(fmt::format("KV pool: a page of {} tokens x {} values of {} bytes is not a whole "
                                            "number of 4-byte words", page_size, row_values_, kv_value_bytes_));
    return;
  }
  reserved_ = AddPages(num_pages);
  if (reserved_.ok()) reserved_ = AddSlots(has_gdn_ ? num_slots : 0);
}

KvPool::~KvPool() {
  for (float* p : k_) if (p) mem_->Free(p);
  for (float* p : v_) if (p) mem_->Free(p);
  for (float* p : slot_blocks_) mem_->Free(p);
}

Status KvPool::AddPages(int n) {
  const int old = num_pages();
  const int64_t page_floats = page_floats_;
  // Allocate every grown block first, so that a refusal leaves the pool as it was.
  std::vector<float*> grown;
  for (int l = 0; l < cfg_.num_layers; ++l) {
    if (cfg_.layer_kinds[static_cast<size_t>(l)] != LayerKind::kFullAttention) continue;
    for (int kv = 0; kv < 2; ++kv) {
      float* g = mem_->Allocate((old + n) * page_floats);
      if (!g) {
        for (float* p : grown) mem_->Free(p);
        return ResourceExhausted(fmt::format("KV pool: no memory for {} pages of {} tokens ({:.1f} MB per layer)",
                                             old + n, page_size_, (old + n) * page_floats * 8 / 1e6));
      }
      grown.push_back(g);
    }
  }
  size_t gi = 0;
  for (int l = 0; l < cfg_.num_layers; ++l) {
    if (cfg_.layer_kinds[static_cast<size_t>(l)] != LayerKind::kFullAttention) continue;
    for (auto* kv : {&k_, &v_}) {
      float*& block = (*kv)[static_cast<size_t>(l)];
      if (block) {
        mem_->Copy(block, grown[gi], old * page_floats);
        mem_->Free(block);
      }
      block = grown[gi++];
    }
    bytes_ += 2 * int64_t{n} * page_floats * 4;
  }
  refs_.resize(static_cast<size_t>(old + n), 0);
  page_account_.resize(static_cast<size_t>(old + n), 0);
  for (int p = old + n - 1; p >= old; --p) free_pages_.push_back(p);
  return Status::Ok();
}

Status KvPool::AddSlots(int n) {
  const auto& c = cfg_;
  const SlotLayout& sl = slot_layout_;
  for (int s = 0; s < n; ++s) {
    float* block = mem_->Allocate(slot_floats_);
    if (!block) {
      return ResourceExhausted(fmt::format("KV pool: no memory for recurrent-state slot {} ({:.1f} MB)",
                                           slots_.size() + 1, slot_floats_ * 4 / 1e6));
    }
    slot_blocks_.push_back(block);
    bytes_ += slot_floats_ * 4;
    std::vector<GdnState> layers(static_cast<size_t>(c.num_layers));
    for (int i = 0; i < c.num_layers; ++i) {
      if (c.layer_kinds[i] != LayerKind::kLinearAttention) continue;
      auto& g = layers[i];
      g.conv = block;
      g.S = g.conv + sl.conv;
      g.pk = g.S + sl.S;
      g.pvn = g.pk + sl.pk;
      g.pgam = g.pvn + sl.pvn;
      g.pkinv = g.pgam + sl.pgam;
      block = g.pkinv + sl.pkinv;
    }
    slots_.push_back(std::move(layers));
    slot_account_.push_back(0);
    free_slots_.insert(free_slots_.begin(), static_cast<int32_t>(slots_.size() - 1));
  }
  return Status::Ok();
}

int KvPool::free_pages(int account) const {
  const int cap = page_cap_[Acct(account)];
  const int free = free_pages();
  return cap < 0 ? free : std::clamp(cap - page_held_[Acct(account)], 0, free);
}

int KvPool::free_slots(int account) const {
  const int cap = slot_cap_[Acct(account)];
  const int free = free_slots();
  return cap < 0 ? free : std::clamp(cap - slot_held_[Acct(account)], 0, free);
}

bool KvPool::Reclaim(int account, int pages, int slots) {
  while (free_pages(account) < pages || (has_gdn_ && free_slots(account) < slots)) {
    if (!reclaimer_ || !reclaimer_(account)) return false;
  }
  return true;
}

Result<int32_t> KvPool::AllocatePage(int account) {
  const int cap = page_cap_[Acct(account)];
  if (cap >= 0 && page_held_[Acct(account)] >= cap) {
    return ResourceExhausted(fmt::format("the KV pool's account {} holds its cap of {} pages", account, cap));
  }
  if (free_pages_.empty()) {
    if (!growable_) return ResourceExhausted(fmt::format("the KV pool's {} pages are all in use", num_pages()));
    GRAFT_RETURN_IF_ERROR(AddPages(std::max(16, num_pages())));
  }
  const int32_t p = free_pages_.back();
  free_pages_.pop_back();
  refs_[static_cast<size_t>(p)] = 1;
  page_account_[static_cast<size_t>(p)] = static_cast<uint8_t>(account);
  ++page_held_[Acct(account)];
  return p;
}

void KvPool::Release(int32_t page) {
  if (--refs_[static_cast<size_t>(page)] == 0) {
    free_pages_.push_back(page);
    --page_held_[page_account_[static_cast<size_t>(page)]];
  }
}

void KvPool::CopyPage(int32_t from, int32_t to) {
  const int64_t n = page_floats_;
  for (int l = 0; l < cfg_.num_layers; ++l) {
    if (!k_[l]) continue;
    mem_->Copy(k_[l] + from * n, k_[l] + to * n, n);
    mem_->Copy(v_[l] + from * n, v_[l] + to * n, n);
  }
}

void KvPool::ReleaseSlot(int32_t slot) {
  free_slots_.push_back(slot);
  --slot_held_[slot_account_[static_cast<size_t>(slot)]];
}

Result<int32_t> KvPool::AllocateSlot(int account, bool zeroed) {
  const int cap = slot_cap_[Acct(account)];
  if (cap >= 0 && slot_held_[Acct(account)] >= cap) {
    return ResourceExhausted(fmt::format("account {}'s {} recurrent-state slots are all in use", account, cap));
  }
  if (free_slots_.empty()) {
    if (!growable_) return ResourceExhausted(fmt::format("the {} recurrent-state slots are all in use", num_slots()));
    GRAFT_RETURN_IF_ERROR(AddSlots(std::max(4, num_slots())));
  }
  const int32_t s = free_slots_.back();
  free_slots_.pop_back();
  slot_account_[static_cast<size_t>(s)] = static_cast<uint8_t>(account);
  ++slot_held_[Acct(account)];
  for (auto& g : slots_[static_cast<size_t>(s)]) {
    if (!g.conv) continue;
    if (zeroed) mem_->Zero(g.conv, slot_layout_.conv + slot_layout_.S);  // adjacent; the chunk rows are unused at pending 0
    g.pending = 0;
  }
  return s;
}

void KvPool::CopySlot(int32_t from, int32_t to) {
  mem_->Copy(slot_blocks_[static_cast<size_t>(from)], slot_blocks_[static_cast<size_t>(to)], slot_floats_);
  auto& dst = slots_[static_cast<size_t>(to)];
  const auto& src = slots_[static_cast<size_t>(from)];
  for (size_t l = 0; l < dst.size(); ++l) dst[l].pending = src[l].pending;
}

int64_t KvPool::bytes() const { return bytes_; }

KvPool::SlotLayout KvPool::LayoutOf(const ModelConfig& c) {
  const int64_t hv = c.linear_num_value_heads, dk = c.linear_key_head_dim, dv = c.linear_value_head_dim;
  return {int64_t{c.conv_dim()} * (c.linear_conv_kernel - 1), hv * dk * dv, kGdnChunk * hv * dk, kGdnChunk * hv * dv,
          kGdnChunk * hv, kGdnChunk * hv};
}

int64_t KvPool::KvBytesPerToken(const ModelConfig& c, int kv_value_bytes) {
  return 2 * int64_t{c.num_kv_heads} * c.head_dim * kv_value_bytes * c.num_layers_of(LayerKind::kFullAttention);
}

int64_t KvPool::SlotBytes(const ModelConfig& c) {
  return LayoutOf(c).layer() * c.num_layers_of(LayerKind::kLinearAttention) * 4;
}

}  // namespace graft

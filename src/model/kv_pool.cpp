#include "model/kv_pool.h"

#include <fmt/core.h>

#include <algorithm>

namespace graft {

KvPool::KvPool(const ModelConfig& c, int page_size, int num_pages, int num_slots, bool growable)
    : cfg_(c),
      page_size_(page_size),
      row_floats_(int64_t{c.num_kv_heads} * c.head_dim),
      growable_(growable),
      has_gdn_(c.num_layers_of(LayerKind::kLinearAttention) > 0) {
  k_.resize(static_cast<size_t>(c.num_layers));
  v_.resize(static_cast<size_t>(c.num_layers));
  AddPages(num_pages);
  AddSlots(has_gdn_ ? num_slots : 0);
}

void KvPool::AddPages(int n) {
  const int old = num_pages();
  for (int l = 0; l < cfg_.num_layers; ++l) {
    if (cfg_.layer_kinds[static_cast<size_t>(l)] != LayerKind::kFullAttention) continue;
    const size_t floats = static_cast<size_t>(old + n) * page_size_ * row_floats_;
    k_[l].resize(floats, 0.0f);
    v_[l].resize(floats, 0.0f);
  }
  refs_.resize(static_cast<size_t>(old + n), 0);
  for (int p = old + n - 1; p >= old; --p) free_pages_.push_back(p);
}

void KvPool::AddSlots(int n) {
  const auto& c = cfg_;
  for (int s = 0; s < n; ++s) {
    std::vector<GdnState> layers(static_cast<size_t>(c.num_layers));
    for (int i = 0; i < c.num_layers; ++i) {
      if (c.layer_kinds[i] != LayerKind::kLinearAttention) continue;
      auto& g = layers[i];
      const size_t hv = c.linear_num_value_heads, dk = c.linear_key_head_dim, dv = c.linear_value_head_dim;
      g.conv.assign(static_cast<size_t>(c.conv_dim()) * (c.linear_conv_kernel - 1), 0.0f);
      g.S.assign(hv * dk * dv, 0.0f);
      g.pk.assign(kGdnChunk * hv * dk, 0.0f);
      g.pvn.assign(kGdnChunk * hv * dv, 0.0f);
      g.pgam.assign(kGdnChunk * hv, 0.0f);
    }
    slots_.push_back(std::move(layers));
    free_slots_.insert(free_slots_.begin(), static_cast<int32_t>(slots_.size() - 1));
  }
}

Result<int32_t> KvPool::AllocatePage() {
  if (free_pages_.empty()) {
    if (!growable_) return ResourceExhausted(fmt::format("the KV pool's {} pages are all in use", num_pages()));
    AddPages(std::max(16, num_pages()));
  }
  const int32_t p = free_pages_.back();
  free_pages_.pop_back();
  refs_[static_cast<size_t>(p)] = 1;
  return p;
}

void KvPool::Release(int32_t page) {
  if (--refs_[static_cast<size_t>(page)] == 0) free_pages_.push_back(page);
}

void KvPool::CopyPage(int32_t from, int32_t to) {
  const size_t n = static_cast<size_t>(page_size_) * row_floats_;
  for (int l = 0; l < cfg_.num_layers; ++l) {
    if (k_[l].empty()) continue;
    std::copy_n(k_[l].begin() + static_cast<ptrdiff_t>(from * n), n, k_[l].begin() + static_cast<ptrdiff_t>(to * n));
    std::copy_n(v_[l].begin() + static_cast<ptrdiff_t>(from * n), n, v_[l].begin() + static_cast<ptrdiff_t>(to * n));
  }
}

Result<int32_t> KvPool::AllocateSlot() {
  if (free_slots_.empty()) {
    if (!growable_) return ResourceExhausted(fmt::format("the {} recurrent-state slots are all in use", num_slots()));
    AddSlots(std::max(4, num_slots()));
  }
  const int32_t s = free_slots_.back();
  free_slots_.pop_back();
  for (auto& g : slots_[static_cast<size_t>(s)]) {
    std::fill(g.conv.begin(), g.conv.end(), 0.0f);
    std::fill(g.S.begin(), g.S.end(), 0.0f);
    g.pending = 0;
  }
  return s;
}

void KvPool::CopySlot(int32_t from, int32_t to) {
  slots_[static_cast<size_t>(to)] = slots_[static_cast<size_t>(from)];  // same sizes: no allocation
}

int64_t KvPool::bytes() const {
  int64_t b = 0;
  for (const auto& l : k_) b += static_cast<int64_t>(l.size()) * 8;  // K and V
  for (const auto& s : slots_) {
    for (const auto& g : s) b += static_cast<int64_t>(g.conv.size() + g.S.size() + g.pk.size() + g.pvn.size() + g.pgam.size()) * 4;
  }
  return b;
}

}  // namespace graft

#include "grammar/mask_store.h"

#include <array>
#include <bit>
#include <cstring>

namespace graft {
namespace {

uint64_t Mix(uint64_t h, uint64_t v) {  // FNV-1a over the value's bytes
  for (int i = 0; i < 8; ++i) {
    h ^= (v >> (8 * i)) & 0xff;
    h *= 0x100000001b3ull;
  }
  return h;
}

static_assert(std::endian::native == std::endian::little, "Get reads the bitset's words as bytes");

// kSpread[b]: byte b's eight bits as eight bytes of 0 or 1 (little-endian: bit 0 first).
constexpr std::array<uint64_t, 256> MakeSpread() {
  std::array<uint64_t, 256> t{};
  for (int b = 0; b < 256; ++b) {
    for (int i = 0; i < 8; ++i) t[b] |= static_cast<uint64_t>((b >> i) & 1) << (8 * i);
  }
  return t;
}
constexpr std::array<uint64_t, 256> kSpread = MakeSpread();

}  // namespace

bool SameGrammar(const Grammar& a, const Grammar& b) {
  if (a.root() != b.root() || a.rule_count() != b.rule_count() || a.elements().size() != b.elements().size()) return false;
  for (size_t i = 0; i < a.elements().size(); ++i) {
    const GrammarElement &x = a.elements()[i], &y = b.elements()[i];
    if (x.kind != y.kind || x.rule != y.rule || x.set != y.set) return false;
  }
  for (int r = 0; r < a.rule_count(); ++r) {
    if (a.alternatives(r) != b.alternatives(r)) return false;
  }
  return true;
}

uint64_t GrammarHash(const Grammar& g) {
  uint64_t h = Mix(0xcbf29ce484222325ull, static_cast<uint64_t>(g.root()));
  for (const GrammarElement& e : g.elements()) {
    h = Mix(h, static_cast<uint64_t>(e.kind));
    h = Mix(h, static_cast<uint64_t>(e.rule));
    for (uint64_t w : e.set) h = Mix(h, w);
  }
  for (int r = 0; r < g.rule_count(); ++r) {
    h = Mix(h, g.alternatives(r).size());
    for (int32_t a : g.alternatives(r)) h = Mix(h, static_cast<uint64_t>(a));
  }
  return h;
}

size_t MaskStore::KeyHash::operator()(const Key& k) const {
  uint64_t h = Mix(0xcbf29ce484222325ull, reinterpret_cast<uintptr_t>(k.g));
  for (const auto& stack : k.s) {
    h = Mix(h, stack.size());
    for (int32_t e : stack) h = Mix(h, static_cast<uint64_t>(e));
  }
  return static_cast<size_t>(h);
}

MaskStore::Known* MaskStore::FindLocked(const Grammar* g) {
  auto it = grammars_.find(g);
  return it == grammars_.end() ? nullptr : &it->second;
}

std::shared_ptr<const Grammar> MaskStore::Canonical(std::shared_ptr<const Grammar> g) {
  const uint64_t h = GrammarHash(*g);
  std::lock_guard<std::mutex> lock(mu_);
  if (grammars_.count(g.get())) return g;
  auto [lo, hi] = by_hash_.equal_range(h);
  for (auto it = lo; it != hi; ++it) {
    if (SameGrammar(*grammars_.at(it->second).g, *g)) return grammars_.at(it->second).g;
  }
  by_hash_.emplace(h, g.get());
  grammars_.emplace(g.get(), Known{g, h, 0});
  return g;
}

bool MaskStore::Get(const Grammar* g, const GrammarMatcher::State& s, std::vector<uint8_t>& allowed) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(Key{g, s});
  if (it == index_.end()) return false;
  lru_.splice(lru_.begin(), lru_, it->second);
  const Entry& e = *it->second;
  // Eight tokens a table lookup (bits to bytes), the tail one at a time.
  allowed.resize(e.tokens);
  const auto* bytes = reinterpret_cast<const uint8_t*>(e.bits.data());
  const size_t whole = e.tokens / 8;
  for (size_t i = 0; i < whole; ++i) std::memcpy(allowed.data() + 8 * i, &kSpread[bytes[i]], 8);
  for (size_t t = 8 * whole; t < e.tokens; ++t) allowed[t] = static_cast<uint8_t>((bytes[t / 8] >> (t % 8)) & 1);
  return true;
}

void MaskStore::Put(const std::shared_ptr<const Grammar>& g, const GrammarMatcher::State& s,
                    const std::vector<uint8_t>& allowed) {
  Entry e{Key{g.get(), s}, g, allowed.size(), std::vector<uint64_t>((allowed.size() + 63) / 64, 0)};
  // Eight tokens a multiply (eight 0 / 1 bytes gathered into one byte's bits), the tail one at a time.
  auto* out = reinterpret_cast<uint8_t*>(e.bits.data());
  const size_t whole = allowed.size() / 8;
  for (size_t i = 0; i < whole; ++i) {
    uint64_t x;
    std::memcpy(&x, allowed.data() + 8 * i, 8);
    out[i] = static_cast<uint8_t>(((x & 0x0101010101010101ull) * 0x0102040810204080ull) >> 56);
  }
  for (size_t t = 8 * whole; t < allowed.size(); ++t) {
    if (allowed[t]) out[t / 8] |= static_cast<uint8_t>(1u << (t % 8));
  }
  e.bytes = e.bits.size() * 8;
  for (const auto& stack : s) e.bytes += stack.size() * sizeof(int32_t) + sizeof(stack);
  std::lock_guard<std::mutex> lock(mu_);
  if (index_.count(e.key) || e.bytes > max_bytes_) return;
  Known* k = FindLocked(g.get());
  if (k == nullptr) {  // a grammar forgotten (its masks evicted) that a sequence still runs
    const uint64_t h = GrammarHash(*g);
    by_hash_.emplace(h, g.get());
    k = &grammars_.emplace(g.get(), Known{g, h, 0}).first->second;
  }
  ++k->masks;
  bytes_ += e.bytes;
  lru_.push_front(std::move(e));
  index_.emplace(lru_.front().key, lru_.begin());
  EvictLocked();
}

void MaskStore::EvictLocked() {
  while (bytes_ > max_bytes_ && !lru_.empty()) {
    Entry& e = lru_.back();
    bytes_ -= e.bytes;
    if (Known* k = FindLocked(e.key.g); k != nullptr && --k->masks == 0) {
      auto [lo, hi] = by_hash_.equal_range(k->hash);
      for (auto it = lo; it != hi; ++it) {
        if (it->second == e.key.g) {
          by_hash_.erase(it);
          break;
        }
      }
      grammars_.erase(e.key.g);
    }
    index_.erase(e.key);
    lru_.pop_back();
  }
}

size_t MaskStore::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

size_t MaskStore::masks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

}  // namespace graft

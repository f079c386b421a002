#include "grammar/matcher.h"

#include <algorithm>

namespace graft {
namespace {

// Expansions without a byte in between past which a branch is dropped: a guard against a
// grammar that breaks the no-empty-repetition contract, never reached by the compilers' rules.
constexpr int kMaxExpandDepth = 4096;

void Normalize(GrammarMatcher::State& s) {
  std::sort(s.begin(), s.end());
  s.erase(std::unique(s.begin(), s.end()), s.end());
}

}  // namespace

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> g) : g_(std::move(g)) {
  const int r = g_->root();
  if (r >= 0) {
    for (int32_t alt : g_->alternatives(r)) Expand(Stack{alt}, state_, 0);
  }
  Normalize(state_);
}

// Moves s forward until its top is a byte set (then it joins out) or it is empty (a whole
// sentence: it joins out empty); a rule reference branches into the rule's alternatives.
void GrammarMatcher::Expand(Stack s, State& out, int depth) const {
  const auto& el = g_->elements();
  while (!s.empty()) {
    const GrammarElement& e = el[static_cast<size_t>(s.back())];
    if (e.kind == GrammarElement::Kind::kEnd) {
      s.pop_back();
      continue;
    }
    if (e.kind == GrammarElement::Kind::kBytes) break;
    if (depth >= kMaxExpandDepth) return;
    const int32_t next = s.back() + 1;
    s.pop_back();
    if (el[static_cast<size_t>(next)].kind != GrammarElement::Kind::kEnd) s.push_back(next);  // the continuation
    const auto& alts = g_->alternatives(e.rule);
    for (size_t i = 0; i + 1 < alts.size(); ++i) {
      Stack branch = s;
      branch.push_back(alts[i]);
      Expand(std::move(branch), out, depth + 1);
    }
    if (alts.empty()) return;
    s.push_back(alts.back());
    ++depth;
  }
  out.push_back(std::move(s));
}

void GrammarMatcher::Step(const State& from, uint8_t byte, State& to) const {
  to.clear();
  const auto& el = g_->elements();
  for (const Stack& s : from) {
    if (s.empty() || !el[static_cast<size_t>(s.back())].Matches(byte)) continue;
    Stack next = s;
    next.back() += 1;
    Expand(std::move(next), to, 0);
  }
  Normalize(to);
}

bool GrammarMatcher::Accept(std::string_view bytes) {
  State cur = state_, next;
  for (unsigned char c : bytes) {
    Step(cur, c, next);
    if (next.empty()) return false;
    cur.swap(next);
  }
  state_ = std::move(cur);
  return true;
}

bool GrammarMatcher::Allows(std::string_view bytes) const {
  State cur = state_, next;
  for (unsigned char c : bytes) {
    Step(cur, c, next);
    if (next.empty()) return false;
    cur.swap(next);
  }
  return true;
}

bool GrammarMatcher::CanStop() const {
  return std::any_of(state_.begin(), state_.end(), [](const Stack& s) { return s.empty(); });
}

bool GrammarMatcher::CanContinue() const {
  return std::any_of(state_.begin(), state_.end(), [](const Stack& s) { return !s.empty(); });
}

TokenTrie::TokenTrie(std::vector<std::string> token_bytes) : bytes_(std::move(token_bytes)) {
  for (size_t i = 0; i < bytes_.size(); ++i) {
    if (!bytes_[i].empty()) order_.push_back(static_cast<int32_t>(i));
  }
  std::sort(order_.begin(), order_.end(), [&](int32_t a, int32_t b) { return bytes_[a] < bytes_[b]; });
}

int MaskCache::Intern(const GrammarMatcher::State& s) {
  auto it = ids_.find(s);
  if (it != ids_.end()) return it->second;
  const int id = static_cast<int>(states_.size());
  auto ins = ids_.emplace(s, id).first;
  states_.push_back(&ins->first);
  std::array<int32_t, 256> unknown;
  unknown.fill(-2);
  next_.push_back(unknown);
  return id;
}

int MaskCache::Next(const GrammarMatcher& m, int id, uint8_t byte) {
  if (next_[static_cast<size_t>(id)][byte] != -2) return next_[static_cast<size_t>(id)][byte];
  GrammarMatcher::State to;
  m.Step(*states_[static_cast<size_t>(id)], byte, to);
  const int r = to.empty() ? -1 : Intern(to);
  next_[static_cast<size_t>(id)][byte] = r;
  return r;
}

std::vector<uint8_t>* MaskCache::Mask(int id) {
  for (auto& [k, mask] : masks_) {
    if (k == id) return &mask;
  }
  return nullptr;
}

void MaskCache::StoreMask(int id, const std::vector<uint8_t>& mask) {
  if (masks_.size() >= kMaxMasks) masks_.erase(masks_.begin());
  masks_.emplace_back(id, mask);
}

void MaskCache::Clear() {
  ids_.clear();
  states_.clear();
  next_.clear();
  masks_.clear();
}

void TokenMask(const GrammarMatcher& m, const TokenTrie& trie, std::vector<uint8_t>& allowed, MaskCache& cache) {
  if (cache.size() > MaskCache::kMaxStates) cache.Clear();  // only between walks: ids stay valid within one
  const int start = cache.Intern(m.state());
  if (const std::vector<uint8_t>* hit = cache.Mask(start)) {
    allowed = *hit;
    return;
  }
  allowed.assign(static_cast<size_t>(trie.size()), 0);
  // ids[d]: the state after the first d bytes of `prev` (the token walked last).
  std::vector<int> ids(1, start);
  std::string prev;
  const auto& order = trie.order();
  for (size_t i = 0; i < order.size();) {
    const std::string& t = trie.bytes(order[i]);
    size_t common = 0;
    while (common < prev.size() && common < t.size() && common + 1 < ids.size() && prev[common] == t[common]) ++common;
    ids.resize(common + 1);
    size_t d = common;
    for (; d < t.size(); ++d) {
      const int n = cache.Next(m, ids[d], static_cast<uint8_t>(t[d]));
      if (n < 0) break;
      ids.push_back(n);
    }
    if (d == t.size()) {
      allowed[static_cast<size_t>(order[i])] = 1;
      prev = t;
      ++i;
      continue;
    }
    // t's first d + 1 bytes are refused: so is every following token that starts with them.
    const std::string dead = t.substr(0, d + 1);
    prev = t.substr(0, d);
    ++i;
    while (i < order.size() && trie.bytes(order[i]).compare(0, dead.size(), dead) == 0) ++i;
  }
  cache.StoreMask(start, allowed);
}

}  // namespace graft

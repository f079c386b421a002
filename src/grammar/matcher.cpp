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
  off_.assign(order_.size() + 1, 0);
  for (size_t i = 0; i < order_.size(); ++i) off_[i + 1] = off_[i] + bytes_[static_cast<size_t>(order_[i])].size();
  flat_.reserve(off_.back());
  for (int32_t id : order_) flat_ += bytes_[static_cast<size_t>(id)];
  byte_sets_.assign(order_.size(), {});
  for (size_t i = 0; i < order_.size(); ++i) {
    for (unsigned char c : bytes_[static_cast<size_t>(order_[i])]) byte_sets_[i][c >> 6] |= uint64_t{1} << (c & 63);
  }
  shared_.assign(order_.size(), 0);
  for (size_t i = 1; i < order_.size(); ++i) {
    const std::string &a = bytes_[static_cast<size_t>(order_[i - 1])], &b = bytes_[static_cast<size_t>(order_[i])];
    size_t n = 0;
    while (n < a.size() && n < b.size() && n < 0xffff && a[n] == b[n]) ++n;
    shared_[i] = static_cast<uint16_t>(n);
  }
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

int MaskCache::Find(const GrammarMatcher& m, int id, uint8_t byte) {
  GrammarMatcher::State to;
  m.Step(*states_[static_cast<size_t>(id)], byte, to);
  const int r = to.empty() ? -1 : Intern(to);
  next_[static_cast<size_t>(id)][byte] = r;
  return r;
}

void MaskCache::Clear() {
  ids_.clear();
  states_.clear();
  next_.clear();
}

void TokenMask(const GrammarMatcher& m, const TokenTrie& trie, std::vector<uint8_t>& allowed, MaskCache& cache) {
  if (cache.size() > MaskCache::kMaxStates) cache.Clear();  // only between walks: ids stay valid within one
  allowed.assign(static_cast<size_t>(trie.size()), 0);
  // ids[d]: the state after the first d bytes of the token walked last (ids[0]: now); ids[0..known]
  // are valid (the last token's bytes up to where it was refused, or all of them).
  std::vector<int> ids(1, cache.Intern(m.state()));
  size_t known = 0;
  const auto& order = trie.order();
  const auto& shared = trie.shared();
  // The bytes that lead from here back to here (inside a string, most of them): a token made of
  // them only is allowed without walking it. The walk asks for these transitions anyway (most
  // bytes start some token).
  std::array<uint64_t, 4> loop{};
  for (int b = 0; b < 256; ++b) {
    if (cache.Next(m, ids[0], static_cast<uint8_t>(b)) == ids[0]) loop[b >> 6] |= uint64_t{1} << (b & 63);
  }
  const bool loops = (loop[0] | loop[1] | loop[2] | loop[3]) != 0;
  for (size_t i = 0; i < order.size();) {
    if (loops) {
      const auto& set = trie.byte_set(i);
      if ((set[0] & ~loop[0]) == 0 && (set[1] & ~loop[1]) == 0 && (set[2] & ~loop[2]) == 0 && (set[3] & ~loop[3]) == 0) {
        allowed[static_cast<size_t>(order[i])] = 1;
        known = 0;  // the walk's states are not this token's
        ++i;
        continue;
      }
    }
    const std::string_view t = trie.sorted(i);
    if (ids.size() < t.size() + 1) ids.resize(t.size() + 1);
    size_t d = std::min<size_t>(shared[i], known);
    for (; d < t.size(); ++d) {
      const int n = cache.Next(m, ids[d], static_cast<uint8_t>(t[d]));
      if (n < 0) break;
      ids[d + 1] = n;
    }
    known = d;
    if (d == t.size()) {
      allowed[static_cast<size_t>(order[i])] = 1;
      ++i;
      continue;
    }
    // t's first d + 1 bytes are refused: so is every following token that starts with them — in
    // byte order a run right after t, found by bisection rather than token by token.
    const std::string_view dead = t.substr(0, d + 1);
    size_t lo = i + 1, hi = order.size();  // the first index past the run that starts with `dead`
    while (lo < hi) {
      const size_t mid = lo + (hi - lo) / 2;
      if (trie.sorted(mid).starts_with(dead)) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    i = lo;
  }
}

}  // namespace graft

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
  for (int b = 0, i = 0; b <= 256; ++b) {
    while (static_cast<size_t>(i) < order_.size() && static_cast<unsigned char>(bytes_[static_cast<size_t>(order_[i])][0]) < b) ++i;
    first_at_[static_cast<size_t>(b)] = static_cast<size_t>(i);
  }
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

std::shared_ptr<const TokenTrie::Split> TokenTrie::SplitBy(const std::array<uint64_t, 4>& set) const {
  {
    std::lock_guard<std::mutex> l(split_mu_);
    auto it = splits_.find(set);
    if (it != splits_.end()) return it->second;
  }
  auto split = std::make_shared<Split>();
  split->inside.assign(bytes_.size(), 0);
  for (size_t i = 0; i < order_.size(); ++i) {
    const auto& b = byte_sets_[i];
    if ((b[0] & ~set[0]) == 0 && (b[1] & ~set[1]) == 0 && (b[2] & ~set[2]) == 0 && (b[3] & ~set[3]) == 0) {
      split->inside[static_cast<size_t>(order_[i])] = 1;
    } else {
      split->outside.push_back(static_cast<uint32_t>(i));
    }
  }
  std::lock_guard<std::mutex> l(split_mu_);
  if (splits_.size() >= kMaxSplits) splits_.clear();
  return splits_.emplace(set, std::move(split)).first->second;
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
  // With such bytes, the tokens made of them only come allowed from the trie's split by that set
  // (made once a set), and only the others are walked; without, every token is.
  std::shared_ptr<const TokenTrie::Split> split;
  if (loops) {
    split = trie.SplitBy(loop);
    allowed = split->inside;
  }
  const size_t count = split ? split->outside.size() : order.size();
  const auto index = [&](size_t k) -> size_t { return split ? split->outside[k] : k; };
  size_t last = 0;  // the order() index walked last (its states are ids[0..known])
  for (size_t k = 0; k < count;) {
    const size_t i = index(k);
    const std::string_view t = trie.sorted(i);
    if (ids.size() < t.size() + 1) ids.resize(t.size() + 1);
    size_t d = i == last + 1 ? std::min<size_t>(shared[i], known) : 0;  // tokens skipped between: none known
    for (; d < t.size(); ++d) {
      const int n = cache.Next(m, ids[d], static_cast<uint8_t>(t[d]));
      if (n < 0) break;
      ids[d + 1] = n;
    }
    known = d;
    last = i;
    if (d == t.size()) {
      allowed[static_cast<size_t>(order[i])] = 1;
      ++k;
      continue;
    }
    // t's first d + 1 bytes are refused: so is every following token that starts with them — in
    // byte order a run right after t, found by bisection rather than token by token (none of it
    // is in the split's inside: a refused prefix holds a byte outside the set).
    const std::string_view dead = t.substr(0, d + 1);
    size_t lo = i + 1, hi = order.size();  // the first index past the run that starts with `dead`
    if (d == 0) lo = hi = trie.first_at(static_cast<unsigned char>(t[0]) + 1);  // a refused first byte: its whole run
    while (lo < hi) {
      const size_t mid = lo + (hi - lo) / 2;
      if (trie.sorted(mid).starts_with(dead)) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    // The walk goes on at the first token at or past lo; its shared prefix with order[lo - 1]
    // lies inside `dead`, so the states known for t still serve it (last = lo - 1).
    last = lo - 1;
    if (split) {
      k = static_cast<size_t>(std::lower_bound(split->outside.begin() + static_cast<std::ptrdiff_t>(k) + 1,
                                               split->outside.end(), static_cast<uint32_t>(lo)) -
                              split->outside.begin());
    } else {
      k = lo;
    }
  }
}

}  // namespace graft

#include "kv/prefix_cache.h"

#include <algorithm>

namespace graft {

Result<int> PrefixCache::Continue(int32_t slot, const std::vector<int32_t>& prompt, bool can_cut, SequenceState* out) {
  const size_t most = prompt.empty() ? 0 : prompt.size() - 1;  // the prompt's last token always runs
  auto best = entries_.end();
  size_t best_n = 0;
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->slot != slot) continue;
    const auto& t = it->tokens;
    const size_t common = static_cast<size_t>(std::mismatch(t.begin(), t.end(), prompt.begin(), prompt.end()).first - t.begin());
    const size_t n = can_cut ? std::min(common, most) : (common == t.size() && common <= most ? common : 0);
    if (n > best_n) best = it, best_n = n;
  }
  if (best_n == 0) return 0;
  GRAFT_ASSIGN_OR_RETURN(*out, best->state.ForkPrefix(static_cast<int>(best_n)));
  entries_.splice(entries_.begin(), entries_, best);  // most recently used
  return static_cast<int>(best_n);
}

void PrefixCache::Insert(int32_t slot, std::vector<int32_t> tokens, SequenceState state) {
  if (capacity_ == 0 || tokens.empty() || static_cast<size_t>(state.pos) != tokens.size()) return;
  std::erase_if(entries_, [&](const Entry& e) { return e.slot == slot && e.tokens == tokens; });
  entries_.push_front(Entry{slot, std::move(tokens), std::move(state)});
  while (entries_.size() > capacity_) entries_.pop_back();
}

bool PrefixCache::EvictOldest() {
  if (entries_.empty()) return false;
  entries_.pop_back();
  return true;
}

void PrefixCache::ForgetSlot(int32_t slot) {
  std::erase_if(entries_, [&](const Entry& e) { return e.slot == slot; });
}

}  // namespace graft

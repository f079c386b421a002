// PrefixCache: chat sequences' caches kept after they end, so that a later prompt that starts
// with the same tokens continues from one instead of computing those tokens again (vLLM's
// automatic prefix caching). Keyed by adapter slot (a slot's adapter and mode; the engine forgets
// a slot's entries when its adapter goes) and tokens.
//
// An entry is a sequence state after exactly its tokens. A prompt continues from the entry that
// covers most of it, never all of it (its last token must run to give the first token's logits):
// an entry whose tokens are all a prefix of the prompt, or — for models without recurrent layers,
// whose attention cache can be cut back to any length — the longest common prefix of an entry
// and the prompt. (Qwen's chat templates render an earlier assistant turn without the empty
// think block its generation prompt held, so with recurrent layers a chat's next turn does not
// extend the earlier sequence: the engine also keeps a copy taken inside a prompt, where the
// server says its next turn will part — GenerationRequest::snapshot_at.) Continuing changes no
// bits: a row's logits do not depend on how its sequence was split into steps (docs/design.md,
// batch invariance).
// The entries hold pool pages and state slots that no running sequence needs; the engine evicts
// the least recently used whenever a step or an admission needs them, so the cache never costs a
// request its room.
//
// Thread-safety: none (the engine thread's).
#pragma once

#include <cstdint>
#include <list>
#include <vector>

#include "kv/sequence_state.h"
#include "util/status.h"

namespace graft {

class PrefixCache {
 public:
  explicit PrefixCache(size_t capacity) : capacity_(capacity) {}
  size_t capacity() const { return capacity_; }
  size_t size() const { return entries_.size(); }

  // The most tokens of `prompt` an entry of `slot` holds (fewer than the prompt; 0: none), the
  // state continued from it in *out (a fork; a fresh state slot from the entry's pool). can_cut:
  // the model has no recurrent layers, so an entry may be cut back to a common prefix. Errors are
  // the fork's (kResourceExhausted: no free slot).
  Result<int> Continue(int32_t slot, const std::vector<int32_t>& prompt, bool can_cut, SequenceState* out);
  // Keeps `state` (after exactly `tokens`) under `slot`; an entry with the same tokens is
  // replaced, and past the capacity the least recently used goes.
  void Insert(int32_t slot, std::vector<int32_t> tokens, SequenceState state);
  // Drops the least recently used entry (its pages and slot back to the pool); false when empty.
  bool EvictOldest();
  void ForgetSlot(int32_t slot);
  void Clear() { entries_.clear(); }

 private:
  struct Entry {
    int32_t slot;
    std::vector<int32_t> tokens;
    SequenceState state;
  };
  size_t capacity_;
  std::list<Entry> entries_;  // most recently used first
};

}  // namespace graft

// GrammarMatcher: where a Grammar stands after the bytes accepted so far, and which bytes, byte
// strings and tokens may come next.
//
// The state is a set of stacks (as llama.cpp's grammar sampler keeps them): each stack lists the
// element each open alternative continues with, its top a byte set the next byte must match; an
// empty stack means the text so far is a whole sentence. Accepting a byte keeps the stacks whose
// top matches it, moves them past it and expands the references ahead of the next byte. An
// ambiguous grammar just carries several stacks; identical ones are merged.
//
// TokenMask answers for a whole vocabulary at once, walking its tokens in byte order so that a
// shared prefix is matched once and a dead prefix skips every token that starts with it (found
// by bisection). MaskStore (mask_store.h) keeps its answers for the states that come again.
// Thread-compatible: one matcher per sequence.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"

namespace graft {

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const Grammar> g);

  // Accepts the bytes if the grammar allows them (then true); otherwise false, state unchanged.
  bool Accept(std::string_view bytes);
  // Whether Accept(bytes) would succeed.
  bool Allows(std::string_view bytes) const;
  // The text so far is a whole sentence of the grammar (generation may stop here).
  bool CanStop() const;
  // Some continuation of the text is still in the grammar (more bytes may follow).
  bool CanContinue() const;
  const Grammar& grammar() const { return *g_; }

  using Stack = std::vector<int32_t>;  // element offsets; back() is the next one to match
  using State = std::vector<Stack>;    // sorted, unique
  const State& state() const { return state_; }
  // One byte from `from` into `to` (empty when the byte is not allowed).
  void Step(const State& from, uint8_t byte, State& to) const;

 private:
  void Expand(Stack s, State& out, int depth) const;
  std::shared_ptr<const Grammar> g_;
  State state_;
};

// A vocabulary's tokens as byte strings, sorted for TokenMask. Tokens with no bytes (padding ids,
// or added tokens left out by the caller) are never allowed.
class TokenTrie {
 public:
  explicit TokenTrie(std::vector<std::string> token_bytes);
  int size() const { return static_cast<int>(bytes_.size()); }
  const std::string& bytes(int32_t token) const { return bytes_[static_cast<size_t>(token)]; }
  const std::vector<int32_t>& order() const { return order_; }  // ids by their bytes, ascending
  // shared()[i]: how many leading bytes order()[i] shares with order()[i - 1] (0 for i = 0).
  const std::vector<uint16_t>& shared() const { return shared_; }
  // The bytes of order()[i], from one buffer laid out in that order (a walk reads it front to
  // back instead of jumping between the tokens' own strings).
  std::string_view sorted(size_t i) const { return std::string_view(flat_).substr(off_[i], off_[i + 1] - off_[i]); }
  // The first order() index whose token starts with a byte >= b (b <= 256): the tokens starting
  // with b are [first_at(b), first_at(b + 1)).
  size_t first_at(int b) const { return first_at_[static_cast<size_t>(b)]; }
  // The set of byte values order()[i] holds (bit b of word b / 64).
  const std::array<uint64_t, 4>& byte_set(size_t i) const { return byte_sets_[i]; }
  // The vocabulary split by a byte set: `inside`, an allowed-mask with 1 for every token made
  // only of bytes in the set; `outside`, the order() indices of the rest, ascending. Made once a
  // set and kept (a few sets recur — a JSON string's inside — and a mask of a state whose bytes
  // in the set lead back to it starts from `inside`); thread-safe.
  struct Split {
    std::vector<uint8_t> inside;
    std::vector<uint32_t> outside;
  };
  std::shared_ptr<const Split> SplitBy(const std::array<uint64_t, 4>& set) const;

 private:
  std::vector<std::string> bytes_;
  std::vector<int32_t> order_;
  std::vector<uint16_t> shared_;
  std::string flat_;
  std::vector<size_t> off_;
  std::vector<std::array<uint64_t, 4>> byte_sets_;
  std::array<size_t, 257> first_at_{};
  static constexpr size_t kMaxSplits = 16;  // ~0.2 MB each at a 151K vocabulary; cleared when full
  mutable std::mutex split_mu_;
  mutable std::map<std::array<uint64_t, 4>, std::shared_ptr<const Split>> splits_;
};

// The matcher's states interned, with the transitions found so far, so that a mask walks a
// table instead of stepping stacks. One per matcher (per sequence); TokenMask clears it before a
// walk once it holds more than kMaxStates states.
class MaskCache {
 public:
  static constexpr size_t kMaxStates = 1 << 14;
  int Intern(const GrammarMatcher::State& s);
  // The state after `byte` from state `id` (-1: refused): a table lookup once found.
  int Next(const GrammarMatcher& m, int id, uint8_t byte) {
    const int r = next_[static_cast<size_t>(id)][byte];
    return r != -2 ? r : Find(m, id, byte);
  }
  void Clear();
  size_t size() const { return states_.size(); }

 private:
  int Find(const GrammarMatcher& m, int id, uint8_t byte);  // steps the stacks, interns the result
  std::map<GrammarMatcher::State, int> ids_;
  std::vector<const GrammarMatcher::State*> states_;
  std::vector<std::array<int32_t, 256>> next_;  // -2: not computed yet
};

// allowed[t] = 1 when the matcher accepts token t's bytes next, else 0 (allowed.size() == trie.size()).
void TokenMask(const GrammarMatcher& m, const TokenTrie& trie, std::vector<uint8_t>& allowed, MaskCache& cache);

}  // namespace graft

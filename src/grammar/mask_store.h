// MaskStore: the token masks of grammar states over one vocabulary, kept for every sequence that
// runs an equal grammar — the states of a schema come back step after step (inside a string,
// after each key) and request after request (a service sends one schema many times), and a
// mask found once is a lookup from then on.
//
// Grammars are compiled a request at a time; Canonical() maps each to the first equal grammar
// it has seen (equal elements and alternatives, compared in full, never by hash alone), so that
// equal schemas share their masks. Masks are stored as bitsets under (canonical grammar, state),
// least recently used first out once they pass max_bytes; a grammar with no masks left is
// dropped with them. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/matcher.h"

namespace graft {

class MaskStore {
 public:
  explicit MaskStore(size_t max_bytes) : max_bytes_(max_bytes) {}

  // The grammar equal to g that masks are stored under (g itself the first time).
  std::shared_ptr<const Grammar> Canonical(std::shared_ptr<const Grammar> g);
  // The stored mask of state s of canonical grammar g into allowed (resized to the vocabulary's
  // size), or false.
  bool Get(const Grammar* g, const GrammarMatcher::State& s, std::vector<uint8_t>& allowed);
  // Each stored mask holds its grammar alive, so a key's address is never reused while it is.
  void Put(const std::shared_ptr<const Grammar>& g, const GrammarMatcher::State& s, const std::vector<uint8_t>& allowed);

  size_t bytes() const;
  size_t masks() const;

 private:
  struct Key {
    const Grammar* g;
    GrammarMatcher::State s;
    bool operator==(const Key& o) const { return g == o.g && s == o.s; }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const;
  };
  struct Entry {
    Key key;
    std::shared_ptr<const Grammar> grammar;
    size_t tokens;
    std::vector<uint64_t> bits;
    size_t bytes = 0;  // what it counts against max_bytes: the bits and the state's stacks
  };
  void EvictLocked();
  struct Known;
  Known* FindLocked(const Grammar* g);

  const size_t max_bytes_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // most recent first
  std::unordered_map<Key, std::list<Entry>::iterator, KeyHash> index_;
  // Canonical grammars by address, each with its structural hash (computed once) and mask count,
  // and by hash (equal ones compared in full); one whose last mask is evicted is forgotten.
  struct Known {
    std::shared_ptr<const Grammar> g;
    uint64_t hash = 0;
    size_t masks = 0;
  };
  std::unordered_map<const Grammar*, Known> grammars_;
  std::unordered_multimap<uint64_t, const Grammar*> by_hash_;
  size_t bytes_ = 0;
};

// Structural equality and hash of two grammars (same rules, alternatives and elements, same root).
bool SameGrammar(const Grammar& a, const Grammar& b);
uint64_t GrammarHash(const Grammar& g);

}  // namespace graft

// Grammar: a context-free grammar over bytes — what structured output compiles to (json_schema.h)
// and what GrammarMatcher (matcher.h) runs, one byte at a time.
//
// Rule r has alternatives; each alternative is a sequence of elements, stored contiguously and
// closed by a kEnd element: a set of bytes to match, or a reference to a rule. Contract for
// every grammar built here: no rule is left-recursive and no repetition repeats something that
// can match nothing (repetition is right recursion over a non-empty element), so expanding the
// references ahead of the next byte always ends. Immutable once built; share it freely.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace graft {

struct GrammarElement {
  enum class Kind : uint8_t { kEnd, kBytes, kRule };
  Kind kind = Kind::kEnd;
  int32_t rule = -1;                // kRule
  std::array<uint64_t, 4> set{};    // kBytes: bit b set when byte b matches
  bool Matches(uint8_t b) const { return (set[b >> 6] >> (b & 63)) & 1; }
};

class Grammar {
 public:
  using Element = GrammarElement;

  // A new rule with no alternatives yet (so that rules can refer to each other, or themselves).
  int NewRule();
  // Appends an alternative to `rule`; an empty sequence matches the empty string.
  void AddAlternative(int rule, const std::vector<Element>& seq);
  void set_root(int rule) { root_ = rule; }
  int root() const { return root_; }

  // Elements.
  static Element Ref(int rule);
  static Element Byte(uint8_t b);
  static Element Range(uint8_t lo, uint8_t hi);
  // Bytes of `chars` (each a byte), or every byte but them when `negate`.
  static Element Set(const std::string& chars, bool negate = false);
  static Element Union(Element a, const Element& b);  // two byte sets

  // Rules built from elements (each a new rule, returned as its id).
  int Literal(const std::string& text);                 // exactly these bytes
  int Sequence(const std::vector<Element>& seq);        // one alternative
  int Choice(const std::vector<int>& rules);            // any one of the rules
  int Star(const Element& e);                           // zero or more of e (e never empty)
  int Plus(const Element& e);                           // one or more
  int Optional(const Element& e);                       // zero or one
  int Repeat(const Element& e, int lo, int hi);         // lo..hi of e (hi >= lo >= 0)

  // Storage, for the matcher: an alternative is an offset into elements(), read up to kEnd.
  const std::vector<Element>& elements() const { return elements_; }
  const std::vector<int32_t>& alternatives(int rule) const { return alternatives_[static_cast<size_t>(rule)]; }
  int rule_count() const { return static_cast<int>(alternatives_.size()); }

 private:
  std::vector<Element> elements_;
  std::vector<std::vector<int32_t>> alternatives_;  // per rule: offsets into elements_
  int root_ = -1;
};

}  // namespace graft

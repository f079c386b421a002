#include "grammar/grammar.h"

namespace graft {

int Grammar::NewRule() {
  alternatives_.emplace_back();
  return static_cast<int>(alternatives_.size()) - 1;
}

void Grammar::AddAlternative(int rule, const std::vector<Element>& seq) {
  alternatives_[static_cast<size_t>(rule)].push_back(static_cast<int32_t>(elements_.size()));
  elements_.insert(elements_.end(), seq.begin(), seq.end());
  elements_.push_back(Element{});  // kEnd
}

GrammarElement Grammar::Ref(int rule) {
  Element e;
  e.kind = Element::Kind::kRule;
  e.rule = rule;
  return e;
}

GrammarElement Grammar::Range(uint8_t lo, uint8_t hi) {
  Element e;
  e.kind = Element::Kind::kBytes;
  for (int b = lo; b <= hi; ++b) e.set[static_cast<size_t>(b >> 6)] |= uint64_t{1} << (b & 63);
  return e;
}

GrammarElement Grammar::Byte(uint8_t b) { return Range(b, b); }

GrammarElement Grammar::Set(const std::string& chars, bool negate) {
  Element e;
  e.kind = Element::Kind::kBytes;
  for (unsigned char c : chars) e.set[c >> 6] |= uint64_t{1} << (c & 63);
  if (negate) {
    for (auto& w : e.set) w = ~w;
  }
  return e;
}

GrammarElement Grammar::Union(Element a, const Element& b) {
  for (size_t i = 0; i < 4; ++i) a.set[i] |= b.set[i];
  return a;
}

int Grammar::Literal(const std::string& text) {
  std::vector<Element> seq;
  for (unsigned char c : text) seq.push_back(Byte(c));
  return Sequence(seq);
}

int Grammar::Sequence(const std::vector<Element>& seq) {
  const int r = NewRule();
  AddAlternative(r, seq);
  return r;
}

int Grammar::Choice(const std::vector<int>& rules) {
  const int r = NewRule();
  for (int x : rules) AddAlternative(r, {Ref(x)});
  return r;
}

int Grammar::Star(const Element& e) {
  const int r = NewRule();
  AddAlternative(r, {e, Ref(r)});
  AddAlternative(r, {});
  return r;
}

int Grammar::Plus(const Element& e) { return Sequence({e, Ref(Star(e))}); }

int Grammar::Optional(const Element& e) {
  const int r = NewRule();
  AddAlternative(r, {e});
  AddAlternative(r, {});
  return r;
}

int Grammar::Repeat(const Element& e, int lo, int hi) {
  // tail_k: zero to k more of e, as nested optionals (right recursion, no ambiguity).
  int tail = Sequence({});
  for (int k = 0; k < hi - lo; ++k) {
    const int r = NewRule();
    AddAlternative(r, {e, Ref(tail)});
    AddAlternative(r, {});
    tail = r;
  }
  std::vector<Element> seq(static_cast<size_t>(lo), e);
  seq.push_back(Ref(tail));
  return Sequence(seq);
}

}  // namespace graft

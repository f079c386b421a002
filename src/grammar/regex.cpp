#include "grammar/regex.h"

#include <fmt/core.h>

#include <vector>

namespace graft {
namespace {

using E = GrammarElement;

constexpr int kMaxRepeat = 256;
constexpr int kMaxNesting = 64;

// A parsed piece: the rule that matches it, and whether it can match the empty string.
struct Piece {
  int rule;
  bool nullable;
};

class Parser {
 public:
  explicit Parser(const std::string& p) : p_(p) {}

  Result<std::shared_ptr<const Grammar>> Run() {
    size_t end = p_.size();
    if (!p_.empty() && p_[0] == '^') pos_ = 1;
    if (end > pos_ && p_[end - 1] == '$' && (end < 2 || p_[end - 2] != '\\')) end_ = end - 1;
    else end_ = end;
    GRAFT_ASSIGN_OR_RETURN(Piece whole, Alternation(0));
    if (pos_ != end_) return Bad(pos_, "an unmatched ')'");
    g_.set_root(whole.rule);
    return std::make_shared<const Grammar>(std::move(g_));
  }

 private:
  Status Bad(size_t at, const std::string& what) const {
    return InvalidArgument(fmt::format("{} (at position {} of the regular expression) is not supported", what, at));
  }
  bool More() const { return pos_ < end_; }
  char Peek() const { return p_[pos_]; }

  Result<Piece> Alternation(int depth) {
    if (depth > kMaxNesting) return Bad(pos_, fmt::format("nesting deeper than {} groups", kMaxNesting));
    std::vector<Piece> alts;
    GRAFT_ASSIGN_OR_RETURN(Piece first, Sequence(depth));
    alts.push_back(first);
    while (More() && Peek() == '|') {
      ++pos_;
      GRAFT_ASSIGN_OR_RETURN(Piece next, Sequence(depth));
      alts.push_back(next);
    }
    if (alts.size() == 1) return alts[0];
    std::vector<int> rules;
    bool nullable = false;
    for (const Piece& a : alts) rules.push_back(a.rule), nullable = nullable || a.nullable;
    return Piece{g_.Choice(rules), nullable};
  }

  Result<Piece> Sequence(int depth) {
    std::vector<E> seq;
    bool nullable = true;
    while (More() && Peek() != '|' && Peek() != ')') {
      const size_t at = pos_;
      GRAFT_ASSIGN_OR_RETURN(Piece atom, Atom(depth));
      GRAFT_ASSIGN_OR_RETURN(Piece q, Quantified(atom, at));
      seq.push_back(Grammar::Ref(q.rule));
      nullable = nullable && q.nullable;
    }
    return Piece{g_.Sequence(seq), nullable};
  }

  Result<Piece> Quantified(Piece atom, size_t at) {
    if (!More()) return atom;
    const char c = Peek();
    int lo = 1, hi = 1;
    if (c == '*') lo = 0, hi = -1, ++pos_;
    else if (c == '+') lo = 1, hi = -1, ++pos_;
    else if (c == '?') lo = 0, hi = 1, ++pos_;
    else if (c == '{') {
      GRAFT_RETURN_IF_ERROR(Bounds(&lo, &hi));
    } else {
      return atom;
    }
    if (More() && (Peek() == '?' || Peek() == '+')) return Bad(pos_, "a lazy or possessive quantifier");
    if (More() && (Peek() == '*' || Peek() == '{')) return Bad(pos_, "a quantifier on a quantifier");
    if (atom.nullable && hi != 1) return Bad(at, "a repeated part that can match nothing");
    const E e = Grammar::Ref(atom.rule);
    if (hi < 0) {
      const int star = g_.Star(e);
      return Piece{lo == 0 ? star : g_.Sequence({Grammar::Ref(g_.Repeat(e, lo, lo)), Grammar::Ref(star)}), lo == 0};
    }
    return Piece{g_.Repeat(e, lo, hi), lo == 0 || atom.nullable};
  }

  Status Bounds(int* lo, int* hi) {
    const size_t at = pos_++;
    auto number = [&](int* out) {
      size_t start = pos_;
      long v = 0;
      while (More() && Peek() >= '0' && Peek() <= '9' && v <= kMaxRepeat) v = v * 10 + (p_[pos_++] - '0');
      *out = static_cast<int>(v);
      return pos_ > start;
    };
    if (!number(lo)) return Bad(at, "a '{' that is no {m}, {m,} or {m,n}");
    *hi = *lo;
    if (More() && Peek() == ',') {
      ++pos_;
      if (!number(hi)) *hi = -1;
    }
    if (!More() || Peek() != '}') return Bad(at, "a '{' that is no {m}, {m,} or {m,n}");
    ++pos_;
    if (*lo > kMaxRepeat || *hi > kMaxRepeat) return Bad(at, fmt::format("a bound over {}", kMaxRepeat));
    if (*hi >= 0 && *hi < *lo) return Bad(at, "a bound {m,n} with n < m");
    return Status::Ok();
  }

  Result<Piece> Atom(int depth) {
    const size_t at = pos_;
    const char c = p_[pos_++];
    switch (c) {
      case '(': {
        if (More() && Peek() == '?') {
          if (pos_ + 1 < end_ && p_[pos_ + 1] == ':') {
            pos_ += 2;
          } else {
            return Bad(at, "a group other than ( ) and (?: ) (lookaround, a named group, a flag)");
          }
        }
        GRAFT_ASSIGN_OR_RETURN(Piece inner, Alternation(depth + 1));
        if (!More() || Peek() != ')') return Bad(at, "an unclosed '('");
        ++pos_;
        return inner;
      }
      case '.': return Piece{g_.Sequence({Grammar::Set("\n", /*negate=*/true)}), false};
      case '[': return Class(at);
      case '\\': {
        GRAFT_ASSIGN_OR_RETURN(E e, Escape(at, /*in_class=*/false));
        return Piece{g_.Sequence({e}), false};
      }
      case '*': case '+': case '?': case '{': return Bad(at, "a quantifier with nothing before it");
      case '^': case '$': return Bad(at, "an anchor inside the pattern");
      default: {
        // A literal; a UTF-8 character's bytes are one atom (so a quantifier repeats all of them).
        std::vector<E> bytes = {Grammar::Byte(static_cast<uint8_t>(c))};
        if (static_cast<unsigned char>(c) >= 0xC0) {
          while (More() && (static_cast<unsigned char>(Peek()) & 0xC0) == 0x80) bytes.push_back(Grammar::Byte(static_cast<uint8_t>(p_[pos_++])));
        }
        return Piece{g_.Sequence(bytes), false};
      }
    }
  }

  // After a backslash: the byte set it names.
  Result<E> Escape(size_t at, bool in_class) {
    if (!More()) return Bad(at, "a trailing backslash");
    const char c = p_[pos_++];
    const E digit = Grammar::Range('0', '9');
    const E word = Grammar::Union(Grammar::Union(Grammar::Union(Grammar::Range('a', 'z'), Grammar::Range('A', 'Z')), digit),
                                  Grammar::Byte('_'));
    const E space = Grammar::Set(" \t\n\r\f\v");
    auto negate = [](E e) {
      for (auto& w : e.set) w = ~w;
      return e;
    };
    switch (c) {
      case 'd': return digit;
      case 'D': return negate(digit);
      case 'w': return word;
      case 'W': return negate(word);
      case 's': return space;
      case 'S': return negate(space);
      case 'n': return Grammar::Byte('\n');
      case 't': return Grammar::Byte('\t');
      case 'r': return Grammar::Byte('\r');
      case 'f': return Grammar::Byte('\f');
      case 'v': return Grammar::Byte('\v');
      default:
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
          return Bad(at, fmt::format("the escape \\{}{}", c, in_class ? " in a class" : ""));
        }
        return Grammar::Byte(static_cast<uint8_t>(c));  // an escaped punctuation mark stands for itself
    }
  }

  Result<Piece> Class(size_t at) {
    bool neg = false;
    if (More() && Peek() == '^') neg = true, ++pos_;
    E set = Grammar::Set("");
    bool first = true;
    while (true) {
      if (!More()) return Bad(at, "an unclosed '['");
      char c = Peek();
      if (c == ']' && !first) {
        ++pos_;
        break;
      }
      first = false;
      const size_t here = pos_++;
      E item;
      if (c == '\\') {
        GRAFT_ASSIGN_OR_RETURN(item, Escape(here, /*in_class=*/true));
      } else if (static_cast<unsigned char>(c) >= 0x80) {
        return Bad(here, "a non-ASCII character in a class");
      } else if (c == '[' && More() && Peek() == ':') {
        return Bad(here, "a POSIX class");
      } else {
        item = Grammar::Byte(static_cast<uint8_t>(c));
        if (pos_ + 1 < end_ && Peek() == '-' && p_[pos_ + 1] != ']') {
          const char hi = p_[pos_ + 1];
          if (hi == '\\' || static_cast<unsigned char>(hi) >= 0x80) return Bad(pos_, "a range ending in an escape or non-ASCII");
          if (static_cast<unsigned char>(hi) < static_cast<unsigned char>(c)) return Bad(here, "a reversed range");
          item = Grammar::Range(static_cast<uint8_t>(c), static_cast<uint8_t>(hi));
          pos_ += 2;
        }
      }
      set = Grammar::Union(set, item);
    }
    if (neg) {
      for (auto& w : set.set) w = ~w;
    }
    return Piece{g_.Sequence({set}), false};
  }

  const std::string& p_;
  size_t pos_ = 0, end_ = 0;
  Grammar g_;
};

}  // namespace

Result<std::shared_ptr<const Grammar>> RegexGrammar(const std::string& pattern) { return Parser(pattern).Run(); }

}  // namespace graft

#include "template/parser.h"

#include <fmt/core.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>

#include "util/byte_level.h"

namespace graft::jinja {
namespace {

// ---------------------------------------------------------------- chunks (text and tags)

struct Chunk {
  enum class Kind { kText, kOutput, kBlock } kind;
  std::string text;  // text, or the tag's inner source
  int line = 0;
};

bool IsSpaceTab(char c) { return c == ' ' || c == '\t'; }
bool IsWs(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// The line of a byte of `s`, for positions asked in non-decreasing order (each newline is
// counted once: a template of many tags stays linear in its size).
class LineCounter {
 public:
  explicit LineCounter(const std::string& s) : s_(s) {}
  int At(size_t pos) {
    if (pos < at_) at_ = 0, line_ = 1;  // not expected; recount rather than answer wrongly
    for (; at_ < pos && at_ < s_.size(); ++at_) line_ += s_[at_] == '\n';
    return line_;
  }

 private:
  const std::string& s_;
  size_t at_ = 0;
  int line_ = 1;
};

// Whether a block tag's inner source (its '-' / '+' markers removed) is `raw`.
bool IsRawTag(const std::string& body) {
  size_t b = 0, e = body.size();
  while (b < e && IsWs(body[b])) ++b;
  while (e > b && IsWs(body[e - 1])) --e;
  return body.compare(b, e - b, "raw") == 0;
}

// The first {% endraw %} at or after `from` (with '-' / '+' markers and spaces inside): where its
// "{%" and its "%}" start, and whether it strips on either side.
bool FindEndRaw(const std::string& src, size_t from, size_t& open, size_t& close, bool& strip_left, bool& strip_right) {
  for (size_t at = src.find("{%", from); at != std::string::npos; at = src.find("{%", at + 2)) {
    size_t i = at + 2;
    strip_left = i < src.size() && src[i] == '-';
    if (i < src.size() && (src[i] == '-' || src[i] == '+')) ++i;
    while (i < src.size() && IsWs(src[i])) ++i;
    if (src.compare(i, 6, "endraw") != 0) continue;
    i += 6;
    while (i < src.size() && IsWs(src[i])) ++i;
    strip_right = i < src.size() && src[i] == '-';
    if (strip_right) ++i;
    if (src.compare(i, 2, "%}") != 0) continue;
    open = at;
    close = i;
    return true;
  }
  return false;
}

Result<std::vector<Chunk>> SplitChunks(const std::string& src) {
  std::vector<Chunk> out;
  LineCounter lines(src);
  size_t pos = 0;
  bool strip_next = false, trim_next_newline = false;
  while (pos <= src.size()) {
    size_t open = src.find('{', pos);
    while (open != std::string::npos && open + 1 < src.size() && src[open + 1] != '{' && src[open + 1] != '%' &&
           src[open + 1] != '#') {
      open = src.find('{', open + 1);
    }
    if (open != std::string::npos && open + 1 >= src.size()) open = std::string::npos;
    std::string text = src.substr(pos, (open == std::string::npos ? src.size() : open) - pos);
    if (strip_next) {
      size_t k = 0;
      while (k < text.size() && IsWs(text[k])) ++k;
      text.erase(0, k);
    } else if (trim_next_newline) {
      if (text.rfind("\r\n", 0) == 0) text.erase(0, 2);
      else if (!text.empty() && text[0] == '\n') text.erase(0, 1);
    }
    strip_next = trim_next_newline = false;
    if (open == std::string::npos) {
      if (!text.empty()) out.push_back({Chunk::Kind::kText, text, lines.At(pos)});
      break;
    }
    const char kind = src[open + 1];
    const char* close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    size_t inner = open + 2;
    const bool strip_left = inner < src.size() && src[inner] == '-';
    const bool plus_left = inner < src.size() && src[inner] == '+';
    if (strip_left || plus_left) ++inner;
    size_t end = src.find(close, inner);
    // For expression and block tags, skip closers inside string literals and, as Jinja's lexer
    // does, inside open brackets ({{ {'a': {'b': 1}} }} ends at the last "}}").
    if (kind != '#') {
      end = std::string::npos;
      char quote = 0;
      int depth = 0;
      for (size_t i = inner; i + 1 < src.size(); ++i) {
        const char c = src[i];
        if (quote) {
          if (c == '\\') ++i;
          else if (c == quote) quote = 0;
          continue;
        }
        if (c == '\'' || c == '"') {
          quote = c;
        } else if (depth == 0 && c == close[0] && src[i + 1] == close[1]) {
          end = i;
          break;
        } else if (c == '(' || c == '[' || c == '{') {
          ++depth;
        } else if ((c == ')' || c == ']' || c == '}') && depth > 0) {
          --depth;
        }
      }
    }
    if (end == std::string::npos) {
      return InvalidArgument(fmt::format("line {}: '{}{}' is never closed", lines.At(open), '{', kind));
    }
    const bool strip_right = end > inner && src[end - 1] == '-';
    std::string body = src.substr(inner, end - inner - (strip_right ? 1 : 0));
    if (strip_left) {
      size_t k = text.size();
      while (k > 0 && IsWs(text[k - 1])) --k;
      text.resize(k);
    } else if (kind != '{' && !plus_left) {
      // lstrip_blocks: drop spaces and tabs between the line start and a block or comment tag.
      size_t k = 0;
      while (k < text.size() && IsSpaceTab(text[text.size() - 1 - k])) ++k;
      const size_t ws_start = open - k;
      if (ws_start == 0 || src[ws_start - 1] == '\n') text.resize(text.size() - k);
    }
    if (!text.empty()) out.push_back({Chunk::Kind::kText, text, lines.At(pos)});
    const int line = lines.At(open);
    if (kind == '%' && IsRawTag(body)) {
      // {% raw %} ... {% endraw %}: the text between is output as it stands (no trim_blocks after
      // the raw tag, as Jinja's lexer; '-' on either inner side strips, lstrip_blocks applies
      // before the endraw tag).
      size_t e_open = 0, e_end = 0;
      bool e_strip_left = false, e_strip_right = false;
      if (!FindEndRaw(src, end + 2, e_open, e_end, e_strip_left, e_strip_right)) {
        return InvalidArgument(fmt::format("line {}: '{{% raw %}}' is never closed by '{{% endraw %}}'", line));
      }
      std::string raw = src.substr(end + 2, e_open - (end + 2));
      if (strip_right) {
        size_t k = 0;
        while (k < raw.size() && IsWs(raw[k])) ++k;
        raw.erase(0, k);
      }
      if (e_strip_left) {
        size_t k = raw.size();
        while (k > 0 && IsWs(raw[k - 1])) --k;
        raw.resize(k);
      } else if (e_open > 0 && src[e_open + 2] != '+') {
        size_t k = 0;
        while (k < raw.size() && IsSpaceTab(raw[raw.size() - 1 - k])) ++k;
        const size_t ws_start = e_open - k;
        if (ws_start == 0 || src[ws_start - 1] == '\n') raw.resize(raw.size() - k);
      }
      if (!raw.empty()) out.push_back({Chunk::Kind::kText, raw, lines.At(end + 2)});
      strip_next = e_strip_right;
      trim_next_newline = !e_strip_right;
      pos = e_end + 2;
      continue;
    }
    if (kind == '{') out.push_back({Chunk::Kind::kOutput, body, line});
    else if (kind == '%') out.push_back({Chunk::Kind::kBlock, body, line});
    strip_next = strip_right;
    trim_next_newline = !strip_right && kind != '{';  // trim_blocks
    pos = end + 2;
  }
  return out;
}

// ---------------------------------------------------------------- expression tokens

struct Tok {
  enum class Kind { kName, kString, kInt, kFloat, kOp, kEnd } kind;
  std::string text;
  int64_t i = 0;
  double f = 0;
};

Result<std::vector<Tok>> Lex(const std::string& s, int line) {
  std::vector<Tok> out;
  size_t i = 0;
  auto err = [&](const std::string& m) { return InvalidArgument(fmt::format("line {}: {}", line, m)); };
  while (i < s.size()) {
    const char c = s[i];
    if (IsWs(c)) { ++i; continue; }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      out.push_back({Tok::Kind::kName, s.substr(i, j - i)});
      i = j;
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      bool is_float = false;
      if (j + 1 < s.size() && s[j] == '.' && std::isdigit(static_cast<unsigned char>(s[j + 1]))) {
        is_float = true;
        ++j;
        while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      }
      // An exponent (1e20, 2.5E-3): Jinja's floats have one, with or without a fraction.
      if (j < s.size() && (s[j] == 'e' || s[j] == 'E')) {
        const size_t d = j + 1 < s.size() && (s[j + 1] == '+' || s[j + 1] == '-') ? j + 2 : j + 1;
        if (d < s.size() && std::isdigit(static_cast<unsigned char>(s[d]))) {
          is_float = true;
          j = d;
          while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
        }
      }
      std::string num = s.substr(i, j - i);
      num.erase(std::remove(num.begin(), num.end(), '_'), num.end());
      Tok t{is_float ? Tok::Kind::kFloat : Tok::Kind::kInt, num};
      // An integer too long for int64 is a float, as in the JavaScript reference (std::stoll
      // would throw out of the parser); strtod saturates to inf rather than throw.
      if (!is_float && std::from_chars(num.data(), num.data() + num.size(), t.i).ec != std::errc()) is_float = true;
      if (is_float) t.kind = Tok::Kind::kFloat, t.f = std::strtod(num.c_str(), nullptr);
      out.push_back(t);
      i = j;
      continue;
    }
    if (c == '\'' || c == '"') {
      std::string v;
      size_t j = i + 1;
      for (; j < s.size() && s[j] != c; ++j) {
        if (s[j] != '\\' || j + 1 >= s.size()) {
          v += s[j];
          continue;
        }
        const char e = s[++j];
        // Python's escapes (Jinja decodes a literal as unicode-escape): \xhh, \uhhhh, \Uhhhhhhhh,
        // up to three octal digits, the single letters; an unknown one keeps its backslash.
        const auto hex_run = [&](size_t n, uint32_t* cp) {  // exactly n hex digits after the letter
          if (j + n >= s.size()) return false;
          const char* first = s.data() + j + 1;
          if (!std::all_of(first, first + n, [](char h) { return std::isxdigit(static_cast<unsigned char>(h)); })) return false;
          return std::from_chars(first, first + n, *cp, 16).ec == std::errc();
        };
        uint32_t cp = 0;
        switch (e) {
          case 'n': v += '\n'; break;
          case 't': v += '\t'; break;
          case 'r': v += '\r'; break;
          case 'a': v += '\a'; break;
          case 'b': v += '\b'; break;
          case 'f': v += '\f'; break;
          case 'v': v += '\v'; break;
          case '\\': v += '\\'; break;
          case '\'': v += '\''; break;
          case '"': v += '"'; break;
          case 'x':
          case 'u':
          case 'U': {
            const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            if (!hex_run(n, &cp) || cp > 0x10FFFF) {
              return err(fmt::format("a string's \\{} escape needs {} hex digits (at most U+10FFFF)", e, n));
            }
            AppendUtf8(cp, v);
            j += n;
            break;
          }
          default:
            if (e >= '0' && e <= '7') {  // octal: up to three digits
              cp = static_cast<uint32_t>(e - '0');
              for (int k = 0; k < 2 && j + 1 < s.size() && s[j + 1] >= '0' && s[j + 1] <= '7'; ++k) {
                cp = cp * 8 + static_cast<uint32_t>(s[++j] - '0');
              }
              AppendUtf8(cp, v);
            } else {
              v += '\\';
              v += e;
            }
        }
      }
      if (j >= s.size()) return err("unterminated string literal");
      out.push_back({Tok::Kind::kString, v});
      i = j + 1;
      continue;
    }
    static const char* kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "<", ">", "=", "(", ")",
                                 "[", "]", "{", "}", ",", ".", ":", "|", "~"};
    bool matched = false;
    for (const char* op : kOps) {
      const size_t n = std::char_traits<char>::length(op);
      if (s.compare(i, n, op) == 0) {
        out.push_back({Tok::Kind::kOp, op});
        i += n;
        matched = true;
        break;
      }
    }
    if (!matched) return err(fmt::format("unexpected character '{}'", c));
  }
  out.push_back({Tok::Kind::kEnd, ""});
  return out;
}

// ---------------------------------------------------------------- parser

class Parser {
 public:
  explicit Parser(std::vector<Chunk> chunks) : chunks_(std::move(chunks)) {}

  Result<std::unique_ptr<Template>> Run() {
    auto t = std::make_unique<Template>();
    std::string end_tag;
    GRAFT_RETURN_IF_ERROR(ParseBody(t->body, {}, &end_tag));
    if (!end_tag.empty()) return Err(fmt::format("unexpected '{}'", end_tag));
    return t;
  }

 private:
  Status Err(const std::string& m) const { return InvalidArgument(fmt::format("line {}: {}", line_, m)); }

  // Expression token cursor.
  const Tok& Peek(size_t k = 0) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
  bool IsOp(const char* op, size_t k = 0) const { return Peek(k).kind == Tok::Kind::kOp && Peek(k).text == op; }
  bool IsName(const char* n, size_t k = 0) const { return Peek(k).kind == Tok::Kind::kName && Peek(k).text == n; }
  bool AcceptOp(const char* op) { return IsOp(op) ? (++pos_, true) : false; }
  bool AcceptName(const char* n) { return IsName(n) ? (++pos_, true) : false; }
  // A token as an error names it: its text, or "end of tag".
  static std::string Shown(const Tok& t) { return t.text.empty() ? "end of tag" : t.text; }
  Status ExpectOp(const char* op) {
    if (AcceptOp(op)) return Status::Ok();
    return Err(fmt::format("expected '{}' but found '{}'", op, Shown(Peek())));
  }
  Result<std::string> ExpectName() {
    if (Peek().kind != Tok::Kind::kName) return Err(fmt::format("expected a name but found '{}'", Shown(Peek())));
    return toks_[pos_++].text;
  }
  ExprPtr Make(Expr::Kind k) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line_;
    return e;
  }

  // Nesting (parentheses, unary operators, blocks inside blocks) is bounded: the parser, the
  // tree's destructor and the interpreter all recurse a level at a time, and a hostile
  // template could otherwise overflow the stack.
  static constexpr int kMaxNesting = 200;
  struct Nest {
    int& depth;
    explicit Nest(int& d) : depth(++d) {}
    ~Nest() { --depth; }
  };
  Status CheckNesting() const {
    if (depth_ <= kMaxNesting) return Status::Ok();
    return Err(fmt::format("expressions and blocks nested deeper than {} levels", kMaxNesting));
  }

  // The depth of a whole expression tree, walked without recursion: chains the parser builds
  // in a loop (a + a + ..., x.a.a...) nest without nesting the parser.
  static int TreeDepth(const Expr& root) {
    int deepest = 0;
    std::vector<std::pair<const Expr*, int>> todo{{&root, 1}};
    while (!todo.empty()) {
      const auto [e, d] = todo.back();
      todo.pop_back();
      deepest = std::max(deepest, d);
      for (const Expr* k : {e->a.get(), e->b.get(), e->c.get()}) if (k) todo.push_back({k, d + 1});
      for (const auto& k : e->args) if (k) todo.push_back({k.get(), d + 1});
      for (const auto& kv : e->kwargs) if (kv.second) todo.push_back({kv.second.get(), d + 1});
    }
    return deepest;
  }

  Result<ExprPtr> ParseExpr() {
    const bool outermost = expr_depth_ == 0;
    const Nest nest(depth_), expr_nest(expr_depth_);
    GRAFT_RETURN_IF_ERROR(CheckNesting());
    GRAFT_ASSIGN_OR_RETURN(ExprPtr e, ParseCondExpr());
    if (outermost && TreeDepth(*e) > kMaxNesting) {
      return Err(fmt::format("an expression nested deeper than {} levels", kMaxNesting));
    }
    return e;
  }

  Result<ExprPtr> ParseCondExpr() {
    GRAFT_ASSIGN_OR_RETURN(ExprPtr e, ParseOr());
    if (!AcceptName("if")) return e;
    auto c = Make(Expr::Kind::kCond);
    GRAFT_ASSIGN_OR_RETURN(c->a, ParseOr());
    c->b = std::move(e);
    if (AcceptName("else")) {
      GRAFT_ASSIGN_OR_RETURN(c->c, ParseExpr());
    }
    return c;
  }
  Result<ExprPtr> Binary(const std::string& op, ExprPtr l, ExprPtr r) {
    auto e = Make(Expr::Kind::kBinary);
    e->name = op;
    e->a = std::move(l);
    e->b = std::move(r);
    return e;
  }
  Result<ExprPtr> ParseOr() {
    GRAFT_ASSIGN_OR_RETURN(ExprPtr l, ParseAnd());
    while (AcceptName("or")) {
      GRAFT_ASSIGN_OR_RETURN(ExprPtr r, ParseAnd());
      GRAFT_ASSIGN_OR_RETURN(l, Binary("or", std::move(l), std::move(r)));
    }
    return l;
  }
  Result<ExprPtr> ParseAnd() {
    GRAFT_ASSIGN_OR_RETURN(ExprPtr l, ParseNot());
    while (AcceptName("and")) {
      GRAFT_ASSIGN_OR_RETURN(ExprPtr r, ParseNot());
      GRAFT_ASSIGN_OR_RETURN(l, Binary("and", std::move(l), std::move(r)));
    }
    return l;
  }
  Result<ExprPtr> ParseNot() {
    if (IsName("not") && !IsName("in", 1)) {
      const Nest nest(depth_);
      GRAFT_RETURN_IF_ERROR(CheckNesting());
      ++pos_;
      auto e = Make(Expr::Kind::kUnary);
      e->name = "not";
      GRAFT_ASSIGN_OR_RETURN(e->a, ParseNot());
      return e;
    }
    return ParseCompare();
  }
  Result<ExprPtr> ParseCompare() {
    GRAFT_ASSIGN_OR_RETURN(ExprPtr l, ParseAdd());
    while (true) {
      std::string op;
      for (const char* o : {"==", "!=", "<=", ">=", "<", ">"}) {
        if (IsOp(o)) op = o;
      }
      if (!op.empty()) ++pos_;
      else if (AcceptName("in")) op = "in";
      else if (IsName("not") && IsName("in", 1)) pos_ += 2, op = "not in";
      else break;
      GRAFT_ASSIGN_OR_RETURN(ExprPtr r, ParseAdd());
      GRAFT_ASSIGN_OR_RETURN(l, Binary(op, std::move(l), std::move(r)));
    }
    return l;
  }
  Result<ExprPtr> ParseAdd() {
    GRAFT_ASSIGN_OR_RETURN(ExprPtr l, ParseConcat());
    while (IsOp("+") || IsOp("-")) {
      const std::string op = toks_[pos_++].text;
      GRAFT_ASSIGN_OR_RETURN(ExprPtr r, ParseConcat());
      GRAFT_ASSIGN_OR_RETURN(l, Binary(op, std::move(l), std::move(r)));
    }
    return l;
  }
  Result<ExprPtr> ParseConcat() {
    GRAFT_ASSIGN_OR_RETURN(ExprPtr l, ParseMul());
    while (AcceptOp("~")) {
      GRAFT_ASSIGN_OR_RETURN(ExprPtr r, ParseMul());
      GRAFT_ASSIGN_OR_RETURN(l, Binary("~", std::move(l), std::move(r)));
    }
    return l;
  }
  Result<ExprPtr> ParseMul() {
    GRAFT_ASSIGN_OR_RETURN(ExprPtr l, ParsePow());
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      const std::string op = toks_[pos_++].text;
      GRAFT_ASSIGN_OR_RETURN(ExprPtr r, ParsePow());
      GRAFT_ASSIGN_OR_RETURN(l, Binary(op, std::move(l), std::move(r)));
    }
    return l;
  }
  Result<ExprPtr> ParsePow() {
    GRAFT_ASSIGN_OR_RETURN(ExprPtr l, ParseUnary(true));
    while (AcceptOp("**")) {
      GRAFT_ASSIGN_OR_RETURN(ExprPtr r, ParseUnary(true));
      GRAFT_ASSIGN_OR_RETURN(l, Binary("**", std::move(l), std::move(r)));
    }
    return l;
  }
  Result<ExprPtr> ParseUnary(bool with_filter) {
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      const Nest nest(depth_);
      GRAFT_RETURN_IF_ERROR(CheckNesting());
      const std::string op = toks_[pos_++].text;
      node = Make(Expr::Kind::kUnary);
      node->name = op;
      GRAFT_ASSIGN_OR_RETURN(node->a, ParseUnary(false));
    } else {
      GRAFT_ASSIGN_OR_RETURN(node, ParsePrimary());
    }
    GRAFT_ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
    if (with_filter) return ParseFiltersAndTests(std::move(node));
    return node;
  }
  Status ParseArgs(Expr& e) {  // after '('
    while (!AcceptOp(")")) {
      if (Peek().kind == Tok::Kind::kName && IsOp("=", 1)) {
        std::string k = toks_[pos_].text;
        pos_ += 2;
        GRAFT_ASSIGN_OR_RETURN(ExprPtr v, ParseExpr());
        e.kwargs.emplace_back(k, std::move(v));
      } else {
        GRAFT_ASSIGN_OR_RETURN(ExprPtr v, ParseExpr());
        e.args.push_back(std::move(v));
      }
      if (!IsOp(")")) GRAFT_RETURN_IF_ERROR(ExpectOp(","));
    }
    return Status::Ok();
  }
  Result<ExprPtr> ParseFiltersAndTests(ExprPtr node) {
    while (true) {
      if (AcceptOp("|")) {
        auto f = Make(Expr::Kind::kFilter);
        GRAFT_ASSIGN_OR_RETURN(f->name, ExpectName());
        while (AcceptOp(".")) {
          GRAFT_ASSIGN_OR_RETURN(std::string part, ExpectName());
          f->name += "." + part;
        }
        f->a = std::move(node);
        if (AcceptOp("(")) GRAFT_RETURN_IF_ERROR(ParseArgs(*f));
        node = std::move(f);
      } else if (AcceptName("is")) {
        auto t = Make(Expr::Kind::kTest);
        t->negated = AcceptName("not");
        GRAFT_ASSIGN_OR_RETURN(t->name, ExpectName());
        t->a = std::move(node);
        if (AcceptOp("(")) {
          GRAFT_RETURN_IF_ERROR(ParseArgs(*t));
        } else if (StartsBareTestArgument()) {  // x is divisibleby 3, x is in ['a', 'b']
          GRAFT_ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
          GRAFT_ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
          t->args.push_back(std::move(arg));
        }
        node = std::move(t);
      } else {
        return node;
      }
    }
  }
  // Whether a test's one argument follows without parentheses, as Jinja's parser decides: a
  // name other than else / or / and, a literal, or an opening bracket or brace.
  bool StartsBareTestArgument() const {
    const Tok& t = Peek();
    if (t.kind == Tok::Kind::kName) return t.text != "else" && t.text != "or" && t.text != "and";
    return t.kind == Tok::Kind::kString || t.kind == Tok::Kind::kInt || t.kind == Tok::Kind::kFloat || IsOp("[") ||
           IsOp("{");
  }
  Result<ExprPtr> ParsePostfix(ExprPtr node) {
    while (true) {
      if (AcceptOp(".")) {
        auto e = Make(Expr::Kind::kAttr);
        if (Peek().kind == Tok::Kind::kInt) e->name = std::to_string(toks_[pos_++].i);
        else {
          GRAFT_ASSIGN_OR_RETURN(e->name, ExpectName());
        }
        e->a = std::move(node);
        node = std::move(e);
      } else if (AcceptOp("[")) {
        ExprPtr parts[3];
        bool slice = false;
        for (int k = 0; k < 3; ++k) {
          if (!IsOp(":") && !IsOp("]")) {
            GRAFT_ASSIGN_OR_RETURN(parts[k], ParseExpr());
          }
          if (k < 2 && AcceptOp(":")) {
            slice = true;
            continue;
          }
          break;
        }
        GRAFT_RETURN_IF_ERROR(ExpectOp("]"));
        auto e = Make(slice ? Expr::Kind::kSlice : Expr::Kind::kItem);
        e->a = std::move(node);
        if (slice) {
          e->b = std::move(parts[0]);
          e->c = std::move(parts[1]);
          if (parts[2]) e->args.push_back(std::move(parts[2]));
        } else {
          if (!parts[0]) return Err("empty subscript []");
          e->b = std::move(parts[0]);
        }
        node = std::move(e);
      } else if (AcceptOp("(")) {
        auto e = Make(Expr::Kind::kCall);
        e->a = std::move(node);
        GRAFT_RETURN_IF_ERROR(ParseArgs(*e));
        node = std::move(e);
      } else {
        return node;
      }
    }
  }
  Result<ExprPtr> ParsePrimary() {
    const Tok t = Peek();
    if (t.kind == Tok::Kind::kString) {
      std::string s;
      while (Peek().kind == Tok::Kind::kString) s += toks_[pos_++].text;  // adjacent literals join
      auto e = Make(Expr::Kind::kLiteral);
      e->literal = Value(s);
      return e;
    }
    if (t.kind == Tok::Kind::kInt || t.kind == Tok::Kind::kFloat) {
      ++pos_;
      auto e = Make(Expr::Kind::kLiteral);
      e->literal = t.kind == Tok::Kind::kInt ? Value(t.i) : Value(t.f);
      return e;
    }
    if (t.kind == Tok::Kind::kName) {
      ++pos_;
      auto e = Make(Expr::Kind::kLiteral);
      if (t.text == "true" || t.text == "True") e->literal = Value(true);
      else if (t.text == "false" || t.text == "False") e->literal = Value(false);
      else if (t.text == "none" || t.text == "None") e->literal = Value::None();
      else {
        e->kind = Expr::Kind::kName;
        e->name = t.text;
      }
      return e;
    }
    if (AcceptOp("(")) {
      if (AcceptOp(")")) {  // the empty tuple
        auto l = Make(Expr::Kind::kList);
        l->tuple = true;
        return l;
      }
      GRAFT_ASSIGN_OR_RETURN(ExprPtr e, ParseExpr());
      if (IsOp(",")) {  // a tuple: a list marked as one (value.h)
        GRAFT_ASSIGN_OR_RETURN(e, TupleAfter(std::move(e), [this] { return IsOp(")"); }));
      }
      GRAFT_RETURN_IF_ERROR(ExpectOp(")"));
      return e;
    }
    if (AcceptOp("[")) {
      auto l = Make(Expr::Kind::kList);
      while (!AcceptOp("]")) {
        GRAFT_ASSIGN_OR_RETURN(ExprPtr x, ParseExpr());
        l->args.push_back(std::move(x));
        if (!IsOp("]")) GRAFT_RETURN_IF_ERROR(ExpectOp(","));
      }
      return l;
    }
    if (AcceptOp("{")) {
      auto d = Make(Expr::Kind::kDict);
      while (!AcceptOp("}")) {
        GRAFT_ASSIGN_OR_RETURN(ExprPtr k, ParseExpr());
        GRAFT_RETURN_IF_ERROR(ExpectOp(":"));
        GRAFT_ASSIGN_OR_RETURN(ExprPtr v, ParseExpr());
        d->args.push_back(std::move(k));
        d->args.push_back(std::move(v));
        if (!IsOp("}")) GRAFT_RETURN_IF_ERROR(ExpectOp(","));
      }
      return d;
    }
    return Err(fmt::format("unexpected '{}' in an expression", Shown(t)));
  }

  Status StartTag(const Chunk& c) {
    line_ = c.line;
    GRAFT_ASSIGN_OR_RETURN(toks_, Lex(c.text, c.line));
    pos_ = 0;
    return Status::Ok();
  }
  Status EndTag() {
    if (Peek().kind != Tok::Kind::kEnd) return Err(fmt::format("unexpected '{}' at the end of a tag", Peek().text));
    return Status::Ok();
  }

  // A tuple literal from its first item, the current token a ',': the items up to where `ended`
  // says the tuple stops (a trailing comma allowed: (1,) / 1, 2,).
  template <typename Ended>
  Result<ExprPtr> TupleAfter(ExprPtr first, Ended ended) {
    auto l = Make(Expr::Kind::kList);
    l->tuple = true;
    l->args.push_back(std::move(first));
    while (AcceptOp(",")) {
      if (ended()) break;
      GRAFT_ASSIGN_OR_RETURN(ExprPtr x, ParseExpr());
      l->args.push_back(std::move(x));
    }
    return ExprPtr(std::move(l));
  }

  // Parses statements until a block tag whose keyword is in `ends`; its keyword goes to *end
  // (the tag's tokens stay current for the caller).
  Status ParseBody(Body& body, const std::vector<std::string>& ends, std::string* end) {
    const Nest nest(depth_);
    GRAFT_RETURN_IF_ERROR(CheckNesting());
    while (next_ < chunks_.size()) {
      const Chunk& c = chunks_[next_++];
      if (c.kind == Chunk::Kind::kText) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kText;
        s->text = c.text;
        body.push_back(std::move(s));
        continue;
      }
      GRAFT_RETURN_IF_ERROR(StartTag(c));
      if (c.kind == Chunk::Kind::kOutput) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kOutput;
        s->line = line_;
        GRAFT_ASSIGN_OR_RETURN(s->expr, ParseExpr());
        GRAFT_RETURN_IF_ERROR(EndTag());
        body.push_back(std::move(s));
        continue;
      }
      GRAFT_ASSIGN_OR_RETURN(std::string kw, ExpectName());
      for (const auto& e : ends) {
        if (kw == e) {
          *end = kw;
          return Status::Ok();
        }
      }
      GRAFT_ASSIGN_OR_RETURN(std::unique_ptr<Stmt> s, ParseStatement(kw));
      body.push_back(std::move(s));
    }
    if (!ends.empty()) return Err(fmt::format("missing '{{% {} %}}' before the end of the template", ends.back()));
    return Status::Ok();
  }

  Result<std::unique_ptr<Stmt>> ParseStatement(const std::string& kw) {
    auto s = std::make_unique<Stmt>();
    s->line = line_;
    if (kw == "if") {
      s->kind = Stmt::Kind::kIf;
      GRAFT_ASSIGN_OR_RETURN(ExprPtr cond, ParseExpr());
      GRAFT_RETURN_IF_ERROR(EndTag());
      while (true) {
        Body b;
        std::string end;
        GRAFT_RETURN_IF_ERROR(ParseBody(b, {"elif", "else", "endif"}, &end));
        s->branches.emplace_back(std::move(cond), std::move(b));
        if (end == "endif") break;
        if (end == "else") {
          GRAFT_RETURN_IF_ERROR(EndTag());
          Body eb;
          GRAFT_RETURN_IF_ERROR(ParseBody(eb, {"endif"}, &end));
          s->branches.emplace_back(nullptr, std::move(eb));
          break;
        }
        GRAFT_ASSIGN_OR_RETURN(cond, ParseExpr());  // elif
        GRAFT_RETURN_IF_ERROR(EndTag());
      }
      GRAFT_RETURN_IF_ERROR(EndTag());
      return s;
    }
    if (kw == "for") {
      s->kind = Stmt::Kind::kFor;
      do {
        GRAFT_ASSIGN_OR_RETURN(std::string t, ExpectName());
        s->targets.push_back(t);
      } while (AcceptOp(","));
      if (!AcceptName("in")) return Err("expected 'in' in a for loop");
      GRAFT_ASSIGN_OR_RETURN(s->expr, ParseOr());
      if (AcceptName("if")) {
        GRAFT_ASSIGN_OR_RETURN(s->filter, ParseOr());
      }
      if (AcceptName("recursive")) return Err("recursive for loops are not supported");
      GRAFT_RETURN_IF_ERROR(EndTag());
      std::string end;
      GRAFT_RETURN_IF_ERROR(ParseBody(s->body, {"else", "endfor"}, &end));
      if (end == "else") {
        GRAFT_RETURN_IF_ERROR(EndTag());
        GRAFT_RETURN_IF_ERROR(ParseBody(s->else_body, {"endfor"}, &end));
      }
      GRAFT_RETURN_IF_ERROR(EndTag());
      return s;
    }
    if (kw == "set") {
      GRAFT_ASSIGN_OR_RETURN(std::string first, ExpectName());
      if (AcceptOp(".")) {
        s->attr_of = first;
        GRAFT_ASSIGN_OR_RETURN(first, ExpectName());
      }
      s->targets.push_back(first);
      while (s->attr_of.empty() && AcceptOp(",")) {
        GRAFT_ASSIGN_OR_RETURN(std::string t, ExpectName());
        s->targets.push_back(t);
      }
      if (AcceptOp("=")) {
        s->kind = Stmt::Kind::kSet;
        GRAFT_ASSIGN_OR_RETURN(s->expr, ParseExpr());
        if (IsOp(",")) {  // a bare tuple: {% set a, b = 1, 2 %}
          GRAFT_ASSIGN_OR_RETURN(s->expr, TupleAfter(std::move(s->expr), [this] { return Peek().kind == Tok::Kind::kEnd; }));
        }
        GRAFT_RETURN_IF_ERROR(EndTag());
        return s;
      }
      if (s->targets.size() != 1 || !s->attr_of.empty()) return Err("expected '=' in a set tag");
      s->kind = Stmt::Kind::kSetBlock;
      GRAFT_RETURN_IF_ERROR(EndTag());
      std::string end;
      GRAFT_RETURN_IF_ERROR(ParseBody(s->body, {"endset"}, &end));
      GRAFT_RETURN_IF_ERROR(EndTag());
      return s;
    }
    if (kw == "macro") {
      s->kind = Stmt::Kind::kMacro;
      GRAFT_ASSIGN_OR_RETURN(s->name, ExpectName());
      GRAFT_RETURN_IF_ERROR(ExpectOp("("));
      while (!AcceptOp(")")) {
        GRAFT_ASSIGN_OR_RETURN(std::string p, ExpectName());
        ExprPtr def;
        if (AcceptOp("=")) {
          GRAFT_ASSIGN_OR_RETURN(def, ParseExpr());
        }
        s->params.emplace_back(p, std::move(def));
        if (!IsOp(")")) GRAFT_RETURN_IF_ERROR(ExpectOp(","));
      }
      GRAFT_RETURN_IF_ERROR(EndTag());
      std::string end;
      GRAFT_RETURN_IF_ERROR(ParseBody(s->body, {"endmacro"}, &end));
      GRAFT_RETURN_IF_ERROR(EndTag());
      return s;
    }
    if (kw == "break" || kw == "continue") {
      s->kind = kw == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
      GRAFT_RETURN_IF_ERROR(EndTag());
      return s;
    }
    if (kw == "generation") {  // transformers' extension: marks assistant text; renders its body
      s->kind = Stmt::Kind::kGeneration;
      GRAFT_RETURN_IF_ERROR(EndTag());
      std::string end;
      GRAFT_RETURN_IF_ERROR(ParseBody(s->body, {"endgeneration"}, &end));
      GRAFT_RETURN_IF_ERROR(EndTag());
      return s;
    }
    if (kw == "filter") {  // {% filter upper | indent(2) %}body{% endfilter %}: the body's text through them
      s->kind = Stmt::Kind::kFilterBlock;
      do {
        auto f = Make(Expr::Kind::kFilter);
        GRAFT_ASSIGN_OR_RETURN(f->name, ExpectName());
        if (AcceptOp("(")) GRAFT_RETURN_IF_ERROR(ParseArgs(*f));
        s->filters.push_back(std::move(f));
      } while (AcceptOp("|"));
      GRAFT_RETURN_IF_ERROR(EndTag());
      std::string end;
      GRAFT_RETURN_IF_ERROR(ParseBody(s->body, {"endfilter"}, &end));
      GRAFT_RETURN_IF_ERROR(EndTag());
      return s;
    }
    if (kw == "with") {  // {% with a = 1, b = x %}body{% endwith %}: names scoped to the body
      s->kind = Stmt::Kind::kWith;
      while (Peek().kind != Tok::Kind::kEnd) {
        GRAFT_ASSIGN_OR_RETURN(std::string name, ExpectName());
        GRAFT_RETURN_IF_ERROR(ExpectOp("="));
        GRAFT_ASSIGN_OR_RETURN(ExprPtr value, ParseExpr());
        s->params.emplace_back(name, std::move(value));
        if (!AcceptOp(",")) break;
      }
      GRAFT_RETURN_IF_ERROR(EndTag());
      std::string end;
      GRAFT_RETURN_IF_ERROR(ParseBody(s->body, {"endwith"}, &end));
      GRAFT_RETURN_IF_ERROR(EndTag());
      return s;
    }
    return Err(fmt::format("unsupported tag '{}'", kw));
  }

  std::vector<Chunk> chunks_;
  size_t next_ = 0;
  int depth_ = 0, expr_depth_ = 0;  // nesting now (Nest), and of expressions alone
  std::vector<Tok> toks_;
  size_t pos_ = 0;
  int line_ = 0;
};

}  // namespace

Result<std::unique_ptr<Template>> Parse(const std::string& source) {
  GRAFT_ASSIGN_OR_RETURN(std::vector<Chunk> chunks, SplitChunks(source));
  return Parser(std::move(chunks)).Run();
}

}  // namespace graft::jinja

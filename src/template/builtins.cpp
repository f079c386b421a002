#include "template/builtins.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <unordered_set>

#include "template/format.h"
#include "template/text_case.h"

namespace graft::jinja {
namespace {

Status Err(const std::string& m) { return InvalidArgument(m); }

// The widest a padding filter (center) makes a string.
constexpr int64_t kMaxFilterWidth = int64_t{1} << 20;

// By value: a default passed as a temporary (Value("")) must outlive the caller's use of it.
Value Arg(const List& args, const Dict& kwargs, size_t i, const char* name, const Value& def) {
  if (i < args.size()) return args[i];
  if (const Value* v = kwargs.Find(name)) return *v;
  return def;
}

bool IsPyWs(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

List SplitPy(const std::string& s, const Value& sep, int64_t maxsplit) {
  List out;
  if (sep.is_none() || sep.is_undefined()) {
    size_t i = 0;
    int64_t splits = 0;
    while (i < s.size()) {
      while (i < s.size() && IsPyWs(s[i])) ++i;
      if (i >= s.size()) break;
      if (maxsplit >= 0 && splits >= maxsplit) {
        size_t e = s.size();
        while (e > i && IsPyWs(s[e - 1])) --e;
        out.emplace_back(s.substr(i, e - i));
        break;
      }
      size_t j = i;
      while (j < s.size() && !IsPyWs(s[j])) ++j;
      out.emplace_back(s.substr(i, j - i));
      if (out.size() > kMaxListItems) return out;  // the caller refuses it
      ++splits;
      i = j;
    }
    return out;
  }
  const std::string& d = sep.as_string();
  size_t start = 0;
  int64_t splits = 0;
  while (true) {
    const size_t at = (maxsplit >= 0 && splits >= maxsplit) ? std::string::npos : s.find(d, start);
    if (at == std::string::npos) {
      out.emplace_back(s.substr(start));
      break;
    }
    out.emplace_back(s.substr(start, at - start));
    if (out.size() > kMaxListItems) return out;  // the caller refuses it
    start = at + d.size();
    ++splits;
  }
  return out;
}

// Where `from` (not empty) next occurs in s at or after `at`, npos if nowhere: a one-character
// pattern by a plain scan (a string doubled by replace in a loop makes millions of hits: no
// library call a hit), a longer one by find.
size_t NextHit(const std::string& s, const std::string& from, size_t at) {
  if (from.size() != 1) return s.find(from, at);
  for (const char c = from[0]; at < s.size(); ++at) {
    if (s[at] == c) return at;
  }
  return std::string::npos;
}

// n bytes from src at p, advancing p (short runs by a loop: most runs of a doubling are a byte).
void Put(char*& p, const char* src, size_t n) {
  if (n < 32) {
    for (size_t i = 0; i < n; ++i) *p++ = src[i];
  } else {
    std::memcpy(p, src, n);
    p += n;
  }
}

// Python's str.replace (what Jinja's filter and method call): the first `count` hits, all of them
// when count < 0; an empty `from` matches before every character and at the end. The hits are
// counted first, so that a result past kMaxTextBytes is refused before any of it is built (as
// soon as the hits counted pass it), and the result is written once into its final size.
Result<std::string> Replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  const size_t limit = count < 0 ? std::numeric_limits<size_t>::max() : static_cast<size_t>(count);
  const size_t grow = to.size() > from.size() ? to.size() - from.size() : 0;
  const auto refused = [] { return InvalidArgument(fmt::format("replace: the result passes {} bytes", kMaxTextBytes)); };
  size_t hits = 0;
  if (from.empty()) {
    hits = std::min(limit, s.size() + 1);
  } else {
    for (size_t at = NextHit(s, from, 0); at != std::string::npos && hits < limit; at = NextHit(s, from, at + from.size())) {
      ++hits;
      if (s.size() + hits * grow > kMaxTextBytes) return refused();
    }
  }
  const size_t size = s.size() - hits * from.size() + hits * to.size();
  if (size > kMaxTextBytes) return refused();
  std::string out(size, '\0');
  char* p = out.data();
  size_t at = 0;
  for (size_t n = 0; n < hits; ++n) {
    const size_t hit = from.empty() ? n : NextHit(s, from, at);
    Put(p, s.data() + at, hit - at);
    Put(p, to.data(), to.size());
    at = hit + from.size();
    if (from.empty() && at < s.size()) Put(p, s.data() + at++, 1);  // the character after an empty hit
  }
  Put(p, s.data() + at, s.size() - at);
  return out;
}

// items joined by sep, refused once longer than kMaxTextBytes.
Result<std::string> Join(const List& items, const std::string& sep, const char* what) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += sep;
    out += items[i].Str();
    if (out.size() > kMaxTextBytes) return InvalidArgument(fmt::format("{}: the result passes {} bytes", what, kMaxTextBytes));
  }
  return out;
}

// Python's str.ljust / rjust / center / zfill (`how`) to `width` characters with the one-character
// `fill` (zfill: zeros after a sign; center: the extra one on the left when the margin and width
// are odd); errors name `what`.
Result<std::string> Justify(const std::string& s, const Value& width, const std::string& fill, const std::string& how,
                            const std::string& what) {
  if (!width.is_int() || width.as_int() > kMaxFilterWidth) {
    return Err(fmt::format("{}: width must be an integer up to {}", what, kMaxFilterWidth));
  }
  if (CodePoints(fill) != 1) return Err(fmt::format("{}: the fill character must be exactly one character long", what));
  const int64_t margin = width.as_int() - static_cast<int64_t>(CodePoints(s));
  if (margin <= 0) return s;
  auto fills = [&](int64_t k) {
    std::string r;
    for (int64_t i = 0; i < k; ++i) r += fill;
    return r;
  };
  if (how == "ljust") return s + fills(margin);
  if (how == "rjust") return fills(margin) + s;
  if (how == "zfill") {
    const size_t sign = !s.empty() && (s[0] == '+' || s[0] == '-') ? 1 : 0;
    return s.substr(0, sign) + fills(margin) + s.substr(sign);
  }
  const int64_t left = margin / 2 + (margin & width.as_int() & 1);
  return fills(left) + s + fills(margin - left);
}

Result<int64_t> Length(const Value& v) {
  if (v.is_string()) return static_cast<int64_t>(CodePoints(v.as_string()));  // as Python's len()
  if (v.is_list()) return static_cast<int64_t>(v.as_list().size());
  if (v.is_dict()) return static_cast<int64_t>(v.as_dict().items.size());
  if (v.is_undefined()) return int64_t{0};
  return Err(fmt::format("length of a {} value", v.TypeName()));
}

// s without Python's surrounding whitespace and its single underscores between digits (an
// underscore anywhere else: nullopt), as int() and float() read them.
std::optional<std::string> PyNumberText(const std::string& s) {
  const std::string t = Strip(s, "", true, true);
  std::string out;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] != '_') {
      out += t[i];
      continue;
    }
    if (i == 0 || i + 1 == t.size() || !std::isalnum(static_cast<unsigned char>(t[i - 1])) ||
        !std::isalnum(static_cast<unsigned char>(t[i + 1]))) {
      return std::nullopt;
    }
  }
  return out;
}

// Python's int(s, base) for base 0 (the prefix decides) or 2..36; nullopt where Python raises
// (and past int64).
std::optional<int64_t> PyInt(const std::string& s, int base) {
  std::optional<std::string> t = PyNumberText(s);
  if (!t || t->empty()) return std::nullopt;
  size_t i = 0;
  const bool negative = (*t)[0] == '-';
  if ((*t)[0] == '+' || (*t)[0] == '-') ++i;
  const auto prefixed = [&](char p) { return t->size() > i + 1 && (*t)[i] == '0' && std::tolower((*t)[i + 1]) == p; };
  if ((base == 0 || base == 16) && prefixed('x')) base = 16, i += 2;
  else if ((base == 0 || base == 8) && prefixed('o')) base = 8, i += 2;
  else if ((base == 0 || base == 2) && prefixed('b')) base = 2, i += 2;
  else if (base == 0) {
    base = 10;
    if (t->size() > i + 1 && (*t)[i] == '0' && t->find_first_not_of('0', i) != std::string::npos) return std::nullopt;  // '010'
  }
  if (i >= t->size()) return std::nullopt;
  uint64_t mag = 0;
  for (; i < t->size(); ++i) {
    const char c = static_cast<char>(std::tolower(static_cast<unsigned char>((*t)[i])));
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'z' ? c - 'a' + 10 : 99;
    if (d >= base) return std::nullopt;
    if (mag > (std::numeric_limits<uint64_t>::max() - static_cast<uint64_t>(d)) / static_cast<uint64_t>(base)) return std::nullopt;
    mag = mag * static_cast<uint64_t>(base) + static_cast<uint64_t>(d);
  }
  if (mag > (negative ? uint64_t{1} << 63 : (uint64_t{1} << 63) - 1)) return std::nullopt;
  return negative ? static_cast<int64_t>(0 - mag) : static_cast<int64_t>(mag);
}

// Python's float(s): decimal and exponent forms, inf / infinity / nan in any case, signs,
// surrounding whitespace, underscores between digits; nullopt where Python raises.
std::optional<double> PyFloat(const std::string& s) {
  std::optional<std::string> t = PyNumberText(s);
  if (!t || t->empty()) return std::nullopt;
  std::string body = *t;
  double sign = 1.0;
  if (body[0] == '+' || body[0] == '-') {
    sign = body[0] == '-' ? -1.0 : 1.0;
    body = body.substr(1);
  }
  std::string lower = body;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "inf" || lower == "infinity") return sign * std::numeric_limits<double>::infinity();
  if (lower == "nan") return std::numeric_limits<double>::quiet_NaN();
  // digits [. digits] [e [+-] digits], at least one digit before the exponent
  size_t i = 0, digits = 0;
  while (i < body.size() && std::isdigit(static_cast<unsigned char>(body[i]))) ++i, ++digits;
  if (i < body.size() && body[i] == '.') {
    ++i;
    while (i < body.size() && std::isdigit(static_cast<unsigned char>(body[i]))) ++i, ++digits;
  }
  if (digits == 0) return std::nullopt;
  if (i < body.size() && (body[i] == 'e' || body[i] == 'E')) {
    ++i;
    if (i < body.size() && (body[i] == '+' || body[i] == '-')) ++i;
    const size_t e0 = i;
    while (i < body.size() && std::isdigit(static_cast<unsigned char>(body[i]))) ++i;
    if (i == e0) return std::nullopt;
  }
  if (i != body.size()) return std::nullopt;
  return sign * std::strtod(body.c_str(), nullptr);
}

List Items(const Value& v) {
  List out;
  for (const auto& [k, x] : v.as_dict().items) out.push_back(Value::Tuple(List{Value(k), x}));
  return out;
}

// Python's str.splitlines: lines end at \n, \r\n, \r, \v, \f, \x1c-\x1e and (UTF-8) U+0085,
// U+2028, U+2029; a last line without an end is a line, an empty string none. keep_ends keeps
// each line's end.
std::vector<std::string> SplitLines(const std::string& s, bool keep_ends) {
  std::vector<std::string> out;
  size_t start = 0, i = 0;
  while (i < s.size()) {
    size_t end_len = 0;
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\r') end_len = i + 1 < s.size() && s[i + 1] == '\n' ? 2 : 1;
    else if (c == '\n' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e)) end_len = 1;
    else if (c == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x85) end_len = 2;
    else if (c == 0xe2 && i + 2 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x80 &&
             (static_cast<unsigned char>(s[i + 2]) == 0xa8 || static_cast<unsigned char>(s[i + 2]) == 0xa9)) {
      end_len = 3;
    }
    if (end_len == 0) {
      ++i;
      continue;
    }
    out.push_back(s.substr(start, (keep_ends ? i + end_len : i) - start));
    i += end_len;
    start = i;
  }
  if (start < s.size()) out.push_back(s.substr(start));
  return out;
}

// Jinja's indent(width=4, first=False, blank=False): every line after the first (the first too
// with `first`) gets `width` spaces (or the string `width`), blank lines only with `blank`; a
// result past kMaxTextBytes is refused before it is built.
Result<std::string> Indent(const std::string& s, const Value& width, bool first, bool blank) {
  if (!width.is_string() && !(width.is_int() && width.as_int() >= 0 && width.as_int() <= 1024)) {
    return Err("filter 'indent': width must be a string or an integer in 0..1024");
  }
  const std::string pad = width.is_string() ? width.as_string() : std::string(static_cast<size_t>(width.as_int()), ' ');
  const std::vector<std::string> lines = SplitLines(s + "\n", false);  // Jinja's own quirk: a last newline is kept
  if (s.size() + lines.size() * (pad.size() + 1) > kMaxTextBytes) {
    return Err(fmt::format("filter 'indent': the result passes {} bytes", kMaxTextBytes));
  }
  std::string out = first ? pad : "";
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += '\n';
    if (i > 0 && (blank || !lines[i].empty())) out += pad;
    out += lines[i];
  }
  return out;
}

// The items a filter iterates, as Jinja does: a list's, a string's characters (at most
// kMaxListItems), a dict's keys; anything else is a named error for filter `what`.
Result<List> Iterated(const Value& v, const std::string& what) {
  if (v.is_list()) return v.as_list();
  List l;
  if (v.is_string()) {
    if (v.as_string().size() > kMaxListItems) {
      return Err(fmt::format("filter '{}': a string of more than {} characters", what, kMaxListItems));
    }
    for (char c : v.as_string()) l.emplace_back(std::string(1, c));
    return l;
  }
  if (v.is_dict()) {
    for (const auto& [k, x] : v.as_dict().items) l.emplace_back(k);
    return l;
  }
  return Err(fmt::format("filter '{}' of a {} value", what, v.TypeName()));
}

// An item's `attribute` as Jinja's attribute= arguments read it: a dict key, dotted for nested
// values ("function.name"), an integer part indexing a list, a groupby pair's grouper / list;
// Undefined where one is missing.
Value AttributeOf(const Value& item, const std::string& attribute) {
  Value cur = item;
  for (size_t start = 0;;) {
    const size_t dot = attribute.find('.', start);
    const std::string part = attribute.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool index = !part.empty() && part.size() < 10 && std::all_of(part.begin(), part.end(), [](char c) {
      return c >= '0' && c <= '9';
    });
    if (cur.is_dict()) {
      const Value* f = cur.as_dict().Find(part);
      cur = f != nullptr ? *f : Value();
    } else if (cur.is_list() && index && std::stoul(part) < cur.as_list().size()) {
      cur = cur.as_list()[std::stoul(part)];
    } else if (cur.is_group() && (part == "grouper" || part == "list")) {
      cur = cur.as_list()[part == "grouper" ? 0 : 1];
    } else {
      cur = Value();
    }
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

// What sort, min, max and unique compare an item by: its attribute if one is named, strings
// lower-cased unless case_sensitive (Jinja's default ignores case).
Value KeyOf(const Value& item, const Value& attribute, bool case_sensitive) {
  Value k = attribute.is_string() ? AttributeOf(item, attribute.as_string())
            : attribute.is_int()  ? AttributeOf(item, std::to_string(attribute.as_int()))
                                  : item;
  return k.is_string() && !case_sensitive ? Value(ChangeCase(k.as_string(), CaseMode::kLower)) : k;
}

// Python's order among the keys: numbers (and bools, as 0 and 1) by value, strings by bytes
// (UTF-8: code points); anything else, or a number against a string, cannot be ordered (Python's
// TypeError) — checked for the whole list first, so that the comparator is a strict order.
bool Orderable(const Value& k) { return k.is_number() || k.kind() == Value::Kind::kBool || k.is_string(); }
double NumberOf(const Value& k) { return k.kind() == Value::Kind::kBool ? (k.as_bool() ? 1.0 : 0.0) : k.as_double(); }
bool KeyLess(const Value& a, const Value& b) {
  return a.is_string() ? a.as_string() < b.as_string() : NumberOf(a) < NumberOf(b);
}
Status CheckOrderable(const List& keys, const std::string& what) {
  for (const Value& k : keys) {
    if (!Orderable(k) || k.is_string() != keys.front().is_string()) {
      return Err(fmt::format("filter '{}': cannot order {} and {} values", what, keys.front().TypeName(), k.TypeName()));
    }
  }
  return Status::Ok();
}

// The list's items in Python's sorted() order of their keys (stable; reverse keeps equal items
// in their order, as Python's does).
Result<List> Sorted(const List& items, const List& keys, bool reverse, const std::string& what) {
  GRAFT_RETURN_IF_ERROR(CheckOrderable(keys, what));
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return reverse ? KeyLess(keys[b], keys[a]) : KeyLess(keys[a], keys[b]); });
  List out;
  out.reserve(items.size());
  for (size_t i : order) out.push_back(items[i]);
  return out;
}

// A hashable key's identity for unique (Python: 1 == 1.0 == True); lists and dicts are not
// hashable (Python's TypeError).
Result<std::string> HashKey(const Value& k) {
  if (k.is_string()) return "s" + k.as_string();
  if (k.is_number() || k.kind() == Value::Kind::kBool) return fmt::format("n{}", NumberOf(k));
  if (k.is_none() || k.is_undefined()) return std::string("none");
  return Err(fmt::format("filter 'unique': a {} value cannot be compared for uniqueness", k.TypeName()));
}

// Python's round(x, digits) for a float (the exact binary value rounded to the nearest decimal,
// ties to even — what printf's %.*f does), and Jinja's ceil / floor methods.
Result<Value> Round(const Value& v, int64_t precision, const std::string& method) {
  if (!v.is_number() && v.kind() != Value::Kind::kBool) return Err(fmt::format("filter 'round' of a {} value", v.TypeName()));
  if (precision < -308 || precision > 308) return Err("filter 'round': precision must be in -308..308");
  if (method != "common" && method != "ceil" && method != "floor") {
    return Err("filter 'round': method must be 'common', 'ceil' or 'floor'");
  }
  const double x = NumberOf(v), scale = std::pow(10.0, static_cast<double>(precision));
  if (method != "common") return Value((method == "ceil" ? std::ceil(x * scale) : std::floor(x * scale)) / scale);
  if (v.is_int() && precision >= 0) return v;  // Python: round(int, n >= 0) is the int
  double r;
  if (precision >= 0) {
    r = std::strtod(fmt::format("{:.{}f}", x, precision).c_str(), nullptr);
  } else {
    const double q = x / std::pow(10.0, static_cast<double>(-precision));
    r = std::nearbyint(q) * std::pow(10.0, static_cast<double>(-precision));  // ties to even
  }
  if (v.is_int() && FitsInt64(r)) return Value(static_cast<int64_t>(r));
  return Value(r);
}

}  // namespace

std::string Strip(const std::string& s, const std::string& chars, bool left, bool right) {
  auto strip_char = [&](char c) { return chars.empty() ? IsPyWs(c) : chars.find(c) != std::string::npos; };
  size_t b = 0, e = s.size();
  if (left) while (b < e && strip_char(s[b])) ++b;
  if (right) while (e > b && strip_char(s[e - 1])) --e;
  return s.substr(b, e - b);
}

Result<Value> ApplyFilter(const std::string& name, const Value& v, const List& args, const Dict& kwargs) {
  const Value none = Value::None();
  if (name == "length" || name == "count") {
    GRAFT_ASSIGN_OR_RETURN(int64_t n, Length(v));
    return Value(n);
  }
  if (name == "tojson") {
    // transformers' filter: json.dumps(x, ensure_ascii=False, indent=None, separators=None,
    // sort_keys=False), its arguments in that order.
    JsonStyle style;
    style.ensure_ascii = Arg(args, kwargs, 0, "ensure_ascii", Value(false)).Truthy();
    const Value indent = Arg(args, kwargs, 1, "indent", none);
    // An integer, and a sane one: a template's indent of 10^9 would ask for gigabytes a line.
    if (!indent.is_none() && !indent.is_undefined() && (!indent.is_int() || indent.as_int() < 0 || indent.as_int() > 64)) {
      return Err(fmt::format("filter 'tojson': indent must be an integer in 0..64, not {}", indent.Str()));
    }
    style.indent = indent.is_int() ? static_cast<int>(indent.as_int()) : -1;
    const Value separators = Arg(args, kwargs, 2, "separators", none);
    if (!separators.is_none() && !separators.is_undefined()) {
      if (!separators.is_list() || separators.as_list().size() != 2 || !separators.as_list()[0].is_string() ||
          !separators.as_list()[1].is_string() || separators.as_list()[0].as_string().size() > 64 ||
          separators.as_list()[1].as_string().size() > 64) {
        return Err("filter 'tojson': separators must be two strings (item, key) of up to 64 bytes");
      }
      style.separators = true;
      style.item_sep = separators.as_list()[0].as_string();
      style.key_sep = separators.as_list()[1].as_string();
    }
    style.sort_keys = Arg(args, kwargs, 3, "sort_keys", Value(false)).Truthy();
    GRAFT_ASSIGN_OR_RETURN(std::string s, v.ToJson(style));
    return Value(s);
  }
  if (name == "string") return Value(v.Str());
  if (name == "safe") return v;
  if (name == "trim") {
    const Value& chars = Arg(args, kwargs, 0, "chars", none);
    return Value(Strip(v.Str(), chars.is_string() ? chars.as_string() : "", true, true));
  }
  if (name == "upper") return Value(ChangeCase(v.Str(), CaseMode::kUpper));
  if (name == "lower") return Value(ChangeCase(v.Str(), CaseMode::kLower));
  if (name == "capitalize") return Value(ChangeCase(v.Str(), CaseMode::kCapitalize));
  if (name == "title") return Value(ChangeCase(v.Str(), CaseMode::kJinjaTitle));  // Jinja's own, not str.title
  if (name == "items") {
    if (!v.is_dict()) return Err(fmt::format("filter 'items' needs a dict, not a {}", v.TypeName()));
    return Value(Items(v));
  }
  if (name == "default" || name == "d") {
    const Value& def = Arg(args, kwargs, 0, "default_value", Value(""));
    const bool boolean = Arg(args, kwargs, 1, "boolean", Value(false)).Truthy();
    return (v.is_undefined() || (boolean && !v.Truthy())) ? def : v;
  }
  if (name == "join") {
    const Value& sep = Arg(args, kwargs, 0, "d", Value(""));
    if (!v.is_list()) return Err(fmt::format("filter 'join' needs a list, not a {}", v.TypeName()));
    GRAFT_ASSIGN_OR_RETURN(std::string s, Join(v.as_list(), sep.Str(), "filter 'join'"));
    return Value(std::move(s));
  }
  if (name == "first" || name == "last") {
    if (v.is_list()) {
      if (v.as_list().empty()) return Value();
      return name == "first" ? v.as_list().front() : v.as_list().back();
    }
    if (v.is_string() && !v.as_string().empty()) return Value(std::string(1, name == "first" ? v.as_string().front() : v.as_string().back()));
    return Value();
  }
  if (name == "list") {
    GRAFT_ASSIGN_OR_RETURN(List l, Iterated(v, name));
    return Value(std::move(l));
  }
  if (name == "reverse") {
    if (v.is_string()) return Value(std::string(v.as_string().rbegin(), v.as_string().rend()));
    if (v.is_list()) return Value(List(v.as_list().rbegin(), v.as_list().rend()));
    return Err(fmt::format("filter 'reverse' of a {} value", v.TypeName()));
  }
  if (name == "replace") {
    if (args.size() < 2) return Err("filter 'replace' needs two arguments");
    if (args.size() > 2 && args[2].is_number() && !args[2].is_int()) return Err("filter 'replace': count must be an integer");
    const int64_t count = args.size() > 2 && args[2].is_int() ? args[2].as_int() : -1;
    GRAFT_ASSIGN_OR_RETURN(std::string r, Replace(v.Str(), args[0].Str(), args[1].Str(), count));
    return Value(std::move(r));
  }
  if (name == "int") {
    // Jinja's int(default=0, base=10): a number truncated toward zero, a bool as 0 / 1, a string
    // as Python's int(s, base) or else int(float(s)), anything else (or a failure) the default.
    const Value def = Arg(args, kwargs, 0, "default", Value(int64_t{0}));
    const Value base = Arg(args, kwargs, 1, "base", Value(int64_t{10}));
    if (v.kind() == Value::Kind::kInt) return v;
    if (v.kind() == Value::Kind::kBool) return Value(int64_t{v.as_bool() ? 1 : 0});
    if (v.is_number()) {  // truncated toward zero; a float int64 cannot hold is an error, not a wrapped value
      const double d = std::trunc(v.as_double());
      if (!FitsInt64(d)) return Err(fmt::format("int(): {} is out of range", v.Str()));
      return Value(static_cast<int64_t>(d));
    }
    if (v.is_string()) {
      if (!base.is_int() || (base.as_int() != 0 && (base.as_int() < 2 || base.as_int() > 36))) {
        return Err("filter 'int': base must be 0 or 2..36");
      }
      if (std::optional<int64_t> i = PyInt(v.as_string(), static_cast<int>(base.as_int()))) return Value(*i);
      if (std::optional<double> d = PyFloat(v.as_string()); d && std::isfinite(*d) && FitsInt64(std::trunc(*d))) {
        return Value(static_cast<int64_t>(std::trunc(*d)));
      }
    }
    return def;
  }
  if (name == "float") {
    // Jinja's float(default=0.0): Python's float() of a number, bool or string, else the default.
    const Value def = Arg(args, kwargs, 0, "default", Value(0.0));
    if (v.kind() == Value::Kind::kBool) return Value(v.as_bool() ? 1.0 : 0.0);
    if (v.is_number()) return Value(v.as_double());
    if (v.is_string()) {
      if (std::optional<double> d = PyFloat(v.as_string())) return Value(*d);
    }
    return def;
  }

  if (name == "abs") {
    if (v.kind() == Value::Kind::kInt) return Value(static_cast<int64_t>(std::llabs(v.as_int())));
    if (v.is_number()) return Value(std::fabs(v.as_double()));
    return Err("filter 'abs' needs a number");
  }
  if (name == "selectattr" || name == "rejectattr" || name == "select" || name == "reject") {
    // selectattr('attr'[, 'test', args...]) tests each item's (dotted) attribute, select(['test',
    // args...]) the item itself; without a test, its truth.
    const bool attr = name == "selectattr" || name == "rejectattr";
    if (!v.is_list() || (attr && args.empty())) {
      return Err(fmt::format("filter '{}' needs a list{}", name, attr ? " and an attribute" : ""));
    }
    const size_t test_at = attr ? 1 : 0;
    List out;
    for (const auto& item : v.as_list()) {
      const Value x = attr ? AttributeOf(item, args[0].Str()) : item;
      bool ok;
      if (args.size() > test_at) {
        GRAFT_ASSIGN_OR_RETURN(ok, ApplyTest(args[test_at].Str(), x, List(args.begin() + test_at + 1, args.end())));
      } else {
        ok = x.Truthy();
      }
      if (ok == (name == "selectattr" || name == "select")) out.push_back(item);
    }
    return Value(out);
  }
  if (name == "map") {
    // map(attribute='name') reads each item's attribute; map('filter', args...) applies a filter.
    if (!v.is_list()) return Err(fmt::format("filter 'map' of a {} value", v.TypeName()));
    const Value* attribute = kwargs.Find("attribute");
    if (attribute == nullptr && (args.empty() || !args[0].is_string())) {
      return Err("filter 'map' needs attribute='name' or a filter's name");
    }
    if (attribute == nullptr && args[0].as_string() == "map") return Err("filter 'map': map(map) is not supported");
    const List rest(args.begin() + (attribute == nullptr ? 1 : 0), args.end());
    const Value* def = kwargs.Find("default");
    List out;
    for (const auto& item : v.as_list()) {
      if (attribute != nullptr) {
        Value a = AttributeOf(item, attribute->Str());
        out.push_back(a.is_undefined() && def != nullptr ? *def : a);
        continue;
      }
      GRAFT_ASSIGN_OR_RETURN(Value r, ApplyFilter(args[0].as_string(), item, rest, kwargs));
      out.push_back(std::move(r));
    }
    return Value(out);
  }
  if (name == "sort" || name == "unique" || name == "min" || name == "max") {
    // sort(reverse=false, case_sensitive=false, attribute=none); the others (case_sensitive,
    // attribute). Strings and lists (dicts: their keys) as Jinja iterates them.
    GRAFT_ASSIGN_OR_RETURN(const List items, Iterated(v, name));
    const size_t at = name == "sort" ? 1 : 0;
    const bool reverse = name == "sort" && Arg(args, kwargs, 0, "reverse", Value(false)).Truthy();
    const bool case_sensitive = Arg(args, kwargs, at, "case_sensitive", Value(false)).Truthy();
    const Value attribute = Arg(args, kwargs, at + 1, "attribute", none);
    List keys;
    keys.reserve(items.size());
    for (const auto& item : items) keys.push_back(KeyOf(item, attribute, case_sensitive));
    if (name == "unique") {
      std::unordered_set<std::string> seen;
      List out;
      for (size_t i = 0; i < items.size(); ++i) {
        GRAFT_ASSIGN_OR_RETURN(std::string h, HashKey(keys[i]));
        if (seen.insert(std::move(h)).second) out.push_back(items[i]);
      }
      return Value(out);
    }
    if (name == "sort") {
      GRAFT_ASSIGN_OR_RETURN(List sorted, Sorted(items, keys, reverse, name));
      return Value(std::move(sorted));
    }
    if (items.empty()) return Value();  // Jinja: undefined for an empty sequence
    GRAFT_RETURN_IF_ERROR(CheckOrderable(keys, name));
    // min: the first of the smallest; max: the first of the largest (as Python's).
    size_t best = 0;
    for (size_t i = 1; i < items.size(); ++i) {
      if (name == "min" ? KeyLess(keys[i], keys[best]) : KeyLess(keys[best], keys[i])) best = i;
    }
    return items[best];
  }
  if (name == "escape" || name == "e") {
    // markupsafe's escape: & < > " ' as entities.
    std::string out;
    for (char c : v.Str()) {
      switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&#34;"; break;
        case '\'': out += "&#39;"; break;
        default: out += c;
      }
      if (out.size() > kMaxTextBytes) return Err(fmt::format("filter 'escape': the result passes {} bytes", kMaxTextBytes));
    }
    return Value(std::move(out));
  }
  if (name == "center") {
    GRAFT_ASSIGN_OR_RETURN(std::string out, Justify(v.Str(), Arg(args, kwargs, 0, "width", Value(int64_t{80})), " ", name,
                                                    "filter 'center'"));
    return Value(std::move(out));
  }
  if (name == "wordcount") {
    // Jinja: the runs of word characters (\w: letters, digits, underscore; any non-ASCII byte here).
    int64_t n = 0;
    bool in = false;
    for (unsigned char c : v.Str()) {
      const bool w = std::isalnum(c) || c == '_' || c >= 0x80;
      n += w && !in;
      in = w;
    }
    return Value(n);
  }
  if (name == "batch" || name == "slice") {
    // batch(size, fill_with=none): lists of `size` items, the last filled up to size when
    // fill_with is given. slice(count, fill_with=none): `count` columns of consecutive items, the
    // first len % count one longer, the others filled by one when fill_with is given (Jinja's).
    if (!v.is_list() && !v.is_string()) return Err(fmt::format("filter '{}' of a {} value", name, v.TypeName()));
    List seq;
    if (v.is_list()) seq = v.as_list();
    else for (unsigned char c : v.as_string()) seq.emplace_back(std::string(1, static_cast<char>(c)));
    const Value count = Arg(args, kwargs, 0, name == "batch" ? "linecount" : "slices", none);
    const Value fill = Arg(args, kwargs, 1, "fill_with", none);
    if (!count.is_int() || count.as_int() < 1 || count.as_int() > static_cast<int64_t>(kMaxListItems)) {
      return Err(fmt::format("filter '{}': the count must be an integer from 1", name));
    }
    const size_t k = static_cast<size_t>(count.as_int());
    List out;
    if (name == "batch") {
      for (size_t i = 0; i < seq.size(); i += k) {
        List part(seq.begin() + static_cast<std::ptrdiff_t>(i), seq.begin() + static_cast<std::ptrdiff_t>(std::min(seq.size(), i + k)));
        while (!fill.is_none() && !fill.is_undefined() && part.size() < k) part.push_back(fill);
        out.push_back(Value(std::move(part)));
      }
    } else {
      const size_t per = seq.size() / k, extra = seq.size() % k;
      size_t at = 0;
      for (size_t i = 0; i < k; ++i) {
        const size_t len = per + (i < extra ? 1 : 0);
        List part(seq.begin() + static_cast<std::ptrdiff_t>(at), seq.begin() + static_cast<std::ptrdiff_t>(at + len));
        at += len;
        if (!fill.is_none() && !fill.is_undefined() && i >= extra) part.push_back(fill);
        out.push_back(Value(std::move(part)));
      }
    }
    return Value(std::move(out));
  }
  if (name == "groupby") {
    // groupby(attribute, default=none, case_sensitive=false): the items sorted by the attribute
    // (strings compared lower-cased unless case_sensitive; a missing one is `default`), runs of
    // equal keys as (grouper, list) pairs, the grouper the run's first item's own value (Jinja's).
    if (!v.is_list()) return Err(fmt::format("filter 'groupby' of a {} value", v.TypeName()));
    const Value attribute = Arg(args, kwargs, 0, "attribute", none);
    if (!attribute.is_string() && !attribute.is_int()) return Err("filter 'groupby' needs an attribute (a name or an index)");
    const Value def = Arg(args, kwargs, 1, "default", none);
    const bool case_sensitive = Arg(args, kwargs, 2, "case_sensitive", Value(false)).Truthy();
    auto raw = [&](const Value& item) {
      Value k = KeyOf(item, attribute, true);
      return k.is_undefined() ? def : k;
    };
    auto key = [&](const Value& item) {
      Value k = raw(item);
      return k.is_string() && !case_sensitive ? Value(ChangeCase(k.as_string(), CaseMode::kLower)) : k;
    };
    // Sort the positions by key, so that each item's key is computed once.
    List keys, positions;
    for (size_t i = 0; i < v.as_list().size(); ++i) {
      keys.push_back(key(v.as_list()[i]));
      positions.push_back(Value(static_cast<int64_t>(i)));
    }
    GRAFT_ASSIGN_OR_RETURN(List order, Sorted(positions, keys, false, name));
    List out;
    for (size_t i = 0; i < order.size();) {
      const size_t first = static_cast<size_t>(order[i].as_int());
      List run;
      size_t j = i;
      for (; j < order.size() && Equal(keys[static_cast<size_t>(order[j].as_int())], keys[first]); ++j) {
        run.push_back(v.as_list()[static_cast<size_t>(order[j].as_int())]);
      }
      out.push_back(Value::Group(raw(v.as_list()[first]), std::move(run)));
      i = j;
    }
    return Value(std::move(out));
  }
  if (name == "truncate") {
    // truncate(length=255, killwords=false, end='...', leeway=5): text within length + leeway
    // code points as it is; else cut to length - len(end) code points — back to the last space
    // unless killwords — and end appended (Jinja's).
    const Value length = Arg(args, kwargs, 0, "length", Value(int64_t{255}));
    const bool killwords = Arg(args, kwargs, 1, "killwords", Value(false)).Truthy();
    const std::string end = Arg(args, kwargs, 2, "end", Value("...")).Str();
    const Value leeway = Arg(args, kwargs, 3, "leeway", Value(int64_t{5}));
    const std::string s = v.Str();
    const int64_t end_n = static_cast<int64_t>(CodePoints(end));
    if (!length.is_int() || !leeway.is_int() || leeway.as_int() < 0 || length.as_int() < end_n) {
      return Err("filter 'truncate': length must be an integer at least as long as end, leeway an integer >= 0");
    }
    if (static_cast<int64_t>(CodePoints(s)) <= length.as_int() + leeway.as_int()) return Value(s);
    std::string head = s.substr(0, CodePointBytes(s, static_cast<size_t>(length.as_int() - end_n)));
    if (!killwords) {
      const size_t space = head.rfind(' ');
      if (space != std::string::npos) head = head.substr(0, space);
    }
    return Value(head + end);
  }
  if (name == "format") {
    // Jinja's format filter: value % args (a tuple), or % kwargs (a mapping) — not both.
    if (!args.empty() && !kwargs.items.empty()) return Err("filter 'format': positional and keyword arguments at once");
    GRAFT_ASSIGN_OR_RETURN(std::string text, PercentFormat(v.Str(), kwargs.items.empty() ? Value::Tuple(args) : Value(kwargs)));
    return Value(std::move(text));
  }
  if (name == "dictsort") {
    // dictsort(case_sensitive=false, by='key', reverse=false): the (key, value) pairs in order.
    if (!v.is_dict()) return Err(fmt::format("filter 'dictsort' of a {} value", v.TypeName()));
    const bool case_sensitive = Arg(args, kwargs, 0, "case_sensitive", Value(false)).Truthy();
    const std::string by = Arg(args, kwargs, 1, "by", Value("key")).Str();
    if (by != "key" && by != "value") return Err("filter 'dictsort': by must be 'key' or 'value'");
    const bool reverse = Arg(args, kwargs, 2, "reverse", Value(false)).Truthy();
    List pairs = Items(v), keys;
    for (const auto& p : pairs) keys.push_back(KeyOf(p.as_list()[by == "key" ? 0 : 1], none, case_sensitive));
    GRAFT_ASSIGN_OR_RETURN(List sorted, Sorted(pairs, keys, reverse, name));
    return Value(sorted);
  }
  if (name == "sum") {
    // sum(attribute=none, start=0): ints stay ints while they fit, as Python's do.
    if (!v.is_list()) return Err(fmt::format("filter 'sum' of a {} value", v.TypeName()));
    const Value attribute = Arg(args, kwargs, 0, "attribute", none);
    const Value start = Arg(args, kwargs, 1, "start", Value(int64_t{0}));
    Value total = start;
    for (const auto& item : v.as_list()) {
      const Value x = attribute.is_undefined() || attribute.is_none() ? item : KeyOf(item, attribute, true);
      if ((!x.is_number() && x.kind() != Value::Kind::kBool) || (!total.is_number() && total.kind() != Value::Kind::kBool)) {
        return Err(fmt::format("filter 'sum': cannot add {} and {} values", total.TypeName(), x.TypeName()));
      }
      const auto int_of = [](const Value& n) { return n.is_int() ? n.as_int() : int64_t{n.as_bool() ? 1 : 0}; };
      const bool ints = total.kind() != Value::Kind::kFloat && x.kind() != Value::Kind::kFloat;
      int64_t r = 0;
      total = ints && !__builtin_add_overflow(int_of(total), int_of(x), &r) ? Value(r) : Value(NumberOf(total) + NumberOf(x));
    }
    return total;
  }
  if (name == "indent") {
    GRAFT_ASSIGN_OR_RETURN(std::string r, Indent(v.Str(), Arg(args, kwargs, 0, "width", Value(int64_t{4})),
                                                 Arg(args, kwargs, 1, "first", Value(false)).Truthy(),
                                                 Arg(args, kwargs, 2, "blank", Value(false)).Truthy()));
    return Value(std::move(r));
  }
  if (name == "round") {
    const Value precision = Arg(args, kwargs, 0, "precision", Value(int64_t{0}));
    if (!precision.is_int()) return Err("filter 'round': precision must be an integer");
    return Round(v, precision.as_int(), Arg(args, kwargs, 1, "method", Value("common")).Str());
  }
  return Err(fmt::format("unsupported filter '{}'", name));
}

Result<bool> ApplyTest(const std::string& name, const Value& v, const List& args) {
  using K = Value::Kind;
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind() == K::kInt;
  if (name == "float") return v.kind() == K::kFloat;
  if (name == "boolean") return v.kind() == K::kBool;
  if (name == "true") return v.kind() == K::kBool && v.as_bool();
  if (name == "false") return v.kind() == K::kBool && !v.as_bool();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_list() || v.is_dict() || v.is_string();
  if (name == "sequence") return v.is_list() || v.is_dict() || v.is_string();
  if (name == "callable") return v.kind() == K::kCallable;
  if (name == "even" || name == "odd") {
    if (v.kind() != K::kInt) return Err(fmt::format("test '{}' needs an integer", name));
    return (v.as_int() % 2 == 0) == (name == "even");
  }
  if (name == "equalto" || name == "eq" || name == "sameas" || name == "==") {
    if (args.empty()) return Err(fmt::format("test '{}' needs an argument", name));
    return Equal(v, args[0]);
  }
  if (name == "ne" || name == "!=") {
    return args.empty() ? Result<bool>(Err(fmt::format("test '{}' needs an argument", name))) : Result<bool>(!Equal(v, args[0]));
  }
  if (name == "lt" || name == "le" || name == "gt" || name == "ge" || name == "<" || name == "<=" || name == ">" ||
      name == ">=") {
    // Python's order: numbers with numbers, strings with strings.
    if (args.empty()) return Err(fmt::format("test '{}' needs an argument", name));
    const Value& b = args[0];
    if (!Orderable(v) || !Orderable(b) || v.is_string() != b.is_string()) {
      return Err(fmt::format("test '{}': cannot compare {} and {}", name, v.TypeName(), b.TypeName()));
    }
    const bool less = KeyLess(v, b), greater = KeyLess(b, v);
    if (name == "lt" || name == "<") return less;
    if (name == "le" || name == "<=") return !greater;
    if (name == "gt" || name == ">") return greater;
    return !less;
  }
  if (name == "divisibleby") {
    if (args.empty() || !v.is_int() || !args[0].is_int()) return Err("test 'divisibleby' needs two integers");
    if (args[0].as_int() == 0) return Err("test 'divisibleby': division by zero");
    return args[0].as_int() == -1 || v.as_int() % args[0].as_int() == 0;
  }
  if (name == "lower") return Classify(v.Str(), "islower");  // Jinja: str(value).islower()
  if (name == "upper") return Classify(v.Str(), "isupper");
  if (name == "in") {
    if (args.empty()) return Err("test 'in' needs an argument");
    const Value& c = args[0];
    if (c.is_string()) return v.is_string() && c.as_string().find(v.as_string()) != std::string::npos;
    if (c.is_list()) return std::any_of(c.as_list().begin(), c.as_list().end(), [&](const Value& x) { return Equal(x, v); });
    if (c.is_dict()) return v.is_string() && c.as_dict().Find(v.as_string()) != nullptr;
    return false;
  }
  return Err(fmt::format("unsupported test '{}'", name));
}

Result<Value> CallMethod(const Value& obj, const std::string& name, const List& args, const Dict& kwargs, bool* found) {
  *found = true;
  const Value none = Value::None();
  if (obj.is_string()) {
    const std::string& s = obj.as_string();
    if (name == "startswith" || name == "endswith") {
      const Value& p = Arg(args, kwargs, 0, "prefix", none);
      List cands = p.is_list() ? p.as_list() : List{p};
      for (const auto& c : cands) {
        if (!c.is_string()) return Err(fmt::format("{}() needs a string", name));
        const std::string& x = c.as_string();
        if (name == "startswith" ? s.rfind(x, 0) == 0 : (s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0)) {
          return Value(true);
        }
      }
      return Value(false);
    }
    if (name == "split") {
      const Value& sep = Arg(args, kwargs, 0, "sep", none);
      if (sep.is_string() && sep.as_string().empty()) return Err("split(): empty separator");
      const Value& maxsplit = Arg(args, kwargs, 1, "maxsplit", Value(int64_t{-1}));
      if (maxsplit.is_number() && !maxsplit.is_int()) return Err("split(): maxsplit must be an integer");
      List parts = SplitPy(s, sep, maxsplit.is_int() ? maxsplit.as_int() : -1);
      if (parts.size() > kMaxListItems) return Err(fmt::format("split(): more than {} parts", kMaxListItems));
      return Value(std::move(parts));
    }
    if (name == "splitlines") {
      std::vector<std::string> lines = SplitLines(s, Arg(args, kwargs, 0, "keepends", Value(false)).Truthy());
      if (lines.size() > kMaxListItems) return Err(fmt::format("splitlines(): more than {} lines", kMaxListItems));
      return Value(List(std::make_move_iterator(lines.begin()), std::make_move_iterator(lines.end())));
    }
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      const Value& chars = Arg(args, kwargs, 0, "chars", none);
      return Value(Strip(s, chars.is_string() ? chars.as_string() : "", name != "rstrip", name != "lstrip"));
    }
    if (name == "upper") return Value(ChangeCase(s, CaseMode::kUpper));
    if (name == "lower") return Value(ChangeCase(s, CaseMode::kLower));
    if (name == "title") return Value(ChangeCase(s, CaseMode::kPyTitle));
    if (name == "capitalize") return Value(ChangeCase(s, CaseMode::kCapitalize));
    if (Classifies(name)) return Value(Classify(s, name));
    if (name == "replace") {
      if (args.size() < 2) return Err("replace() needs two arguments");
      if (args.size() > 2 && args[2].is_number() && !args[2].is_int()) return Err("replace(): count must be an integer");
      GRAFT_ASSIGN_OR_RETURN(std::string r,
                             Replace(s, args[0].Str(), args[1].Str(), args.size() > 2 && args[2].is_int() ? args[2].as_int() : -1));
      return Value(std::move(r));
    }
    if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
      // Python's positions count characters (code points), not bytes.
      const std::string sub = Arg(args, kwargs, 0, "sub", Value("")).Str();
      const size_t at = name == "find" || name == "index" ? s.find(sub) : s.rfind(sub);
      if (at == std::string::npos) {
        if (name == "index" || name == "rindex") return Err(fmt::format("{}(): substring not found", name));
        return Value(int64_t{-1});
      }
      return Value(static_cast<int64_t>(CodePoints(std::string_view(s).substr(0, at))));
    }
    if (name == "partition" || name == "rpartition") {
      // (head, sep, tail) around the first (last) sep; not found: (s, '', '') / ('', '', s).
      const std::string sep = Arg(args, kwargs, 0, "sep", Value("")).Str();
      if (sep.empty()) return Err(fmt::format("{}(): empty separator", name));
      const size_t at = name == "partition" ? s.find(sep) : s.rfind(sep);
      if (at == std::string::npos) {
        return name == "partition" ? Value::Tuple({Value(s), Value(""), Value("")}) : Value::Tuple({Value(""), Value(""), Value(s)});
      }
      return Value::Tuple({Value(s.substr(0, at)), Value(sep), Value(s.substr(at + sep.size()))});
    }
    if (name == "removeprefix" || name == "removesuffix") {
      const std::string a = Arg(args, kwargs, 0, name == "removeprefix" ? "prefix" : "suffix", Value("")).Str();
      if (name == "removeprefix") return Value(s.rfind(a, 0) == 0 ? s.substr(a.size()) : s);
      return Value(s.size() >= a.size() && s.compare(s.size() - a.size(), a.size(), a) == 0 ? s.substr(0, s.size() - a.size()) : s);
    }
    if (name == "swapcase") return Value(ChangeCase(s, CaseMode::kSwap));
    if (name == "casefold") return Value(ChangeCase(s, CaseMode::kFold));
    if (name == "ljust" || name == "rjust" || name == "center" || name == "zfill") {
      const Value fill = name == "zfill" ? Value("0") : Arg(args, kwargs, 1, "fillchar", Value(" "));
      GRAFT_ASSIGN_OR_RETURN(std::string out, Justify(s, Arg(args, kwargs, 0, "width", none), fill.Str(), name, name + "()"));
      return Value(std::move(out));
    }
    if (name == "count") {
      const std::string sub = Arg(args, kwargs, 0, "sub", Value("")).Str();
      if (sub.empty()) return Value(static_cast<int64_t>(s.size() + 1));  // Python: before each character and at the end
      int64_t n = 0;
      for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
      return Value(n);
    }
    if (name == "format") {
      GRAFT_ASSIGN_OR_RETURN(std::string out, StrFormat(s, args, kwargs));
      return Value(std::move(out));
    }
    if (name == "rsplit") {
      // Python's str.rsplit: split() from the right, at most maxsplit times.
      const Value& sep = Arg(args, kwargs, 0, "sep", none);
      if (sep.is_string() && sep.as_string().empty()) return Err("rsplit(): empty separator");
      const Value& maxsplit = Arg(args, kwargs, 1, "maxsplit", Value(int64_t{-1}));
      if (maxsplit.is_number() && !maxsplit.is_int()) return Err("rsplit(): maxsplit must be an integer");
      const int64_t most = maxsplit.is_int() ? maxsplit.as_int() : -1;
      if (most < 0) {
        List all = SplitPy(s, sep, -1);
        if (all.size() > kMaxListItems) return Err(fmt::format("rsplit(): more than {} parts", kMaxListItems));
        return Value(std::move(all));
      }
      List tail;  // the last parts, split off from the right
      size_t end = s.size();
      if (sep.is_string()) {
        const std::string& d = sep.as_string();
        for (int64_t k = 0; k < most && end >= d.size(); ++k) {
          const size_t at = s.rfind(d, end - d.size());
          if (at == std::string::npos) break;
          tail.push_back(Value(s.substr(at + d.size(), end - at - d.size())));
          end = at;
        }
        tail.push_back(Value(s.substr(0, end)));
      } else {  // runs of whitespace; the rest keeps its leading whitespace, as Python's
        for (int64_t k = 0; k < most; ++k) {
          while (end > 0 && IsPyWs(s[end - 1])) --end;
          if (end == 0) break;
          size_t b = end;
          while (b > 0 && !IsPyWs(s[b - 1])) --b;
          tail.push_back(Value(s.substr(b, end - b)));
          end = b;
        }
        while (end > 0 && IsPyWs(s[end - 1])) --end;
        if (end > 0) tail.push_back(Value(s.substr(0, end)));
      }
      return Value(List(tail.rbegin(), tail.rend()));
    }
    if (name == "join") {
      const Value& items = Arg(args, kwargs, 0, "iterable", none);
      if (!items.is_list()) return Err("join() needs a list");
      GRAFT_ASSIGN_OR_RETURN(std::string out, Join(items.as_list(), s, "join()"));
      return Value(std::move(out));
    }
  }
  if (obj.is_list()) {
    if (name == "index" || name == "count") {
      // Python's list.index (the first equal item's position; an error if none) and list.count.
      if (args.empty()) return Err(fmt::format("{}() needs a value", name));
      int64_t n = 0;
      for (size_t i = 0; i < obj.as_list().size(); ++i) {
        if (!Equal(obj.as_list()[i], args[0])) continue;
        if (name == "index") return Value(static_cast<int64_t>(i));
        ++n;
      }
      if (name == "index") return Err(fmt::format("index(): {} is not in the list", args[0].Repr()));
      return Value(n);
    }
  }
  if (obj.is_dict()) {
    if (name == "get") {
      const Value* v = obj.as_dict().Find(Arg(args, kwargs, 0, "key", none).Str());
      return v ? *v : Arg(args, kwargs, 1, "default", none);
    }
    if (name == "items") return Value(Items(obj));
    if (name == "keys" || name == "values") {
      List out;
      for (const auto& [k, v] : obj.as_dict().items) out.push_back(name == "keys" ? Value(k) : v);
      return Value(out);
    }
  }
  *found = false;
  return Value();
}

}  // namespace graft::jinja

#include "template/builtins.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace graft::jinja {
namespace {

Status Err(const std::string& m) { return InvalidArgument(m); }

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

std::string Case(std::string s, int mode) {  // 0 lower, 1 upper, 2 capitalize, 3 title
  bool start = true;
  for (size_t i = 0; i < s.size(); ++i) {
    char& c = s[i];
    const bool alpha = std::isalpha(static_cast<unsigned char>(c));
    if (mode == 0 || (mode == 2 && i > 0) || (mode == 3 && !start)) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    else if (mode == 1 || (mode == 2 && i == 0) || (mode == 3 && start)) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    start = !alpha;
  }
  return s;
}

Result<int64_t> Length(const Value& v) {
  if (v.is_string()) {
    int64_t n = 0;  // code points, as Python's len()
    for (unsigned char c : v.as_string()) n += (c & 0xc0) != 0x80;
    return n;
  }
  if (v.is_list()) return static_cast<int64_t>(v.as_list().size());
  if (v.is_dict()) return static_cast<int64_t>(v.as_dict().items.size());
  if (v.is_undefined()) return int64_t{0};
  return Err(fmt::format("length of a {} value", v.TypeName()));
}

List Items(const Value& v) {
  List out;
  for (const auto& [k, x] : v.as_dict().items) out.emplace_back(List{Value(k), x});
  return out;
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
    const Value& indent = Arg(args, kwargs, 0, "indent", none);
    // An integer, and a sane one: a template's indent of 10^9 would ask for gigabytes a line.
    if (indent.is_number() && (!indent.is_int() || indent.as_int() < 0 || indent.as_int() > 64)) {
      return Err(fmt::format("filter 'tojson': indent must be an integer in 0..64, not {}", indent.Str()));
    }
    GRAFT_ASSIGN_OR_RETURN(std::string s, v.ToJson(indent.is_int() ? static_cast<int>(indent.as_int()) : -1));
    return Value(s);
  }
  if (name == "string") return Value(v.Str());
  if (name == "safe") return v;
  if (name == "trim") {
    const Value& chars = Arg(args, kwargs, 0, "chars", none);
    return Value(Strip(v.Str(), chars.is_string() ? chars.as_string() : "", true, true));
  }
  if (name == "upper") return Value(Case(v.Str(), 1));
  if (name == "lower") return Value(Case(v.Str(), 0));
  if (name == "capitalize") return Value(Case(v.Str(), 2));
  if (name == "title") return Value(Case(v.Str(), 3));
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
    if (v.is_list()) return Value(List(v.as_list()));
    if (v.is_string()) {
      if (v.as_string().size() > kMaxListItems) {
        return Err(fmt::format("filter 'list': a string of more than {} characters", kMaxListItems));
      }
      List l;
      for (char c : v.as_string()) l.emplace_back(std::string(1, c));
      return Value(l);
    }
    if (v.is_dict()) {
      List l;
      for (const auto& [k, x] : v.as_dict().items) l.emplace_back(k);
      return Value(l);
    }
    return Err(fmt::format("filter 'list' of a {} value", v.TypeName()));
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
    if (v.kind() == Value::Kind::kInt) return v;
    if (v.is_number()) {  // truncated toward zero; a float int64 cannot hold is an error, not a wrapped value
      const double d = std::trunc(v.as_double());
      if (!FitsInt64(d)) return Err(fmt::format("int(): {} is out of range", v.Str()));
      return Value(static_cast<int64_t>(d));
    }
    if (v.is_string()) {
      try {
        return Value(static_cast<int64_t>(std::stoll(v.as_string())));
      } catch (...) {
        return Value(int64_t{0});
      }
    }
    return Value(int64_t{0});
  }
  if (name == "float") {
    if (v.is_number()) return Value(v.as_double());
    try {
      return Value(std::stod(v.Str()));
    } catch (...) {
      return Value(0.0);
    }
  }
  if (name == "abs") {
    if (v.kind() == Value::Kind::kInt) return Value(static_cast<int64_t>(std::llabs(v.as_int())));
    if (v.is_number()) return Value(std::fabs(v.as_double()));
    return Err("filter 'abs' needs a number");
  }
  if (name == "selectattr" || name == "rejectattr") {
    if (!v.is_list() || args.empty()) return Err(fmt::format("filter '{}' needs a list and an attribute", name));
    List out;
    for (const auto& item : v.as_list()) {
      Value attr;
      if (item.is_dict()) if (const Value* a = item.as_dict().Find(args[0].Str())) attr = *a;
      bool ok;
      if (args.size() >= 2) {
        GRAFT_ASSIGN_OR_RETURN(ok, ApplyTest(args[1].Str(), attr, List(args.begin() + 2, args.end())));
      } else {
        ok = attr.Truthy();
      }
      if (ok == (name == "selectattr")) out.push_back(item);
    }
    return Value(out);
  }
  if (name == "map") {
    const Value* attribute = kwargs.Find("attribute");
    if (!v.is_list() || !attribute) return Err("filter 'map' is supported only as map(attribute='name')");
    List out;
    for (const auto& item : v.as_list()) {
      const Value* a = item.is_dict() ? item.as_dict().Find(attribute->Str()) : nullptr;
      out.push_back(a ? *a : Value());
    }
    return Value(out);
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
  if (name == "equalto" || name == "eq" || name == "sameas") {
    if (args.empty()) return Err(fmt::format("test '{}' needs an argument", name));
    return Equal(v, args[0]);
  }
  if (name == "ne") return args.empty() ? Result<bool>(Err("test 'ne' needs an argument")) : Result<bool>(!Equal(v, args[0]));
  if (name == "lower") return v.is_string() && Case(v.as_string(), 0) == v.as_string();
  if (name == "upper") return v.is_string() && Case(v.as_string(), 1) == v.as_string();
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
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      const Value& chars = Arg(args, kwargs, 0, "chars", none);
      return Value(Strip(s, chars.is_string() ? chars.as_string() : "", name != "rstrip", name != "lstrip"));
    }
    if (name == "upper") return Value(Case(s, 1));
    if (name == "lower") return Value(Case(s, 0));
    if (name == "title") return Value(Case(s, 3));
    if (name == "capitalize") return Value(Case(s, 2));
    if (name == "replace") {
      if (args.size() < 2) return Err("replace() needs two arguments");
      if (args.size() > 2 && args[2].is_number() && !args[2].is_int()) return Err("replace(): count must be an integer");
      GRAFT_ASSIGN_OR_RETURN(std::string r,
                             Replace(s, args[0].Str(), args[1].Str(), args.size() > 2 && args[2].is_int() ? args[2].as_int() : -1));
      return Value(std::move(r));
    }
    if (name == "find") {
      const size_t at = s.find(Arg(args, kwargs, 0, "sub", Value("")).Str());
      return Value(at == std::string::npos ? int64_t{-1} : static_cast<int64_t>(at));
    }
    if (name == "count") {
      const std::string sub = Arg(args, kwargs, 0, "sub", Value("")).Str();
      if (sub.empty()) return Value(static_cast<int64_t>(s.size() + 1));  // Python: before each character and at the end
      int64_t n = 0;
      for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
      return Value(n);
    }
    if (name == "join") {
      const Value& items = Arg(args, kwargs, 0, "iterable", none);
      if (!items.is_list()) return Err("join() needs a list");
      GRAFT_ASSIGN_OR_RETURN(std::string out, Join(items.as_list(), s, "join()"));
      return Value(std::move(out));
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

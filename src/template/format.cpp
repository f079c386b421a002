#include "template/format.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "template/text_case.h"
#include "util/byte_level.h"

namespace graft::jinja {
namespace {

constexpr int kMaxWidth = 1024;

Status Err(const std::string& m) { return InvalidArgument("'%' formatting: " + m); }

// The first n code points of s (Python's precision for strings).
std::string FirstCodePoints(const std::string& s, size_t n) { return s.substr(0, CodePointBytes(s, n)); }

std::string Utf8(uint32_t cp) {
  std::string out;
  AppendUtf8(cp, out);
  return out;
}

// An integer's magnitude in the conversion's base: b o x X, else decimal.
std::string Digits(uint64_t mag, char type) {
  switch (type) {
    case 'b': return fmt::format("{:b}", mag);
    case 'o': return fmt::format("{:o}", mag);
    case 'x': return fmt::format("{:x}", mag);
    case 'X': return fmt::format("{:X}", mag);
    default: return fmt::format("{}", mag);
  }
}

// The alternate form's prefix of a base: 0b / 0o / 0x / 0X (none for decimal).
const char* BasePrefix(char type) {
  return type == 'b' ? "0b" : type == 'o' ? "0o" : type == 'x' ? "0x" : type == 'X' ? "0X" : "";
}

// Python's ascii() of a repr: code points past ASCII as \xNN, \uNNNN or \UNNNNNNNN.
std::string Ascii(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      out += s[i++];
      continue;
    }
    const int len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
    uint32_t cp = c & (len == 4 ? 0x07 : len == 3 ? 0x0f : 0x1f);
    for (int k = 1; k < len && i + k < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
    i += len;
    out += cp < 0x100 ? fmt::format("\\x{:02x}", cp) : cp < 0x10000 ? fmt::format("\\u{:04x}", cp) : fmt::format("\\U{:08x}", cp);
  }
  return out;
}

struct Spec {
  bool left = false, plus = false, space = false, alt = false, zero = false;
  int width = -1, precision = -1;
  char type = 's';
};

// text padded to the spec's width: left-justified with '-', else on the left with spaces — or
// with zeros after the sign and the 0x / 0o prefix (`zero_at`: its length) for numbers.
std::string Pad(const std::string& text, const Spec& s, bool numeric, size_t zero_at) {
  const size_t n = CodePoints(text);
  if (s.width < 0 || n >= static_cast<size_t>(s.width)) return text;
  const size_t fill = static_cast<size_t>(s.width) - n;
  if (s.left) return text + std::string(fill, ' ');
  if (numeric && s.zero) return text.substr(0, zero_at) + std::string(fill, '0') + text.substr(zero_at);
  return std::string(fill, ' ') + text;
}

std::string Sign(bool negative, const Spec& s) { return negative ? "-" : s.plus ? "+" : s.space ? " " : ""; }

// %d %i %u %o %x %X of an integer, Python's way for negatives (sign and magnitude).
std::string Integer(int64_t v, const Spec& s) {
  const bool negative = v < 0;
  const uint64_t mag = negative ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  std::string digits = Digits(mag, s.type);
  if (s.precision > 0 && digits.size() < static_cast<size_t>(s.precision)) {
    digits = std::string(static_cast<size_t>(s.precision) - digits.size(), '0') + digits;
  }
  const std::string prefix = s.alt ? BasePrefix(s.type) : "";
  const std::string head = Sign(negative, s) + prefix;
  return Pad(head + digits, s, true, head.size());
}

// %e %E %f %F %g %G: C's printf matches Python's for these (finite and not).
std::string Float(double v, const Spec& s) {
  std::string f = "%";
  if (s.plus) f += '+';
  if (s.space) f += ' ';
  if (s.alt) f += '#';
  f += '.';
  f += std::to_string(s.precision < 0 ? 6 : s.precision);
  f += s.type;
  char buf[kMaxWidth + 400];
  std::snprintf(buf, sizeof buf, f.c_str(), v);
  std::string text(buf);
  const bool finite = std::isfinite(v);
  const size_t sign = !text.empty() && (text[0] == '-' || text[0] == '+' || text[0] == ' ') ? 1 : 0;
  Spec pad = s;
  if (!finite) pad.zero = false;  // Python pads inf / nan with spaces
  return Pad(text, pad, true, sign);
}

// The kind Python names in its type errors.
std::string PyType(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "Undefined";
    case Value::Kind::kNone: return "NoneType";
    case Value::Kind::kBool: return "bool";
    case Value::Kind::kInt: return "int";
    case Value::Kind::kFloat: return "float";
    case Value::Kind::kString: return "str";
    case Value::Kind::kList: return v.is_tuple() ? "tuple" : "list";
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: return "dict";
    case Value::Kind::kCallable: return "function";
  }
  return "object";
}

Result<std::string> Convert(const Value& v, const Spec& s) {
  switch (s.type) {
    case 's':
    case 'r':
    case 'a': {
      std::string text = s.type == 's' ? v.Str() : s.type == 'r' ? v.Repr() : Ascii(v.Repr());
      if (s.precision >= 0) text = FirstCodePoints(text, static_cast<size_t>(s.precision));
      return Pad(text, s, false, 0);
    }
    case 'd':
    case 'i':
    case 'u':
    case 'o':
    case 'x':
    case 'X': {
      const bool decimal = s.type == 'd' || s.type == 'i' || s.type == 'u';
      if (v.kind() == Value::Kind::kBool) return Integer(v.as_bool() ? 1 : 0, s);
      if (v.is_int()) return Integer(v.as_int(), s);
      if (decimal && v.kind() == Value::Kind::kFloat) {
        const double t = std::trunc(v.as_double());
        if (!std::isfinite(t) || !FitsInt64(t)) return Err(fmt::format("%{} of {} (outside 64-bit integers)", s.type, v.Repr()));
        return Integer(static_cast<int64_t>(t), s);
      }
      return Err(fmt::format("%{} format: {} is required, not {}", s.type, decimal ? "a real number" : "an integer", PyType(v)));
    }
    case 'e':
    case 'E':
    case 'f':
    case 'F':
    case 'g':
    case 'G':
      if (v.kind() == Value::Kind::kBool) return Float(v.as_bool() ? 1.0 : 0.0, s);
      if (v.is_number()) return Float(v.as_double(), s);
      return Err(fmt::format("%{} format: a real number is required, not {}", s.type, PyType(v)));
    case 'c': {
      if (v.is_int()) {
        if (v.as_int() < 0 || v.as_int() > 0x10FFFF) return Err("%c arg not in range(0x110000)");
        return Pad(Utf8(static_cast<uint32_t>(v.as_int())), s, false, 0);
      }
      if (v.is_string() && CodePoints(v.as_string()) == 1) return Pad(v.as_string(), s, false, 0);
      return Err("%c requires an int or a one-character string");
    }
    default: return Err(fmt::format("unsupported format character '{}'", s.type));  // '%5%' too, as Python's
  }
}

}  // namespace

Result<std::string> PercentFormat(const std::string& format, const Value& args) {
  // Python's argument rules: a tuple gives one value a conversion; anything else is the single
  // value; a dict or list (Python: any mapping but a string) may also supply %(key)s, and excuses
  // a format that converts nothing.
  const bool tuple = args.is_tuple();
  const List* items = tuple ? &args.as_list() : nullptr;
  const bool mapping = !tuple && (args.is_dict() || args.is_list());
  int64_t argidx = tuple ? 0 : -2;
  const int64_t arglen = tuple ? static_cast<int64_t>(items->size()) : -1;
  auto next = [&]() -> Result<Value> {
    if (argidx >= arglen) return Err("not enough arguments for the format string");
    const int64_t i = argidx++;
    return tuple ? (*items)[static_cast<size_t>(i)] : args;
  };
  auto number = [&](size_t& i, int& out) -> Status {
    if (i < format.size() && format[i] == '*') {
      ++i;
      GRAFT_ASSIGN_OR_RETURN(Value v, next());
      if (!v.is_int()) return Err("* wants an int");
      out = static_cast<int>(std::min<int64_t>(std::abs(v.as_int()), kMaxWidth + 1));
      return Status::Ok();
    }
    int64_t n = 0;
    bool any = false;
    while (i < format.size() && format[i] >= '0' && format[i] <= '9') {
      n = std::min<int64_t>(n * 10 + (format[i++] - '0'), kMaxWidth + 1);
      any = true;
    }
    if (any) out = static_cast<int>(n);
    return Status::Ok();
  };
  std::string out;
  for (size_t i = 0; i < format.size();) {
    const size_t pct = format.find('%', i);
    if (pct == std::string::npos) {
      out.append(format, i, std::string::npos);
      break;
    }
    out.append(format, i, pct - i);
    i = pct + 1;
    if (i >= format.size()) return Err("incomplete format");
    if (format[i] == '%') {
      out += '%';
      ++i;
      continue;
    }
    Value arg;
    bool keyed = false;
    if (format[i] == '(') {
      const size_t close = format.find(')', i);  // Python counts nested parentheses; a key rarely holds one
      if (close == std::string::npos) return Err("incomplete format key");
      const std::string key = format.substr(i + 1, close - i - 1);
      i = close + 1;
      if (!mapping || !args.is_dict()) return Err("format requires a mapping (a dict) for %(" + key + ")");
      const Value* v = args.as_dict().Find(key);
      if (v == nullptr) return Err("no key '" + key + "' in the mapping");
      arg = *v;
      keyed = true;
      argidx = -1;  // Python: no positional value after a keyed one
    }
    Spec s;
    for (; i < format.size(); ++i) {
      const char c = format[i];
      if (c == '-') s.left = true;
      else if (c == '+') s.plus = true;
      else if (c == ' ') s.space = true;
      else if (c == '#') s.alt = true;
      else if (c == '0') s.zero = true;
      else break;
    }
    GRAFT_RETURN_IF_ERROR(number(i, s.width));
    if (i < format.size() && format[i] == '.') {
      ++i;
      s.precision = 0;
      GRAFT_RETURN_IF_ERROR(number(i, s.precision));
    }
    if (s.width > kMaxWidth || s.precision > kMaxWidth) return Err(fmt::format("width and precision stop at {}", kMaxWidth));
    while (i < format.size() && (format[i] == 'h' || format[i] == 'l' || format[i] == 'L')) ++i;
    if (i >= format.size()) return Err("incomplete format");
    s.type = format[i++];
    if (!keyed) {
      GRAFT_ASSIGN_OR_RETURN(arg, next());
    }
    GRAFT_ASSIGN_OR_RETURN(std::string piece, Convert(arg, s));
    out += piece;
    if (out.size() > kMaxTextBytes) return Err(fmt::format("the result passes {} bytes", kMaxTextBytes));
  }
  if (argidx < arglen && !mapping) return Err("not all arguments converted during string formatting");
  return out;
}

}  // namespace graft::jinja

namespace graft::jinja {
namespace {

Status FmtErr(const std::string& m) { return InvalidArgument("str.format: " + m); }

// A parsed format spec (Python's format mini-language).
struct FormatSpec {
  std::string fill = " ";
  char align = 0;  // < > = ^, 0: the type's default
  char sign = '-';
  bool alt = false, zero = false;
  int width = -1, precision = -1;
  char grouping = 0;  // , or _
  char type = 0;
};

Result<FormatSpec> ParseSpec(const std::string& s) {
  FormatSpec f;
  size_t i = 0;
  // [[fill]align]: the fill is one code point
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '=' || c == '^'; };
  if (!s.empty()) {
    size_t first = 1;
    while (first < s.size() && (static_cast<unsigned char>(s[first]) & 0xc0) == 0x80) ++first;
    if (first < s.size() && is_align(s[first])) {
      f.fill = s.substr(0, first);
      f.align = s[first];
      i = first + 1;
    } else if (is_align(s[0])) {
      f.align = s[0];
      i = 1;
    }
  }
  if (i < s.size() && (s[i] == '+' || s[i] == '-' || s[i] == ' ')) f.sign = s[i++];
  if (i < s.size() && s[i] == '#') f.alt = true, ++i;
  if (i < s.size() && s[i] == '0') f.zero = true, ++i;
  auto digits = [&](int& out) {
    int64_t n = 0;
    bool any = false;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') n = std::min<int64_t>(n * 10 + (s[i++] - '0'), kMaxWidth + 1), any = true;
    if (any) out = static_cast<int>(n);
    return any;
  };
  digits(f.width);
  if (i < s.size() && (s[i] == ',' || s[i] == '_')) f.grouping = s[i++];
  if (i < s.size() && s[i] == '.') {
    ++i;
    if (!digits(f.precision)) return FmtErr("format specifier missing precision");
  }
  if (i < s.size()) f.type = s[i++];
  if (i < s.size()) return FmtErr("invalid format specifier '" + s + "'");
  if (f.width > kMaxWidth || f.precision > kMaxWidth) return FmtErr(fmt::format("width and precision stop at {}", kMaxWidth));
  return f;
}

// Separators every `every` digits of the integer part of `digits` (digits, maybe a '.' part).
std::string Group(const std::string& digits, char sep, int every) {
  const size_t end = std::min(digits.find('.'), digits.find_first_of("eE"));
  const size_t int_end = end == std::string::npos ? digits.size() : end;
  std::string out;
  for (size_t i = 0; i < int_end; ++i) {
    if (i > 0 && (int_end - i) % static_cast<size_t>(every) == 0) out += sep;
    out += digits[i];
  }
  return out + digits.substr(int_end);
}

// sign + body aligned in the spec's width; `numeric` puts '=' (after the sign) as the default
// with '0', and right-aligns by default.
std::string Align(const std::string& sign, const std::string& body, const FormatSpec& f, bool numeric) {
  const size_t n = CodePoints(sign) + CodePoints(body);
  char align = f.align;
  std::string fill = f.fill;
  if (align == 0) {
    align = numeric ? '>' : '<';
    if (numeric && f.zero) align = '=', fill = "0";
  }
  if (f.width < 0 || n >= static_cast<size_t>(f.width)) return sign + body;
  const size_t pad = static_cast<size_t>(f.width) - n;
  auto fills = [&](size_t k) {
    std::string r;
    for (size_t j = 0; j < k; ++j) r += fill;
    return r;
  };
  switch (align) {
    case '<': return sign + body + fills(pad);
    case '^': return fills(pad / 2) + sign + body + fills(pad - pad / 2);
    case '=': return sign + fills(pad) + body;
    default: return fills(pad) + sign + body;
  }
}

// A float with no type: repr without a precision; with one, 'g' that keeps a digit past the
// point in fixed notation (Python's float.__format__).
std::string FloatNoType(double v, int precision) {
  if (precision < 0) {
    Value x(v);
    return x.Repr();
  }
  const int p = precision == 0 ? 1 : precision;
  char buf[kMaxWidth + 400];
  std::snprintf(buf, sizeof buf, "%.*e", p - 1, v);
  const char* e = std::strchr(buf, 'e');
  const int exp = e ? std::atoi(e + 1) : 0;
  if (!std::isfinite(v)) return buf;
  if (exp < -4 || exp >= p - 1) {  // scientific, the mantissa's trailing zeros dropped (as 'g')
    std::string r(buf);
    const size_t at = r.find('e');
    std::string mant = r.substr(0, at);
    if (mant.find('.') != std::string::npos) {
      while (mant.back() == '0') mant.pop_back();
      if (mant.back() == '.') mant.pop_back();
    }
    return mant + r.substr(at);
  }
  std::snprintf(buf, sizeof buf, "%.*f", p - 1 - exp, v);
  std::string r(buf);
  if (r.find('.') != std::string::npos) {
    while (r.back() == '0') r.pop_back();
    if (r.back() == '.') r += '0';
  } else {
    r += ".0";
  }
  return r;
}

Result<std::string> FormatValue(const Value& v, const std::string& spec_text) {
  using K = Value::Kind;
  if (spec_text.empty()) return v.Str();
  GRAFT_ASSIGN_OR_RETURN(FormatSpec f, ParseSpec(spec_text));
  const char* type_name = v.kind() == K::kBool ? "bool" : v.is_int() ? "int" : v.kind() == K::kFloat ? "float" : "str";
  if (v.is_string()) {
    if (f.type != 0 && f.type != 's') return FmtErr(fmt::format("Unknown format code '{}' for object of type 'str'", f.type));
    if (f.sign != '-' || f.alt || f.grouping) return FmtErr("sign, '#' and grouping are not allowed with strings");
    std::string body = f.precision >= 0 ? FirstCodePoints(v.as_string(), static_cast<size_t>(f.precision)) : v.as_string();
    return Align("", body, f, false);
  }
  if (!v.is_number() && v.kind() != K::kBool) {
    return FmtErr(fmt::format("unsupported format string passed to {}.__format__", PyType(v)));
  }
  const bool integer = v.is_int() || v.kind() == K::kBool;
  const char type = f.type == 0 ? (integer ? 'd' : 0) : f.type == 'n' ? (integer ? 'd' : 'g') : f.type;
  const std::string sign_of = f.sign == '+' ? "+" : f.sign == ' ' ? " " : "";
  if (integer && std::string("bcdoxX").find(type) != std::string::npos) {
    if (f.precision >= 0) return FmtErr("Precision not allowed in integer format specifier");
    const int64_t i = v.kind() == K::kBool ? (v.as_bool() ? 1 : 0) : v.as_int();
    if (type == 'c') {
      if (i < 0 || i > 0x10FFFF) return FmtErr("%c arg not in range(0x110000)");
      return Align("", Utf8(static_cast<uint32_t>(i)), f, true);
    }
    const uint64_t mag = i < 0 ? 0 - static_cast<uint64_t>(i) : static_cast<uint64_t>(i);
    std::string digits = Digits(mag, type);
    if (f.grouping) digits = Group(digits, f.grouping, type == 'd' ? 3 : 4);
    const std::string prefix = f.alt ? BasePrefix(type) : "";
    return Align((i < 0 ? "-" : sign_of) + prefix, digits, f, true);
  }
  if (std::string("eEfFgG%").find(type) == std::string::npos && type != 0) {
    return FmtErr(fmt::format("Unknown format code '{}' for object of type '{}'", type, type_name));
  }
  double d = v.kind() == K::kBool ? (v.as_bool() ? 1.0 : 0.0) : v.as_double();
  const bool negative = std::signbit(d) && !std::isnan(d);
  const double mag = std::fabs(d);
  std::string body;
  if (type == 0) {
    body = FloatNoType(mag, f.precision);
  } else {
    const char t = type == '%' ? 'f' : type;
    char buf[kMaxWidth + 400];
    std::string cf = std::string("%") + (f.alt ? "#" : "") + ".*" + t;
    std::snprintf(buf, sizeof buf, cf.c_str(), f.precision < 0 ? 6 : f.precision, type == '%' ? mag * 100 : mag);
    body = buf;
    if (type == '%') body += '%';
  }
  if (f.grouping) body = Group(body, f.grouping, 3);
  return Align(negative ? "-" : sign_of, body, f, true);
}

// obj.attr / obj[key] inside a field name.
Result<Value> Lookup(const Value& obj, const std::string& key, bool item) {
  if (obj.is_dict()) {
    if (const Value* v = obj.as_dict().Find(key)) return *v;
    return FmtErr(fmt::format("no {} '{}'", item ? "key" : "attribute", key));
  }
  if (obj.is_list() && item && !key.empty() && key.find_first_not_of("0123456789") == std::string::npos) {
    const size_t i = std::strtoull(key.c_str(), nullptr, 10);
    if (key.size() < 10 && i < obj.as_list().size()) return obj.as_list()[i];
    return FmtErr("index " + key + " out of range");
  }
  return FmtErr(fmt::format("{} {}'{}' on a {} value", item ? "item" : "attribute", "", key, obj.TypeName()));
}

}  // namespace

Result<std::string> StrFormat(const std::string& format, const List& args, const Dict& kwargs) {
  std::string out;
  int auto_index = 0;
  bool manual = false, automatic = false;
  // One replacement field's text (between the braces) to its formatted value; depth 1 for the
  // fields nested in a spec.
  std::function<Result<std::string>(const std::string&, int)> field = [&](const std::string& text,
                                                                           int depth) -> Result<std::string> {
    size_t i = 0;
    while (i < text.size() && text[i] != '.' && text[i] != '[' && text[i] != '!' && text[i] != ':') ++i;
    const std::string name = text.substr(0, i);
    Value v;
    if (name.empty() || name.find_first_not_of("0123456789") == std::string::npos) {
      size_t index = 0;
      if (name.empty()) {
        if (manual) return FmtErr("cannot switch from manual field specification to automatic field numbering");
        automatic = true;
        index = static_cast<size_t>(auto_index++);
      } else {
        if (automatic) return FmtErr("cannot switch from automatic field numbering to manual field specification");
        manual = true;
        index = name.size() < 10 ? std::strtoull(name.c_str(), nullptr, 10) : args.size();
      }
      if (index >= args.size()) return FmtErr(fmt::format("replacement index {} out of range for {} positional arguments", index, args.size()));
      v = args[index];
    } else {
      const Value* kv = kwargs.Find(name);
      if (kv == nullptr) return FmtErr("no keyword argument '" + name + "'");
      v = *kv;
    }
    while (i < text.size() && (text[i] == '.' || text[i] == '[')) {
      const bool item = text[i] == '[';
      const size_t start = ++i;
      if (item) {
        const size_t close = text.find(']', start);
        if (close == std::string::npos) return FmtErr("missing ']' in format string");
        GRAFT_ASSIGN_OR_RETURN(v, Lookup(v, text.substr(start, close - start), true));
        i = close + 1;
      } else {
        while (i < text.size() && text[i] != '.' && text[i] != '[' && text[i] != '!' && text[i] != ':') ++i;
        if (i == start) return FmtErr("empty attribute in format string");
        GRAFT_ASSIGN_OR_RETURN(v, Lookup(v, text.substr(start, i - start), false));
      }
    }
    if (i < text.size() && text[i] == '!') {
      if (i + 1 >= text.size()) return FmtErr("end of string while looking for conversion specifier");
      const char c = text[i + 1];
      if (c != 's' && c != 'r' && c != 'a') return FmtErr(fmt::format("Unknown conversion specifier {}", c));
      v = Value(c == 's' ? v.Str() : c == 'r' ? v.Repr() : Ascii(v.Repr()));
      i += 2;
      if (i < text.size() && text[i] != ':') return FmtErr("expected ':' after conversion specifier");
    }
    std::string spec = i < text.size() ? text.substr(i + 1) : "";
    if (spec.find('{') != std::string::npos) {  // fields nested in the spec, one level deep
      if (depth > 0) return FmtErr("Max string recursion exceeded");
      std::string expanded;
      for (size_t k = 0; k < spec.size(); ++k) {
        if (spec[k] != '{') {
          expanded += spec[k];
          continue;
        }
        const size_t close = spec.find('}', k);
        if (close == std::string::npos) return FmtErr("unmatched '{' in format spec");
        GRAFT_ASSIGN_OR_RETURN(std::string inner, field(spec.substr(k + 1, close - k - 1), depth + 1));
        expanded += inner;
        k = close;
      }
      spec = expanded;
    }
    return FormatValue(v, spec);
  };
  for (size_t i = 0; i < format.size();) {
    const char c = format[i];
    if (c == '}') {
      if (i + 1 < format.size() && format[i + 1] == '}') {
        out += '}';
        i += 2;
        continue;
      }
      return FmtErr("Single '}' encountered in format string");
    }
    if (c != '{') {
      out += c;
      ++i;
      continue;
    }
    if (i + 1 < format.size() && format[i + 1] == '{') {
      out += '{';
      i += 2;
      continue;
    }
    // The field runs to its matching '}' (a spec may nest one pair).
    size_t j = i + 1;
    int open = 1;
    for (; j < format.size() && open > 0; ++j) open += format[j] == '{' ? 1 : format[j] == '}' ? -1 : 0;
    if (open > 0) return FmtErr("Single '{' encountered in format string");
    GRAFT_ASSIGN_OR_RETURN(std::string piece, field(format.substr(i + 1, j - i - 2), 0));
    out += piece;
    if (out.size() > kMaxTextBytes) return FmtErr(fmt::format("the result passes {} bytes", kMaxTextBytes));
    i = j;
  }
  return out;
}

}  // namespace graft::jinja

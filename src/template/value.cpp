#include "template/value.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <vector>
#include <nlohmann/json.hpp>

namespace graft::jinja {

const Value* Dict::Find(const std::string& key) const {
  for (const auto& [k, v] : items) if (k == key) return &v;
  return nullptr;
}

Value* Dict::Find(const std::string& key) {
  for (auto& [k, v] : items) if (k == key) return &v;
  return nullptr;
}

void Dict::Set(const std::string& key, Value v) {
  if (Value* p = Find(key)) *p = std::move(v);
  else items.emplace_back(key, std::move(v));
}

Value Value::FromJson(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::None();
    case nlohmann::ordered_json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned: return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List l;
      for (const auto& e : j) l.push_back(FromJson(e));
      return Value(std::move(l));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      for (const auto& [k, v] : j.items()) d.items.emplace_back(k, FromJson(v));
      return Value(std::move(d));
    }
    default: return Value();
  }
}

Value::Kind Value::kind() const {
  switch (v_.index()) {
    case 0: return Kind::kUndefined;
    case 1: return Kind::kNone;
    case 2: return Kind::kBool;
    case 3: return Kind::kInt;
    case 4: return Kind::kFloat;
    case 5: return Kind::kString;
    case 6: return Kind::kList;
    case 7: return namespace_ ? Kind::kNamespace : Kind::kDict;
    default: return Kind::kCallable;
  }
}

double Value::as_double() const { return kind() == Kind::kInt ? static_cast<double>(as_int()) : std::get<double>(v_); }

bool Value::Truthy() const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return as_bool();
    case Kind::kInt: return as_int() != 0;
    case Kind::kFloat: return as_double() != 0.0;
    case Kind::kString: return !as_string().empty();
    case Kind::kList: return !as_list().empty();
    case Kind::kDict:
    case Kind::kNamespace: return !as_dict().items.empty();
    case Kind::kCallable: return true;
  }
  return false;
}

namespace {

std::string FloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == std::floor(d) && std::fabs(d) < 1e16) return fmt::format("{:.1f}", d);
  return fmt::format("{}", d);  // shortest round-trip, as Python's repr
}

std::string QuoteRepr(const std::string& s) {
  const bool use_double = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = use_double ? '"' : '\'';
  std::string out(1, q);
  for (char c : s) {
    if (c == q || c == '\\') out += '\\', out += c;
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else out += c;
  }
  return out + q;
}

}  // namespace

std::string Value::Str() const {
  switch (kind()) {
    case Kind::kUndefined: return "";
    case Kind::kString: return as_string();
    default: return Repr();
  }
}

namespace {

// Repr into out; `open` holds the lists and dicts being printed (a repeat prints as [...] / {...}).
void AppendRepr(const Value& v, std::string& out, std::vector<const void*>& open) {
  using K = Value::Kind;
  switch (v.kind()) {
    case K::kList:
    case K::kDict:
    case K::kNamespace: {
      const bool list = v.kind() == K::kList, tuple = v.is_tuple();
      const void* self = list ? static_cast<const void*>(&v.as_list()) : static_cast<const void*>(&v.as_dict());
      if (std::find(open.begin(), open.end(), self) != open.end()) {
        out += tuple ? "(...)" : list ? "[...]" : "{...}";
        return;
      }
      open.push_back(self);
      out += tuple ? "(" : list ? "[" : "{";
      if (list) {
        for (size_t i = 0; i < v.as_list().size() && out.size() <= kMaxTextBytes; ++i) {
          if (i) out += ", ";
          AppendRepr(v.as_list()[i], out, open);
        }
        if (tuple) out += v.as_list().size() == 1 ? ",)" : ")";
      } else {
        bool first = true;
        for (const auto& [k, e] : v.as_dict().items) {
          if (out.size() > kMaxTextBytes) break;
          out += (first ? "" : ", ") + QuoteRepr(k) + ": ";
          AppendRepr(e, out, open);
          first = false;
        }
      }
      if (!tuple) out += list ? "]" : "}";
      open.pop_back();
      return;
    }
    case K::kUndefined: return;
    case K::kNone: out += "None"; return;
    case K::kBool: out += v.as_bool() ? "True" : "False"; return;
    case K::kInt: out += std::to_string(v.as_int()); return;
    case K::kFloat: out += FloatRepr(v.as_double()); return;
    case K::kString: out += QuoteRepr(v.as_string()); return;
    case K::kCallable: out += "<function " + v.as_callable().name + ">"; return;
  }
}

bool EqualAt(const Value& a, const Value& b, int depth) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) return a.as_double() == b.as_double();
  if (a.kind() == K::kBool && b.is_number()) return (a.as_bool() ? 1.0 : 0.0) == b.as_double();
  if (b.kind() == K::kBool && a.is_number()) return (b.as_bool() ? 1.0 : 0.0) == a.as_double();
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::kUndefined:
    case K::kNone: return true;
    case K::kBool: return a.as_bool() == b.as_bool();
    case K::kString: return a.as_string() == b.as_string();
    case K::kList: {
      const auto &x = a.as_list(), &y = b.as_list();
      if (a.is_tuple() != b.is_tuple()) return false;  // Python: (1, 2) != [1, 2]
      if (&x == &y) return true;
      if (x.size() != y.size() || depth >= kMaxCompareDepth) return false;
      for (size_t i = 0; i < x.size(); ++i) if (!EqualAt(x[i], y[i], depth + 1)) return false;
      return true;
    }
    case K::kDict:
    case K::kNamespace: {
      const auto &x = a.as_dict(), &y = b.as_dict();
      if (&x == &y) return true;
      if (x.items.size() != y.items.size() || depth >= kMaxCompareDepth) return false;
      for (const auto& [k, v] : x.items) {
        const Value* o = y.Find(k);
        if (!o || !EqualAt(v, *o, depth + 1)) return false;
      }
      return true;
    }
    default: return &a.as_callable() == &b.as_callable();
  }
}

}  // namespace

std::string Value::Repr() const {
  std::string out;
  std::vector<const void*> open;
  AppendRepr(*this, out, open);
  return out;
}

Result<std::string> Value::ToJson(const JsonStyle& style) const {
  const int indent = style.indent;
  const std::string item_sep = style.separators ? style.item_sep : indent >= 0 ? "," : ", ";
  const std::string key_sep = style.separators ? style.key_sep : ": ";
  const auto quoted = [&](const std::string& text) {
    return nlohmann::json(text).dump(-1, ' ', style.ensure_ascii, nlohmann::json::error_handler_t::replace);
  };
  std::vector<const void*> open;  // the lists and dicts being written: one of them again is a cycle
  // Bytes copied so far: each piece counts once at every level it is copied into, which is the
  // work done (a value nested n deep is copied n times), not the text's length: a shared list
  // nested in itself 40 deep stops after ~16 MB of copying, not after ~16 MB of text (~15x the
  // time: 1.4 against 21.7 s under the fuzzer's ASan build).
  size_t copied = 0;
  std::function<Result<std::string>(const Value&, int)> rec = [&](const Value& v, int depth) -> Result<std::string> {
    if (copied > kMaxTextBytes) return InvalidArgument(fmt::format("tojson: the text passed {} bytes", kMaxTextBytes));
    const std::string nl = indent >= 0 ? "\n" + std::string(static_cast<size_t>(indent * (depth + 1)), ' ') : "";
    const std::string nl_end = indent >= 0 ? "\n" + std::string(static_cast<size_t>(indent * depth), ' ') : "";
    switch (v.kind()) {
      case Kind::kUndefined:
      case Kind::kNone: return std::string("null");
      case Kind::kBool: return std::string(v.as_bool() ? "true" : "false");
      case Kind::kInt: return std::to_string(v.as_int());
      case Kind::kFloat: {
        const double d = v.as_double();
        if (std::isnan(d)) return std::string("NaN");
        if (std::isinf(d)) return std::string(d > 0 ? "Infinity" : "-Infinity");
        return FloatRepr(d);
      }
      case Kind::kString: return quoted(v.as_string());
      case Kind::kList: {
        if (v.as_list().empty()) return std::string("[]");
        if (std::find(open.begin(), open.end(), &v.as_list()) != open.end()) {
          return InvalidArgument("tojson: circular reference (a list that holds itself)");
        }
        open.push_back(&v.as_list());
        std::string s = "[";
        for (size_t i = 0; i < v.as_list().size(); ++i) {
          GRAFT_ASSIGN_OR_RETURN(std::string e, rec(v.as_list()[i], depth + 1));
          s += (i ? item_sep : "") + nl + e;
          copied += e.size();
        }
        open.pop_back();
        return s + nl_end + "]";
      }
      case Kind::kDict:
      case Kind::kNamespace: {
        if (v.as_dict().items.empty()) return std::string("{}");
        if (std::find(open.begin(), open.end(), &v.as_dict()) != open.end()) {
          return InvalidArgument("tojson: circular reference (a dict that holds itself)");
        }
        open.push_back(&v.as_dict());
        std::vector<const std::pair<std::string, Value>*> items;
        for (const auto& kv : v.as_dict().items) items.push_back(&kv);
        if (style.sort_keys) {
          std::stable_sort(items.begin(), items.end(), [](const auto* a, const auto* b) { return a->first < b->first; });
        }
        std::string s = "{";
        bool first = true;
        for (const auto* kv : items) {
          GRAFT_ASSIGN_OR_RETURN(std::string ej, rec(kv->second, depth + 1));
          s += (first ? "" : item_sep) + nl + quoted(kv->first) + key_sep + ej;
          copied += ej.size() + kv->first.size();
          first = false;
        }
        open.pop_back();
        return s + nl_end + "}";
      }
      case Kind::kCallable: return InvalidArgument("tojson: a function is not JSON serializable");
    }
    return std::string();
  };
  return rec(*this, 0);
}

const char* Value::TypeName() const {
  switch (kind()) {
    case Kind::kUndefined: return "undefined";
    case Kind::kNone: return "none";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "string";
    case Kind::kList: return is_tuple() ? "tuple" : "list";
    case Kind::kDict: return "dict";
    case Kind::kNamespace: return "namespace";
    case Kind::kCallable: return "function";
  }
  return "?";
}

bool Equal(const Value& a, const Value& b) { return EqualAt(a, b, 0); }

}  // namespace graft::jinja

// Value: the dynamic values a chat template computes with (a Python/Jinja subset).
//
// Undefined, None, bool, int, float, string, list, dict (insertion-ordered), namespace
// (a mutable dict) and callable (macros, raise_exception). A tuple is a list marked as one (tuple
// literals, a dict's items): it prints as Python's "(1, 2)" and never equals a list; everything
// else treats it as a list. Lists, dicts and namespaces are shared by reference, as in Python. Conversions follow Python's rules where templates
// observe them: truthiness, str() of numbers ("1.0", "True", "None"), == across int/float.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "util/status.h"

namespace graft::jinja {

class Value;
using List = std::vector<Value>;
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* Find(const std::string& key) const;
  Value* Find(const std::string& key);
  void Set(const std::string& key, Value v);
};
struct Undefined {};
struct None {};
struct Callable {
  std::string name;
  // args: positional; kwargs: named. Returns the call's value.
  std::function<Result<Value>(const List& args, const Dict& kwargs)> fn;
};

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kCallable };

  Value() : v_(Undefined{}) {}
  static Value None() { Value x; x.v_ = jinja::None{}; return x; }
  Value(bool b) : v_(b) {}                                             // NOLINT
  Value(int64_t i) : v_(i) {}                                          // NOLINT
  Value(int i) : v_(static_cast<int64_t>(i)) {}                        // NOLINT
  Value(double d) : v_(d) {}                                           // NOLINT
  Value(std::string s) : v_(std::move(s)) {}                           // NOLINT
  Value(const char* s) : v_(std::string(s)) {}                         // NOLINT
  Value(List l) : v_(std::make_shared<List>(std::move(l))) {}          // NOLINT
  Value(Dict d, bool is_namespace = false)                             // NOLINT
      : v_(std::make_shared<Dict>(std::move(d))), namespace_(is_namespace) {}
  Value(Callable c) : v_(std::make_shared<Callable>(std::move(c))) {}  // NOLINT
  static Value Tuple(List l) { Value x(std::move(l)); x.tuple_ = kTuple; return x; }
  // groupby's (grouper, list) pair: a tuple that also answers .grouper and .list.
  static Value Group(Value grouper, List items) {
    Value x(List{std::move(grouper), Value(std::move(items))});
    x.tuple_ = kGroup;
    return x;
  }

  static Value FromJson(const nlohmann::ordered_json& j);

  Kind kind() const;
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_number() const { return kind() == Kind::kInt || kind() == Kind::kFloat; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_list() const { return kind() == Kind::kList; }
  bool is_tuple() const { return tuple_ != kNotTuple && kind() == Kind::kList; }
  bool is_group() const { return tuple_ == kGroup && kind() == Kind::kList; }
  bool is_dict() const { return kind() == Kind::kDict || kind() == Kind::kNamespace; }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return std::get<int64_t>(v_); }
  double as_double() const;  // int or float
  const std::string& as_string() const { return std::get<std::string>(v_); }
  List& as_list() const { return *std::get<std::shared_ptr<List>>(v_); }
  Dict& as_dict() const { return *std::get<std::shared_ptr<Dict>>(v_); }
  const Callable& as_callable() const { return *std::get<std::shared_ptr<Callable>>(v_); }

  bool Truthy() const;
  // Python str(): what {{ value }} prints.
  std::string Str() const;
  // Python repr() (strings quoted), used inside lists and dicts.
  std::string Repr() const;
  // Python json.dumps(value, ...) with `style`'s options (JsonStyle below).
  Result<std::string> ToJson(const struct JsonStyle& style) const;
  const char* TypeName() const;

 private:
  std::variant<Undefined, jinja::None, bool, int64_t, double, std::string, std::shared_ptr<List>,
               std::shared_ptr<Dict>, std::shared_ptr<Callable>>
      v_;
  bool namespace_ = false;
  enum : uint8_t { kNotTuple, kTuple, kGroup } tuple_ = kNotTuple;
};

// json.dumps' options, as transformers' tojson filter passes them on: indent < 0 writes one line;
// without separators Python's defaults (", " and ": " on one line, "," and ": " indented);
// ensure_ascii writes non-ASCII characters as \uXXXX escapes (surrogate pairs past U+FFFF).
struct JsonStyle {
  int indent = -1;
  bool separators = false;  // item_sep / key_sep given
  std::string item_sep, key_sep;
  bool sort_keys = false;
  bool ensure_ascii = false;
};

// Python ==, with Python's shortcut for a list or dict compared with itself; structures nested
// deeper than kMaxCompareDepth (only a list or dict that holds itself gets there) compare unequal
// instead of recursing without end.
inline constexpr int kMaxCompareDepth = 200;
bool Equal(const Value& a, const Value& b);

// A template's text values stay below this: Repr / Str stop appending once past it (a list that
// holds one shared list twice, nested 40 deep, prints 2^40 items), and the interpreter and the
// filters refuse any string longer, naming it. Repr prints a list or dict that holds itself as
// Python does ([...] / {...}); ToJson refuses it (Python: "Circular reference detected").
inline constexpr size_t kMaxTextBytes = size_t{16} << 20;
// And their lists this many items (a string split or listed into characters, lists added).
inline constexpr size_t kMaxListItems = 1'000'000;

// Whether an integer-valued double converts to int64 (false for NaN and out of range, where
// the conversion is undefined).
inline bool FitsInt64(double v) { return v >= -9223372036854775808.0 && v < 9223372036854775808.0; }

}  // namespace graft::jinja

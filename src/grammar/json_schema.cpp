#include "grammar/json_schema.h"

#include <fmt/core.h>

#include <map>
#include <set>

namespace graft {
namespace {

using json = nlohmann::ordered_json;
using E = GrammarElement;

constexpr int kMaxItemsUnrolled = 256;  // minItems / maxItems / minLength / maxLength bounds written out
constexpr int kMaxDepth = 64;           // schema nesting

class Builder {
 public:
  explicit Builder(const json* root) : root_(root) {
    ws_ = g_.Repeat(Grammar::Set(" \t\n\r"), 0, kMaxWhitespace);
    const int hex = g_.Sequence({Grammar::Union(Grammar::Union(Grammar::Range('0', '9'), Grammar::Range('a', 'f')),
                                                Grammar::Range('A', 'F'))});
    const int escape = g_.NewRule();
    g_.AddAlternative(escape, {Grammar::Set("\"\\/bfnrt")});
    g_.AddAlternative(escape, {Grammar::Byte('u'), R(hex), R(hex), R(hex), R(hex)});
    char_ = g_.NewRule();
    std::string forbidden = "\"\\";
    for (int c = 0; c < 0x20; ++c) forbidden.push_back(static_cast<char>(c));
    g_.AddAlternative(char_, {Grammar::Set(forbidden, /*negate=*/true)});
    g_.AddAlternative(char_, {Grammar::Byte('\\'), R(escape)});
    string_ = g_.Sequence({Grammar::Byte('"'), R(g_.Star(R(char_))), Grammar::Byte('"')});
    const int digits = g_.Plus(Grammar::Range('0', '9'));
    const int natural = g_.NewRule();
    g_.AddAlternative(natural, {Grammar::Byte('0')});
    g_.AddAlternative(natural, {Grammar::Range('1', '9'), R(g_.Star(Grammar::Range('0', '9')))});
    integer_ = g_.Sequence({R(g_.Optional(Grammar::Byte('-'))), R(natural)});
    const int frac = g_.Optional(R(g_.Sequence({Grammar::Byte('.'), R(digits)})));
    const int exp = g_.Optional(R(g_.Sequence({Grammar::Set("eE"), R(g_.Optional(Grammar::Set("+-"))), R(digits)})));
    number_ = g_.Sequence({R(integer_), R(frac), R(exp)});
    boolean_ = g_.Choice({g_.Literal("true"), g_.Literal("false")});
    null_ = g_.Literal("null");
    // Any JSON value: value ::= object | array | string | number | true | false | null.
    any_ = g_.NewRule();
    g_.AddAlternative(any_, {R(string_)});
    g_.AddAlternative(any_, {R(number_)});
    g_.AddAlternative(any_, {R(boolean_)});
    g_.AddAlternative(any_, {R(null_)});
    g_.AddAlternative(any_, {R(MapOf(any_))});
    g_.AddAlternative(any_, {R(ArrayOf(any_, 0, -1))});
  }

  // Whole text: optional whitespace, the value, optional whitespace.
  std::shared_ptr<const Grammar> Finish(int value) {
    g_.set_root(g_.Sequence({R(ws_), R(value), R(ws_)}));
    return std::make_shared<const Grammar>(std::move(g_));
  }

  int any_object() { return MapOf(any_); }
  Grammar& grammar() { return g_; }
  int ws() const { return ws_; }
  // The document $ref points into, for the schemas compiled next.
  void SetDocument(const json* root) {
    root_ = root;
    refs_.clear();
  }
  std::shared_ptr<const Grammar> FinishRoot(int root) {
    g_.set_root(root);
    return std::make_shared<const Grammar>(std::move(g_));
  }

  // A schema, or null too where it says "nullable": true (OpenAPI's spelling, which zod writes).
  Result<int> Schema(const json& s, const std::string& path, int depth) {
    GRAFT_ASSIGN_OR_RETURN(int r, NonNull(s, path, depth));
    if (s.is_object()) {
      if (auto n = s.find("nullable"); n != s.end()) {
        if (!n->is_boolean()) return Bad(path + "/nullable", "must be true or false");
        if (n->get<bool>()) return g_.Choice({r, null_});
      }
    }
    return r;
  }

 private:
  Result<int> NonNull(const json& s, const std::string& path, int depth) {
    if (depth > kMaxDepth) return Bad(path, fmt::format("nests deeper than {} schemas", kMaxDepth));
    if (s.is_boolean()) {
      if (!s.get<bool>()) return Bad(path, "is `false`: no value satisfies it");
      return any_;
    }
    if (!s.is_object()) return Bad(path, "is not a schema (an object or a boolean)");
    static const std::set<std::string> kAnnotations = {
        "title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated",
        "readOnly", "writeOnly", "$defs", "definitions"};
    static const std::set<std::string> kKnown = {"type", "properties", "required", "additionalProperties", "items",
                                                 "minItems", "maxItems", "enum", "const", "anyOf", "oneOf", "allOf",
                                                 "$ref", "minLength", "maxLength", "nullable"};
    for (const auto& [k, v] : s.items()) {
      if (!kAnnotations.count(k) && !kKnown.count(k)) {
        return Bad(path, fmt::format("uses '{}', which graft's structured output cannot guarantee", k));
      }
    }
    if (auto r = s.find("$ref"); r != s.end()) {
      if (s.size() > 1 && HasConstraint(s, "$ref")) return Bad(path, "combines $ref with other keywords");
      return Ref(*r, path, depth);
    }
    if (auto c = s.find("const"); c != s.end()) return g_.Literal(c->dump());
    if (auto e = s.find("enum"); e != s.end()) {
      if (!e->is_array() || e->empty()) return Bad(path + "/enum", "must be a non-empty array");
      std::vector<int> alts;
      for (const auto& v : *e) alts.push_back(g_.Literal(v.dump()));
      return g_.Choice(alts);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (auto a = s.find(key); a != s.end()) {
        if (!a->is_array() || a->empty()) return Bad(path + "/" + key, "must be a non-empty array");
        std::vector<int> alts;
        for (size_t i = 0; i < a->size(); ++i) {
          GRAFT_ASSIGN_OR_RETURN(int r, Schema((*a)[i], fmt::format("{}/{}/{}", path, key, i), depth + 1));
          alts.push_back(r);
        }
        return g_.Choice(alts);
      }
    }
    if (auto a = s.find("allOf"); a != s.end()) {
      if (!a->is_array() || a->size() != 1) return Bad(path + "/allOf", "is supported with exactly one schema");
      return Schema((*a)[0], path + "/allOf/0", depth + 1);
    }
    std::vector<std::string> types;
    if (auto t = s.find("type"); t != s.end()) {
      if (t->is_string()) types.push_back(t->get<std::string>());
      else if (t->is_array() && !t->empty()) {
        for (const auto& x : *t) {
          if (!x.is_string()) return Bad(path + "/type", "must be a string or an array of strings");
          types.push_back(x.get<std::string>());
        }
      } else {
        return Bad(path + "/type", "must be a string or an array of strings");
      }
    } else if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required")) {
      types.push_back("object");
    } else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) {
      types.push_back("array");
    } else if (s.contains("minLength") || s.contains("maxLength")) {
      types.push_back("string");
    } else {
      return any_;
    }
    std::vector<int> alts;
    for (const std::string& t : types) {
      GRAFT_ASSIGN_OR_RETURN(int r, Typed(t, s, path, depth));
      alts.push_back(r);
    }
    return alts.size() == 1 ? alts[0] : g_.Choice(alts);
  }

  static E R(int rule) { return Grammar::Ref(rule); }
  static Status Bad(const std::string& path, const std::string& what) {
    return InvalidArgument(fmt::format("json_schema: the schema at '{}' {}", path.empty() ? "#" : path, what));
  }
  static bool HasConstraint(const json& s, const char* except) {
    for (const auto& [k, v] : s.items()) {
      if (k != except && k != "nullable" && k != "title" && k != "description" && k != "$defs" && k != "definitions" && k != "$schema" &&
          k != "$comment" && k != "default" && k != "examples")
        return true;
    }
    return false;
  }

  Result<int> Typed(const std::string& t, const json& s, const std::string& path, int depth) {
    if (t == "string") return String(s, path);
    if (t == "integer") return integer_;
    if (t == "number") return number_;
    if (t == "boolean") return boolean_;
    if (t == "null") return null_;
    if (t == "object") return Object(s, path, depth);
    if (t == "array") return Array(s, path, depth);
    return Bad(path + "/type", fmt::format("names the unknown type '{}'", t));
  }

  Result<int> Bound(const json& s, const char* key, const std::string& path, int* out) {
    auto it = s.find(key);
    if (it == s.end()) return 0;
    if (!it->is_number_integer() || it->get<int64_t>() < 0) return Bad(path + "/" + key, "must be a non-negative integer");
    if (it->get<int64_t>() > kMaxItemsUnrolled) {
      return Bad(path + "/" + key, fmt::format("is over {}, the largest bound graft writes out", kMaxItemsUnrolled));
    }
    *out = static_cast<int>(it->get<int64_t>());
    return 1;
  }

  Result<int> String(const json& s, const std::string& path) {
    int lo = 0, hi = -1;
    GRAFT_ASSIGN_OR_RETURN(int has_lo, Bound(s, "minLength", path, &lo));
    GRAFT_ASSIGN_OR_RETURN(int has_hi, Bound(s, "maxLength", path, &hi));
    if (!has_lo && !has_hi) return string_;
    if (has_hi && hi < lo) return Bad(path, "has maxLength below minLength");
    const int body = has_hi ? g_.Repeat(R(char_), lo, hi)
                            : g_.Sequence({R(g_.Repeat(R(char_), lo, lo)), R(g_.Star(R(char_)))});
    return g_.Sequence({Grammar::Byte('"'), R(body), Grammar::Byte('"')});
  }

  Result<int> Object(const json& s, const std::string& path, int depth) {
    auto props = s.find("properties");
    std::set<std::string> required;
    if (auto r = s.find("required"); r != s.end()) {
      if (!r->is_array()) return Bad(path + "/required", "must be an array of names");
      for (const auto& n : *r) {
        if (!n.is_string()) return Bad(path + "/required", "must be an array of names");
        required.insert(n.get<std::string>());
      }
    }
    if (props == s.end() || (props->is_object() && props->empty())) {
      if (!required.empty()) return Bad(path + "/required", "names properties the schema does not describe");
      auto ap = s.find("additionalProperties");
      if (ap != s.end() && ap->is_boolean() && !ap->get<bool>()) return g_.Literal("{}");
      if (ap == s.end() || ap->is_boolean()) return MapOf(any_);
      GRAFT_ASSIGN_OR_RETURN(int v, Schema(*ap, path + "/additionalProperties", depth + 1));
      return MapOf(v);
    }
    if (!props->is_object()) return Bad(path + "/properties", "must be an object");
    struct Prop {
      int kv;  // ws "name" ws ":" ws value ws
      bool required;
    };
    std::vector<Prop> list;
    for (const auto& [name, sub] : props->items()) {
      GRAFT_ASSIGN_OR_RETURN(int v, Schema(sub, path + "/properties/" + name, depth + 1));
      const int key = g_.Literal(json(name).dump());
      list.push_back({g_.Sequence({R(ws_), R(key), R(ws_), Grammar::Byte(':'), R(ws_), R(v), R(ws_)}), required.count(name) > 0});
      required.erase(name);
    }
    if (!required.empty()) {
      return Bad(path + "/required", fmt::format("names '{}', which properties does not describe", *required.begin()));
    }
    // head[i]: properties i.. with none written yet; tail[i]: properties i.. after one was (each
    // written one then follows a comma). A required property cannot be skipped.
    const size_t n = list.size();
    std::vector<int> head(n + 1), tail(n + 1);
    head[n] = g_.Sequence({});
    tail[n] = head[n];
    for (size_t k = n; k-- > 0;) {
      tail[k] = g_.NewRule();
      g_.AddAlternative(tail[k], {Grammar::Byte(','), R(list[k].kv), R(tail[k + 1])});
      if (!list[k].required) g_.AddAlternative(tail[k], {R(tail[k + 1])});
      head[k] = g_.NewRule();
      g_.AddAlternative(head[k], {R(list[k].kv), R(tail[k + 1])});
      if (!list[k].required) g_.AddAlternative(head[k], {R(head[k + 1])});
    }
    return g_.Sequence({Grammar::Byte('{'), R(OpenBraces(head[0], list)), Grammar::Byte('}')});
  }

  // "{" then either properties (each with its own surrounding whitespace) or, when all of them
  // may be left out, just whitespace.
  template <typename List>
  int OpenBraces(int head0, const List& list) {
    bool all_optional = true;
    for (const auto& p : list) all_optional = all_optional && !p.required;
    if (!all_optional) return head0;
    // head0 already matches the empty string (every property skipped); add the whitespace form.
    return g_.Choice({head0, ws_});
  }

  Result<int> Array(const json& s, const std::string& path, int depth) {
    int item = any_;
    if (auto it = s.find("items"); it != s.end()) {
      GRAFT_ASSIGN_OR_RETURN(item, Schema(*it, path + "/items", depth + 1));
    }
    int lo = 0, hi = -1;
    GRAFT_ASSIGN_OR_RETURN(int has_lo, Bound(s, "minItems", path, &lo));
    GRAFT_ASSIGN_OR_RETURN(int has_hi, Bound(s, "maxItems", path, &hi));
    (void)has_lo;
    if (has_hi && hi < lo) return Bad(path, "has maxItems below minItems");
    return ArrayOf(item, lo, has_hi ? hi : -1);
  }

  // "[" ws (item ws ("," ws item ws)*)? "]", with lo..hi items (hi < 0: no upper bound).
  int ArrayOf(int item, int lo, int hi) {
    const int elem = g_.Sequence({R(item), R(ws_)});
    const int more = g_.Sequence({Grammar::Byte(','), R(ws_), R(elem)});
    if (hi == 0) return g_.Sequence({Grammar::Byte('['), R(ws_), Grammar::Byte(']')});
    int rest;  // items after the first
    if (hi < 0) {
      rest = g_.Sequence({R(g_.Repeat(R(more), std::max(lo - 1, 0), std::max(lo - 1, 0))), R(g_.Star(R(more)))});
    } else {
      rest = g_.Repeat(R(more), std::max(lo - 1, 0), hi - 1);
    }
    const int some = g_.Sequence({R(elem), R(rest)});
    const int inner = lo > 0 ? some : g_.Optional(R(some));
    return g_.Sequence({Grammar::Byte('['), R(ws_), R(inner), Grammar::Byte(']')});
  }

  // "{" ws (member ("," ws member)*)? "}" with member: string ws ":" ws value ws.
  int MapOf(int value) {
    const int member = g_.Sequence({R(string_), R(ws_), Grammar::Byte(':'), R(ws_), R(value), R(ws_)});
    const int more = g_.Sequence({Grammar::Byte(','), R(ws_), R(member)});
    const int some = g_.Sequence({R(member), R(g_.Star(R(more)))});
    return g_.Sequence({Grammar::Byte('{'), R(ws_), R(g_.Optional(R(some))), Grammar::Byte('}')});
  }

  Result<int> Ref(const json& ref, const std::string& path, int depth) {
    if (!ref.is_string()) return Bad(path + "/$ref", "must be a string");
    const std::string r = ref.get<std::string>();
    if (auto it = refs_.find(r); it != refs_.end()) return it->second;
    if (r.empty() || r[0] != '#') return Bad(path + "/$ref", fmt::format("'{}' points outside the document", r));
    const json* target = root_;
    try {
      if (r.size() > 1) target = &root_->at(json::json_pointer(r.substr(1)));
    } catch (const json::exception&) {
      return Bad(path + "/$ref", fmt::format("'{}' points at nothing in the document", r));
    }
    const int rule = g_.NewRule();  // before compiling the target, so that it may refer back
    refs_[r] = rule;
    GRAFT_ASSIGN_OR_RETURN(int body, Schema(*target, r, depth + 1));
    g_.AddAlternative(rule, {R(body)});
    return rule;
  }

  const json* root_;
  Grammar g_;
  std::map<std::string, int> refs_;
  int ws_, char_, string_, integer_, number_, boolean_, null_, any_;
};

}  // namespace

Result<std::shared_ptr<const Grammar>> JsonSchemaGrammar(const json& schema) {
  Builder b(&schema);
  GRAFT_ASSIGN_OR_RETURN(int value, b.Schema(schema, "", 0));
  return b.Finish(value);
}

std::shared_ptr<const Grammar> JsonObjectGrammar() {
  Builder b(nullptr);
  const int obj = b.any_object();
  return b.Finish(obj);
}

Result<std::shared_ptr<const Grammar>> ToolCallGrammar(const std::vector<ToolSpec>& tools, bool several) {
  if (tools.empty()) return InvalidArgument("tool_choice: the request lists no tools");
  Builder b(nullptr);
  Grammar& g = b.grammar();
  std::vector<int> calls;
  for (const ToolSpec& t : tools) {
    int args = b.any_object();
    if (!t.parameters.is_null()) {
      b.SetDocument(&t.parameters);
      auto r = b.Schema(t.parameters, "", 0);
      if (!r.ok()) return InvalidArgument(fmt::format("tools: function '{}': {}", t.name, r.status().message()));
      args = *r;
    }
    const std::string head = "<tool_call>\n{\"name\": " + json(t.name).dump() + ", \"arguments\": ";
    calls.push_back(g.Sequence({Grammar::Ref(g.Literal(head)), Grammar::Ref(args), Grammar::Ref(g.Literal("}\n</tool_call>"))}));
  }
  const int call = g.Choice(calls);
  if (!several) return b.FinishRoot(call);
  const int next = g.Sequence({Grammar::Byte('\n'), Grammar::Ref(call)});
  return b.FinishRoot(g.Sequence({Grammar::Ref(call), Grammar::Ref(g.Star(Grammar::Ref(next)))}));
}

Result<std::shared_ptr<const Grammar>> ChoiceGrammar(const std::vector<std::string>& choices) {
  if (choices.empty()) return InvalidArgument("guided_choice: needs at least one choice");
  Grammar g;
  std::vector<int> alts;
  for (const std::string& c : choices) {
    if (c.empty()) return InvalidArgument("guided_choice: a choice is empty");
    alts.push_back(g.Literal(c));
  }
  g.set_root(g.Choice(alts));
  return std::shared_ptr<const Grammar>(std::make_shared<const Grammar>(std::move(g)));
}

}  // namespace graft

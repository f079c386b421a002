#include "template/interpreter.h"

#include <fmt/core.h>

#include <charconv>
#include <cmath>
#include <ctime>
#include <memory>
#include <optional>

#include "template/builtins.h"
#include "template/format.h"

namespace graft::jinja {
namespace {

enum class Flow { kNormal, kBreak, kContinue };

constexpr size_t kMaxMacroDepth = 64;
// A render's work budget, in steps: a loop iteration, a macro call, or 512 bytes of text a
// filter, method, operator or output made. Loops and calls are the two ways a template repeats
// work (a macro calling itself twice, 60 deep, is 2^60 calls with no loop at all), and text is
// what each repetition can double (x = x ~ x). Real chat templates take a few steps a message and
// one a 512 bytes of what they print (a 1 MB record through a few filters: ~10,000); range()
// alone stops at kMaxSteps items.
constexpr int64_t kMaxSteps = 100'000;
constexpr int64_t kTextBytesAStep = 512;
constexpr size_t kMaxOutputBytes = size_t{64} << 20;

// An integer-valued double as an int when int64 holds it, else as the float it is.
Value IntIfExact(double v) {
  if (FitsInt64(v)) return Value(static_cast<int64_t>(v));
  return Value(v);
}

class Interpreter {
 public:
  explicit Interpreter(const Dict& globals) { frames_.push_back(globals); }

  Status Exec(const Body& body, std::string& out, Flow* flow) {
    for (const auto& s : body) {
      GRAFT_RETURN_IF_ERROR(ExecOne(*s, out, flow));
      if (*flow != Flow::kNormal) return Status::Ok();
    }
    return Status::Ok();
  }

 private:
  Status Err(int line, const std::string& m) const { return InvalidArgument(fmt::format("line {}: {}", line, m)); }

  Value Lookup(const std::string& name) const {
    for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
      if (const Value* v = it->Find(name)) return *v;
    }
    return Value();
  }
  void Assign(const std::string& name, Value v) { frames_.back().Set(name, std::move(v)); }

  Status ExecOne(const Stmt& s, std::string& out, Flow* flow) {
    switch (s.kind) {
      case Stmt::Kind::kText:
        out += s.text;
        return Status::Ok();
      case Stmt::Kind::kOutput: {
        GRAFT_ASSIGN_OR_RETURN(Value v, Eval(*s.expr));
        return Emit(v, s.line, out);
      }
      case Stmt::Kind::kIf:
        for (const auto& [cond, body] : s.branches) {
          bool take = true;
          if (cond) {
            GRAFT_ASSIGN_OR_RETURN(Value c, Eval(*cond));
            take = c.Truthy();
          }
          if (take) return Exec(body, out, flow);
        }
        return Status::Ok();
      case Stmt::Kind::kFor: return ExecFor(s, out, flow);
      case Stmt::Kind::kSet: {
        GRAFT_ASSIGN_OR_RETURN(Value v, Eval(*s.expr));
        if (!s.attr_of.empty()) {
          Value ns = Lookup(s.attr_of);
          if (ns.kind() != Value::Kind::kNamespace) {
            return Err(s.line, fmt::format("cannot set '{}.{}': '{}' is not a namespace", s.attr_of, s.targets[0], s.attr_of));
          }
          ns.as_dict().Set(s.targets[0], std::move(v));
          return Status::Ok();
        }
        if (s.targets.size() == 1) {
          Assign(s.targets[0], std::move(v));
          return Status::Ok();
        }
        if (!v.is_list() || v.as_list().size() != s.targets.size()) {
          return Err(s.line, fmt::format("cannot unpack a {} into {} names", v.TypeName(), s.targets.size()));
        }
        for (size_t i = 0; i < s.targets.size(); ++i) Assign(s.targets[i], v.as_list()[i]);
        return Status::Ok();
      }
      case Stmt::Kind::kSetBlock: {
        std::string captured;
        Flow f = Flow::kNormal;
        GRAFT_RETURN_IF_ERROR(Exec(s.body, captured, &f));
        Assign(s.targets[0], Value(captured));
        return Status::Ok();
      }
      case Stmt::Kind::kMacro: {
        const Stmt* def = &s;
        Callable c;
        c.name = s.name;
        c.fn = [this, def](const List& args, const Dict& kwargs) -> Result<Value> { return CallMacro(*def, args, kwargs); };
        Assign(s.name, Value(std::move(c)));
        return Status::Ok();
      }
      case Stmt::Kind::kBreak:
        *flow = Flow::kBreak;
        return Status::Ok();
      case Stmt::Kind::kContinue:
        *flow = Flow::kContinue;
        return Status::Ok();
      case Stmt::Kind::kGeneration: return Exec(s.body, out, flow);
      case Stmt::Kind::kFilterBlock: {
        std::string captured;
        GRAFT_RETURN_IF_ERROR(Exec(s.body, captured, flow));
        Value v(std::move(captured));
        for (const ExprPtr& f : s.filters) {
          GRAFT_ASSIGN_OR_RETURN(v, Filtered(*f, v));
        }
        return Emit(v, s.line, out);
      }
      case Stmt::Kind::kWith: {
        // The values are computed in the enclosing scope (Jinja's: {% with a = 1, b = a %} reads
        // the outer a), then bound in a scope of the body's own.
        Dict scope;
        for (const auto& [name, e] : s.params) {
          GRAFT_ASSIGN_OR_RETURN(Value v, Eval(*e));
          scope.Set(name, std::move(v));
        }
        frames_.push_back(std::move(scope));
        const Status st = Exec(s.body, out, flow);
        frames_.pop_back();
        return st;
      }
    }
    return Status::Ok();
  }

  Result<Value> CallMacro(const Stmt& def, const List& args, const Dict& kwargs) {
    GRAFT_RETURN_IF_ERROR(Step(def.line));
    // A macro that calls itself without end would overflow the stack: calls nest 64 deep at most.
    if (frames_.size() > kMaxMacroDepth) {
      return Err(def.line, fmt::format("macro '{}': calls nested deeper than {}", def.name, kMaxMacroDepth));
    }
    if (args.size() > def.params.size()) {
      return Err(def.line, fmt::format("macro '{}' takes {} arguments, {} given", def.name, def.params.size(), args.size()));
    }
    Dict frame;
    for (size_t i = 0; i < def.params.size(); ++i) {
      const auto& [pname, pdef] = def.params[i];
      if (i < args.size()) frame.Set(pname, args[i]);
      else if (const Value* kv = kwargs.Find(pname)) frame.Set(pname, *kv);
      else if (pdef) {
        GRAFT_ASSIGN_OR_RETURN(Value d, Eval(*pdef));
        frame.Set(pname, std::move(d));
      } else {
        frame.Set(pname, Value());
      }
    }
    frames_.push_back(std::move(frame));
    std::string out;
    Flow f = Flow::kNormal;
    Status st = Exec(def.body, out, &f);
    frames_.pop_back();
    GRAFT_RETURN_IF_ERROR(st);
    return Value(out);
  }

  // A render's work is bounded: a template (a file from the checkpoint) whose loops nest
  // range(100000) two deep, or whose macros call themselves twice each, would otherwise hold the
  // request — and the thread — for hours.
  Status Step(int line, int64_t steps = 1) {
    steps_ += steps;
    if (steps_ > kMaxSteps) return Err(line, BudgetMessage());
    return Status::Ok();
  }
  static std::string BudgetMessage() {
    return fmt::format("the template took more than {} steps (a step: a loop iteration, a macro call or {} bytes of "
                       "text made)",
                       kMaxSteps, kTextBytesAStep);
  }
  // Text an operator, filter, method, call or output made: within kMaxTextBytes (value.h; else
  // a named error calling it `what`), and paid for in steps.
  Status Made(const std::string& text, const char* what, int line) {
    if (text.size() > kMaxTextBytes) return Err(line, fmt::format("{} of more than {} bytes", what, kMaxTextBytes));
    return Step(line, static_cast<int64_t>(text.size()) / kTextBytesAStep);
  }
  // A value a filter, method, macro or function returned: within the text and list bounds
  // (value.h), or a named error.
  Status Sized(const Value& v, int line) {
    if (v.is_string()) return Made(v.as_string(), "a string", line);
    if (v.is_list() && v.as_list().size() > kMaxListItems) {
      return Err(line, fmt::format("a list of more than {} items", kMaxListItems));
    }
    return Status::Ok();
  }
  // {{ v }}: its text, paid for, onto the output (bounded by kMaxOutputBytes).
  Status Emit(const Value& v, int line, std::string& out) {
    const std::string text = v.Str();
    GRAFT_RETURN_IF_ERROR(Made(text, "a value", line));
    out += text;
    return OutputFits(out, line);
  }
  Status OutputFits(const std::string& out, int line) {
    if (out.size() > kMaxOutputBytes) return Err(line, fmt::format("the template's output passed {} bytes", kMaxOutputBytes));
    return Status::Ok();
  }
  Status Budget(int line, const std::string& out) {
    GRAFT_RETURN_IF_ERROR(Step(line));
    return OutputFits(out, line);
  }
  // Filter node f (its name and arguments) applied to v: a `value | f(...)` or a filter block's.
  Result<Value> Filtered(const Expr& f, const Value& v) {
    Dict kwargs;
    GRAFT_ASSIGN_OR_RETURN(List args, EvalArgs(f, &kwargs));
    Result<Value> r = ApplyFilter(f.name, v, args, kwargs);
    if (!r.ok()) return r.status().WithContext(fmt::format("line {}", f.line));
    GRAFT_RETURN_IF_ERROR(Sized(*r, f.line));
    return r;
  }

  Status ExecFor(const Stmt& s, std::string& out, Flow* outer_flow) {
    GRAFT_ASSIGN_OR_RETURN(Value it, Eval(*s.expr));
    List items;
    if (it.is_list()) items = it.as_list();
    else if (it.is_dict()) for (const auto& [k, v] : it.as_dict().items) items.emplace_back(k);
    else if (it.is_string()) {
      if (static_cast<int64_t>(it.as_string().size()) > kMaxSteps) {  // the loop could not finish anyway
        return Err(s.line, BudgetMessage());
      }
      for (char c : it.as_string()) items.emplace_back(std::string(1, c));
    }
    else if (!it.is_undefined() && !it.is_none()) return Err(s.line, fmt::format("cannot loop over a {}", it.TypeName()));
    frames_.emplace_back();
    // "for x in y if cond": filter first, so loop.* counts the kept items.
    if (s.filter) {
      List kept;
      for (const auto& item : items) {
        if (Status b = Budget(s.line, out); !b.ok()) {
          frames_.pop_back();
          return b;
        }
        BindTargets(s, item);
        Result<Value> c = Eval(*s.filter);
        if (!c.ok()) {
          frames_.pop_back();
          return c.status();
        }
        if (c->Truthy()) kept.push_back(item);
      }
      items.swap(kept);
    }
    Status st;
    const int64_t n = static_cast<int64_t>(items.size());
    // loop.changed(*values): whether its values differ from its last call's in this loop (one
    // function for the loop, not one an iteration).
    auto last_changed = std::make_shared<std::optional<List>>();
    const Value changed(Callable{"loop.changed", [last_changed](const List& args, const Dict&) -> Result<Value> {
      const bool differs = !last_changed->has_value() || !Equal(Value(**last_changed), Value(args));
      *last_changed = args;
      return Value(differs);
    }});
    for (int64_t i = 0; i < n && st.ok(); ++i) {
      if (st = Budget(s.line, out); !st.ok()) break;
      Dict loop;
      loop.Set("index", Value(i + 1));
      loop.Set("index0", Value(i));
      loop.Set("revindex", Value(n - i));
      loop.Set("revindex0", Value(n - i - 1));
      loop.Set("first", Value(i == 0));
      loop.Set("last", Value(i == n - 1));
      loop.Set("length", Value(n));
      loop.Set("previtem", i > 0 ? items[i - 1] : Value());
      loop.Set("nextitem", i + 1 < n ? items[i + 1] : Value());
      loop.Set("cycle", Value(Callable{"loop.cycle", [i](const List& args, const Dict&) -> Result<Value> {
                          if (args.empty()) return InvalidArgument("loop.cycle needs at least one value");
                          return args[static_cast<size_t>(i) % args.size()];
                        }}));
      loop.Set("changed", changed);
      frames_.back().Set("loop", Value(std::move(loop)));
      BindTargets(s, items[i]);
      Flow f = Flow::kNormal;
      st = Exec(s.body, out, &f);
      if (f == Flow::kBreak) break;
    }
    frames_.pop_back();
    GRAFT_RETURN_IF_ERROR(st);
    if (n == 0 && !s.else_body.empty()) return Exec(s.else_body, out, outer_flow);
    return Status::Ok();
  }

  void BindTargets(const Stmt& s, const Value& item) {
    if (s.targets.size() == 1) {
      frames_.back().Set(s.targets[0], item);
      return;
    }
    for (size_t k = 0; k < s.targets.size(); ++k) {
      frames_.back().Set(s.targets[k], item.is_list() && k < item.as_list().size() ? item.as_list()[k] : Value());
    }
  }

  Result<List> EvalArgs(const Expr& e, Dict* kwargs) {
    List args;
    for (const auto& a : e.args) {
      GRAFT_ASSIGN_OR_RETURN(Value v, Eval(*a));
      args.push_back(std::move(v));
    }
    for (const auto& [k, a] : e.kwargs) {
      GRAFT_ASSIGN_OR_RETURN(Value v, Eval(*a));
      kwargs->Set(k, std::move(v));
    }
    return args;
  }

  static Result<Value> Index(const Value& obj, const Value& key, int line) {
    if (obj.is_list() && key.kind() == Value::Kind::kInt) {
      const int64_t n = static_cast<int64_t>(obj.as_list().size());
      int64_t i = key.as_int();
      if (i < 0) i += n;
      return i >= 0 && i < n ? obj.as_list()[i] : Value();
    }
    if (obj.is_string() && key.kind() == Value::Kind::kInt) {
      const int64_t n = static_cast<int64_t>(obj.as_string().size());
      int64_t i = key.as_int();
      if (i < 0) i += n;
      return i >= 0 && i < n ? Value(std::string(1, obj.as_string()[i])) : Value();
    }
    if (obj.is_dict() && key.is_string()) {
      const Value* v = obj.as_dict().Find(key.as_string());
      return v ? *v : Value();
    }
    if (obj.is_undefined() || obj.is_none() || obj.is_dict() || obj.is_list()) return Value();
    (void)line;
    return Value();
  }

  static Value Slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
    const int64_t n = obj.is_list() ? static_cast<int64_t>(obj.as_list().size())
                                    : static_cast<int64_t>(obj.as_string().size());
    const int64_t st = step.is_int() ? step.as_int() : 1;
    auto norm = [&](const Value& v, int64_t def) {
      if (!v.is_int()) return def;
      int64_t i = v.as_int();
      if (i < 0) i += n;
      return st > 0 ? std::clamp<int64_t>(i, 0, n) : std::clamp<int64_t>(i, -1, n - 1);
    };
    const int64_t b = norm(start, st > 0 ? 0 : n - 1), e = norm(stop, st > 0 ? n : -1);
    List l;
    std::string s;
    for (int64_t i = b; st > 0 ? i < e : i > e; i += st) {
      if (obj.is_list()) l.push_back(obj.as_list()[i]);
      else s += obj.as_string()[i];
    }
    return obj.is_tuple() ? Value::Tuple(std::move(l)) : obj.is_list() ? Value(std::move(l)) : Value(s);
  }

  Result<Value> Arith(const std::string& op, const Value& a, const Value& b, int line) {
    const bool strings = op == "~" || (op == "+" && a.is_string() && b.is_string());
    if (strings) {
      std::string x = a.Str(), y = b.Str();
      if (x.size() + y.size() > kMaxTextBytes) {
        return Err(line, fmt::format("'{}' would make a string of more than {} bytes", op, kMaxTextBytes));
      }
      Value r(x + y);
      GRAFT_RETURN_IF_ERROR(Made(r.as_string(), "a string", line));
      return r;
    }
    if (op == "+") {
      if (a.is_list() && b.is_list()) {
        if (a.is_tuple() != b.is_tuple()) {  // Python adds lists to lists and tuples to tuples only
          return Err(line, fmt::format("unsupported operands for '+': {} and {}", a.TypeName(), b.TypeName()));
        }
        if (a.as_list().size() + b.as_list().size() > kMaxListItems) {
          return Err(line, fmt::format("'+' would make a list of more than {} items", kMaxListItems));
        }
        List l = a.as_list();
        l.insert(l.end(), b.as_list().begin(), b.as_list().end());
        return a.is_tuple() ? Value::Tuple(std::move(l)) : Value(std::move(l));
      }
    }
    if (op == "%" && a.is_string()) {  // Python's printf-style formatting (format.h)
      Result<std::string> r = PercentFormat(a.as_string(), b);
      if (!r.ok()) return r.status().WithContext(fmt::format("line {}", line));
      return Value(std::move(r).value());
    }
    if (op == "*" && (a.is_int() ? b.is_string() || b.is_list() : (a.is_string() || a.is_list()) && b.is_int())) {
      return Repeat(a.is_int() ? b : a, a.is_int() ? a.as_int() : b.as_int(), line);
    }
    if (!a.is_number() || !b.is_number()) {
      return Err(line, fmt::format("unsupported operands for '{}': {} and {}", op, a.TypeName(), b.TypeName()));
    }
    const bool ints = a.kind() == Value::Kind::kInt && b.kind() == Value::Kind::kInt;
    const double x = a.as_double(), y = b.as_double();
    // Integer results that leave int64 become floats (as the JavaScript reference's numbers
    // do) rather than overflow, which C++ leaves undefined.
    int64_t r = 0;
    if (op == "+") return ints && !__builtin_add_overflow(a.as_int(), b.as_int(), &r) ? Value(r) : Value(x + y);
    if (op == "-") return ints && !__builtin_sub_overflow(a.as_int(), b.as_int(), &r) ? Value(r) : Value(x - y);
    if (op == "*") return ints && !__builtin_mul_overflow(a.as_int(), b.as_int(), &r) ? Value(r) : Value(x * y);
    if (y == 0 && (op == "/" || op == "//" || op == "%")) return Err(line, "division by zero");
    if (op == "/") return Value(x / y);
    if (op == "//") return ints ? IntIfExact(std::floor(x / y)) : Value(std::floor(x / y));
    if (op == "%") {
      if (ints) {  // Python's sign: the divisor's
        const int64_t d = b.as_int();
        int64_t m = d == -1 ? 0 : a.as_int() % d;
        if (m != 0 && (m < 0) != (d < 0)) m += d;
        return Value(m);
      }
      return Value(x - std::floor(x / y) * y);
    }
    if (op == "**") return ints && b.as_int() >= 0 ? IntIfExact(std::pow(x, y)) : Value(std::pow(x, y));
    return Err(line, "unknown operator " + op);
  }

  // Python's sequence repetition (a string or list times an int; none at n <= 0), bounded as '~'
  // and '+' are.
  Result<Value> Repeat(const Value& seq, int64_t n, int line) {
    const size_t unit = seq.is_string() ? seq.as_string().size() : seq.as_list().size();
    if (n <= 0 || unit == 0) return seq.is_string() ? Value(std::string()) : seq.is_tuple() ? Value::Tuple({}) : Value(List{});
    const size_t bound = seq.is_string() ? kMaxTextBytes : kMaxListItems;
    if (static_cast<uint64_t>(n) > bound / unit) {
      return Err(line, seq.is_string() ? fmt::format("'*' would make a string of more than {} bytes", kMaxTextBytes)
                                       : fmt::format("'*' would make a list of more than {} items", kMaxListItems));
    }
    if (seq.is_string()) {
      std::string r;
      r.reserve(unit * static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) r += seq.as_string();
      Value v(std::move(r));
      GRAFT_RETURN_IF_ERROR(Made(v.as_string(), "a string", line));
      return v;
    }
    List r;
    r.reserve(unit * static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) r.insert(r.end(), seq.as_list().begin(), seq.as_list().end());
    return seq.is_tuple() ? Value::Tuple(std::move(r)) : Value(std::move(r));
  }

  // Python's ordering: numbers (bools as 0 / 1) by value, strings by code point, lists with
  // lists and tuples with tuples item by item (the first unequal pair decides, then the
  // length); nullopt where Python raises TypeError.
  static std::optional<int> Order(const Value& a, const Value& b, int depth) {
    const auto num = [](const Value& v) { return v.kind() == Value::Kind::kBool ? (v.as_bool() ? 1.0 : 0.0) : v.as_double(); };
    const auto numeric = [](const Value& v) { return v.is_number() || v.kind() == Value::Kind::kBool; };
    if (numeric(a) && numeric(b)) return num(a) < num(b) ? -1 : num(a) > num(b) ? 1 : 0;
    if (a.is_string() && b.is_string()) {
      const int c = a.as_string().compare(b.as_string());
      return c < 0 ? -1 : c > 0 ? 1 : 0;
    }
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple() && depth < kMaxCompareDepth) {
      const List &x = a.as_list(), &y = b.as_list();
      for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
        if (Equal(x[i], y[i])) continue;
        return Order(x[i], y[i], depth + 1);
      }
      return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
    }
    return std::nullopt;
  }

  Result<bool> Compare(const std::string& op, const Value& a, const Value& b, int line) {
    if (op == "==") return Equal(a, b);
    if (op == "!=") return !Equal(a, b);
    if (op == "in" || op == "not in") {
      GRAFT_ASSIGN_OR_RETURN(bool in, ApplyTest("in", a, List{b}));
      if (!b.is_string() && !b.is_list() && !b.is_dict() && !b.is_undefined()) {
        return Err(line, fmt::format("'in' needs a string, list or dict on the right, not a {}", b.TypeName()));
      }
      return op == "in" ? in : !in;
    }
    const std::optional<int> order = Order(a, b, 0);
    if (!order) return Err(line, fmt::format("cannot compare {} and {} with '{}'", a.TypeName(), b.TypeName(), op));
    const int c = *order;
    if (op == "<") return c < 0;
    if (op == ">") return c > 0;
    if (op == "<=") return c <= 0;
    return c >= 0;
  }

  Result<Value> Eval(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::kLiteral: return e.literal;
      case Expr::Kind::kName: return Lookup(e.name);
      case Expr::Kind::kAttr: {
        GRAFT_ASSIGN_OR_RETURN(Value obj, Eval(*e.a));
        if (obj.is_dict()) {
          const Value* v = obj.as_dict().Find(e.name);
          return v ? *v : Value();
        }
        if (obj.is_group() && (e.name == "grouper" || e.name == "list")) return obj.as_list()[e.name == "grouper" ? 0 : 1];
        if (int64_t i = 0; obj.is_list() && !e.name.empty() && std::isdigit(static_cast<unsigned char>(e.name[0])) &&
                           std::from_chars(e.name.data(), e.name.data() + e.name.size(), i).ec == std::errc()) {
          return Index(obj, Value(i), e.line);
        }
        return Value();
      }
      case Expr::Kind::kItem: {
        GRAFT_ASSIGN_OR_RETURN(Value obj, Eval(*e.a));
        GRAFT_ASSIGN_OR_RETURN(Value key, Eval(*e.b));
        return Index(obj, key, e.line);
      }
      case Expr::Kind::kSlice: {
        GRAFT_ASSIGN_OR_RETURN(Value obj, Eval(*e.a));
        Value start, stop, step;
        if (e.b) {
          GRAFT_ASSIGN_OR_RETURN(start, Eval(*e.b));
        }
        if (e.c) {
          GRAFT_ASSIGN_OR_RETURN(stop, Eval(*e.c));
        }
        if (!e.args.empty()) {
          GRAFT_ASSIGN_OR_RETURN(step, Eval(*e.args[0]));
        }
        for (const Value* v : {&start, &stop, &step}) {  // Python's rule (a float is a TypeError there)
          if (!v->is_undefined() && !v->is_none() && !v->is_int()) {
            return Err(e.line, fmt::format("slice indices must be integers or none, not {}", v->TypeName()));
          }
        }
        if (step.is_int() && step.as_int() == 0) return Err(e.line, "slice step cannot be zero");
        if (!obj.is_list() && !obj.is_string()) return Err(e.line, fmt::format("cannot slice a {}", obj.TypeName()));
        return Slice(obj, start, stop, step);
      }
      case Expr::Kind::kCall: {
        Dict kwargs;
        GRAFT_ASSIGN_OR_RETURN(List args, EvalArgs(e, &kwargs));
        if (e.a->kind == Expr::Kind::kAttr) {  // a method call: obj.name(...)
          GRAFT_ASSIGN_OR_RETURN(Value obj, Eval(*e.a->a));
          if (!(obj.is_dict() && obj.as_dict().Find(e.a->name))) {
            bool found = false;
            Result<Value> r = CallMethod(obj, e.a->name, args, kwargs, &found);
            if (!r.ok()) return r.status().WithContext(fmt::format("line {}", e.line));
            if (found) {
              GRAFT_RETURN_IF_ERROR(Sized(*r, e.line));
              return r;
            }
            return Err(e.line, fmt::format("unsupported method '{}' on a {}", e.a->name, obj.TypeName()));
          }
        }
        GRAFT_ASSIGN_OR_RETURN(Value f, Eval(*e.a));
        if (f.kind() != Value::Kind::kCallable) {
          const std::string what = e.a->kind == Expr::Kind::kName ? e.a->name : "expression";
          return Err(e.line, fmt::format("'{}' is not a function (it is {})", what, f.TypeName()));
        }
        Result<Value> r = f.as_callable().fn(args, kwargs);
        if (!r.ok()) return r.status().code() == StatusCode::kInvalidArgument && r.status().message().rfind("line ", 0) == 0
                                ? r.status()
                                : r.status().WithContext(fmt::format("line {}", e.line));
        GRAFT_RETURN_IF_ERROR(Sized(*r, e.line));
        return r;
      }
      case Expr::Kind::kFilter: {
        GRAFT_ASSIGN_OR_RETURN(Value v, Eval(*e.a));
        return Filtered(e, v);
      }
      case Expr::Kind::kTest: {
        GRAFT_ASSIGN_OR_RETURN(Value v, Eval(*e.a));
        Dict kwargs;
        GRAFT_ASSIGN_OR_RETURN(List args, EvalArgs(e, &kwargs));
        Result<bool> r = ApplyTest(e.name, v, args);
        if (!r.ok()) return r.status().WithContext(fmt::format("line {}", e.line));
        return Value(e.negated ? !r.value() : r.value());
      }
      case Expr::Kind::kUnary: {
        GRAFT_ASSIGN_OR_RETURN(Value v, Eval(*e.a));
        if (e.name == "not") return Value(!v.Truthy());
        if (!v.is_number()) return Err(e.line, fmt::format("unary '{}' needs a number, not a {}", e.name, v.TypeName()));
        if (e.name == "+") return v;
        return v.kind() == Value::Kind::kInt ? Value(-v.as_int()) : Value(-v.as_double());
      }
      case Expr::Kind::kBinary: {
        GRAFT_ASSIGN_OR_RETURN(Value a, Eval(*e.a));
        if (e.name == "and") return a.Truthy() ? Eval(*e.b) : Result<Value>(a);
        if (e.name == "or") return a.Truthy() ? Result<Value>(a) : Eval(*e.b);
        GRAFT_ASSIGN_OR_RETURN(Value b, Eval(*e.b));
        static const char* kCmp[] = {"==", "!=", "<", ">", "<=", ">=", "in", "not in"};
        for (const char* c : kCmp) {
          if (e.name == c) {
            GRAFT_ASSIGN_OR_RETURN(bool r, Compare(e.name, a, b, e.line));
            return Value(r);
          }
        }
        return Arith(e.name, a, b, e.line);
      }
      case Expr::Kind::kCond: {
        GRAFT_ASSIGN_OR_RETURN(Value c, Eval(*e.a));
        if (c.Truthy()) return Eval(*e.b);
        return e.c ? Eval(*e.c) : Result<Value>(Value());
      }
      case Expr::Kind::kList: {
        List l;
        for (const auto& a : e.args) {
          GRAFT_ASSIGN_OR_RETURN(Value v, Eval(*a));
          l.push_back(std::move(v));
        }
        return e.tuple ? Value::Tuple(std::move(l)) : Value(std::move(l));
      }
      case Expr::Kind::kDict: {
        Dict d;
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          GRAFT_ASSIGN_OR_RETURN(Value k, Eval(*e.args[i]));
          GRAFT_ASSIGN_OR_RETURN(Value v, Eval(*e.args[i + 1]));
          d.Set(k.Str(), std::move(v));
        }
        return Value(d);
      }
    }
    return Value();
  }

  std::vector<Dict> frames_;
  int64_t steps_ = 0;  // the work budget spent so far (kMaxSteps)
};

Dict Builtins() {
  Dict g;
  g.Set("raise_exception", Value(Callable{"raise_exception", [](const List& args, const Dict&) -> Result<Value> {
                             return InvalidArgument("template raised: " + (args.empty() ? std::string() : args[0].Str()));
                           }}));
  g.Set("namespace", Value(Callable{"namespace", [](const List& args, const Dict& kwargs) -> Result<Value> {
                       Dict d;
                       if (!args.empty() && args[0].is_dict()) d = args[0].as_dict();
                       for (const auto& [k, v] : kwargs.items) d.Set(k, v);
                       return Value(std::move(d), /*is_namespace=*/true);
                     }}));
  g.Set("range", Value(Callable{"range", [](const List& args, const Dict&) -> Result<Value> {
                   int64_t b = 0, e = 0, st = 1;
                   for (const auto& a : args) if (!a.is_int()) return InvalidArgument("range() needs integers");
                   if (args.size() == 1) e = args[0].as_int();
                   else if (args.size() >= 2) b = args[0].as_int(), e = args[1].as_int();
                   if (args.size() >= 3) st = args[2].as_int();
                   if (st == 0 || args.empty()) return InvalidArgument("range(): bad arguments");
                   List l;
                   for (int64_t i = b; st > 0 ? i < e : i > e; i += st) {
                     l.emplace_back(i);
                     if (static_cast<int64_t>(l.size()) > kMaxSteps) {
                       return InvalidArgument(fmt::format("range() is limited to {} items", kMaxSteps));
                     }
                   }
                   return Value(l);
                 }}));
  g.Set("dict", Value(Callable{"dict", [](const List&, const Dict& kwargs) -> Result<Value> { return Value(kwargs); }}));
  g.Set("strftime_now", Value(Callable{"strftime_now", [](const List& args, const Dict&) -> Result<Value> {
                          const std::time_t now = std::time(nullptr);
                          std::tm tm{};
                          localtime_r(&now, &tm);
                          char buf[256];
                          const size_t n = std::strftime(buf, sizeof buf, args.empty() ? "%Y-%m-%d" : args[0].Str().c_str(), &tm);
                          return Value(std::string(buf, n));
                        }}));
  return g;
}

}  // namespace

Result<std::string> Render(const Template& t, const Dict& globals) {
  Dict g = Builtins();
  for (const auto& [k, v] : globals.items) g.Set(k, v);
  Interpreter in(g);
  std::string out;
  Flow f = Flow::kNormal;
  GRAFT_RETURN_IF_ERROR(in.Exec(t.body, out, &f));
  return out;
}

}  // namespace graft::jinja

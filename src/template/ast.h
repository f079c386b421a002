// Syntax tree of a parsed template (the Jinja subset chat templates use).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "template/value.h"

namespace graft::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral, kName, kAttr, kItem, kSlice, kCall, kFilter, kTest, kUnary, kBinary, kCond, kList, kDict
  };
  Kind kind;
  int line = 0;
  Value literal;             // kLiteral
  std::string name;          // kName / kAttr attribute / kFilter, kTest name / kUnary, kBinary operator
  ExprPtr a, b, c;           // operands: object / index / slice parts / condition parts
  std::vector<ExprPtr> args; // call, filter and test arguments; list items; dict keys and values interleaved
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  bool negated = false;      // kTest: "is not"
  bool tuple = false;        // kList: a tuple literal, (a, b) / (a,) / ()

  Expr() = default;
  Expr(const Expr&) = delete;
  Expr& operator=(const Expr&) = delete;
  // Frees the subtree without recursion: a chain such as a + a + ... + a, which the parser
  // builds in a loop, can be far deeper than the stack (the parser refuses such trees, but
  // frees them first).
  ~Expr() {
    std::vector<ExprPtr> todo;
    auto take = [&todo](Expr& x) {
      for (ExprPtr* k : {&x.a, &x.b, &x.c}) if (*k) todo.push_back(std::move(*k));
      for (auto& k : x.args) if (k) todo.push_back(std::move(k));
      for (auto& kv : x.kwargs) if (kv.second) todo.push_back(std::move(kv.second));
    };
    take(*this);
    while (!todo.empty()) {
      ExprPtr e = std::move(todo.back());
      todo.pop_back();
      take(*e);
    }  // each e is freed here, its children already moved out
  }
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum class Kind { kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kBreak, kContinue, kGeneration, kFilterBlock, kWith };
  Kind kind;
  int line = 0;
  std::string text;                          // kText
  ExprPtr expr;                              // kOutput value, kSet value, kFor iterable
  std::vector<std::pair<ExprPtr, Body>> branches;  // kIf: (condition, body); else has a null condition
  std::vector<std::string> targets;          // kFor loop variables, kSet names ("ns.attr" form in attr_of)
  std::string attr_of;                       // kSet: "ns" in "set ns.x = ..."
  ExprPtr filter;                            // kFor: "for x in y if cond"
  Body body, else_body;                      // kFor / kMacro / kSetBlock / kGeneration / kFilterBlock / kWith
  std::vector<ExprPtr> filters;              // kFilterBlock: its filters in order (kFilter, no operand)
  std::string name;                          // kMacro name
  std::vector<std::pair<std::string, ExprPtr>> params;  // kMacro (name, default or null); kWith (name, value)
};

struct Template {
  Body body;
};

}  // namespace graft::jinja

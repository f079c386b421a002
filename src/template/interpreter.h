// Renders a parsed Template with a set of global variables.
//
// Semantics follow Jinja2 as transformers configures it for chat templates: for loops get
// their own scope (set inside a loop does not leak; namespaces are the way out), macros get
// theirs, `loop` offers index/index0/revindex/revindex0/first/last/length/previtem/nextitem,
// and loop controls (break, continue) are on. Undefined values render as "" and are falsy;
// attribute access on them yields undefined. Unsupported filters, tests and methods are
// errors naming the construct and the template line.
#pragma once

#include <string>

#include "template/ast.h"
#include "template/value.h"
#include "util/status.h"

namespace graft::jinja {

Result<std::string> Render(const Template& t, const Dict& globals);

}  // namespace graft::jinja

// Filters, tests and methods available to templates (the subset chat templates use).
#pragma once

#include <string>

#include "template/value.h"
#include "util/status.h"

namespace graft::jinja {

// `value | name(args, kwargs)`.
Result<Value> ApplyFilter(const std::string& name, const Value& value, const List& args, const Dict& kwargs);
// `value is name(args)`.
Result<bool> ApplyTest(const std::string& name, const Value& value, const List& args);
// `obj.name(args, kwargs)` for strings, dicts and lists; nullopt-like: *found = false when the
// object has no such method.
Result<Value> CallMethod(const Value& obj, const std::string& name, const List& args, const Dict& kwargs, bool* found);
// Python's str.strip family: chars empty means whitespace.
std::string Strip(const std::string& s, const std::string& chars, bool left, bool right);

}  // namespace graft::jinja

// Python's printf-style string formatting, as templates reach it: `'%s: %d' % (a, b)` and
// Jinja's `format` filter (`'%s=%s' | format(a, b)`).
//
// PercentFormat(f, args) is Python's `f % args`: a tuple supplies one value a conversion, a dict
// a mapping for `%(key)s`, anything else one value. Conversions s r a (str, repr, ascii), d i u (integers; floats truncated toward zero,
// bools as 0 / 1), o x X (integers only), e E f F g G (numbers), c (an integer's character or a
// one-character string) and %%; flags # 0 - space +, a width and a precision, each a number or
// `*` (taken from the tuple). Errors name what Python refuses: too few or too many values, a
// value of the wrong type, an unknown conversion, a format that ends inside a specifier. Widths
// and precisions stop at 1,024 and the result at kMaxTextBytes.
#pragma once

#include <string>

#include "template/value.h"
#include "util/status.h"

namespace graft::jinja {

Result<std::string> PercentFormat(const std::string& format, const Value& args);

// Python's str.format(*args, **kwargs) as Jinja's sandbox runs it: replacement fields {}, {0},
// {name}, each followed by .attr or [key] lookups (a dict's attribute is its item, as Jinja's
// getattr), a conversion !s / !r / !a and a format spec — [[fill]align][sign][#][0][width]
// [, or _][.precision][type], with {} fields inside it — for strings (s), integers (d b o x X c n)
// and floats (e E f F g G n %; no type: repr, or g keeping a digit past the point); {{ and }}
// are braces. Errors name what Python refuses (a single brace, an index or key that is not
// there, automatic and manual numbering mixed, a spec a value's type does not take).
Result<std::string> StrFormat(const std::string& format, const List& args, const Dict& kwargs);

}  // namespace graft::jinja

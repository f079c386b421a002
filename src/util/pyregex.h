// Python `re` semantics the PEFT config rules need, on PCRE2 (UTF mode): fullmatch, match
// (anchored at the start only), and the first capture group of a match.
#pragma once

#include <optional>
#include <string>

#include "util/status.h"

namespace graft {

// re.fullmatch(pattern, s) is not None. A pattern that does not compile is an error, and so is
// one that needs more than 100,000 backtracking steps on s (never a silent "no match").
Result<bool> RegexFullMatch(const std::string& pattern, const std::string& s);
// Ok when `pattern` compiles, else an error naming it and where it stops.
Status RegexCompiles(const std::string& pattern);
// re.match(pattern, s) is not None (anchored at the start, may end anywhere).
Result<bool> RegexMatchPrefix(const std::string& pattern, const std::string& s);
// re.match(pattern, s).group(1), nullopt when no match.
Result<std::optional<std::string>> RegexMatchGroup1(const std::string& pattern, const std::string& s);

}  // namespace graft

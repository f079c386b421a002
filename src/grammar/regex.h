// RegexGrammar: the grammar of the texts a regular expression matches whole (vLLM's guided_regex
// and structured_outputs.regex are full matches). The dialect is the common core of Python's and
// ECMAScript's: literals and escapes (\n \t \r \f \v \\ \. ...), ".", classes ([a-z0-9_], [^...],
// \d \w \s and their negations), groups ( ) and (?: ), alternation |, and * + ? {m} {m,} {m,n}
// (bounds up to 256), with ^ and $ only at the ends. Bytes, not code points: a non-ASCII literal
// matches its UTF-8 bytes, "." any byte but newline, a negated class any byte it does not list. Anything else —
// backreferences, lookaround, \b, lazy or possessive quantifiers, non-ASCII in a class, a repeated
// part that can match nothing — is an error naming it and its position.
#pragma once

#include <memory>
#include <string>

#include "grammar/grammar.h"
#include "util/status.h"

namespace graft {

Result<std::shared_ptr<const Grammar>> RegexGrammar(const std::string& pattern);

}  // namespace graft

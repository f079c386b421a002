// RegexSplitter: the "Split" pre-tokenizer (behavior "Isolated"): every regex match is a piece
// and so is every stretch of text between matches, in order.
//
// PCRE2 with UTF + UCP and the JIT. Hugging Face tokenizers uses Oniguruma, whose \s is exactly
// Unicode White_Space; PCRE2's \s also matches U+180E. The pattern is therefore rewritten with
// \s (and \S outside classes) spelled as the explicit White_Space set before compiling.
//
// Thread-safety: the compiled pattern is shared; Split() allocates its own match data, so one
// splitter may be used from several threads.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "util/status.h"

namespace graft {

class RegexSplitter {
 public:
  static Result<std::shared_ptr<RegexSplitter>> Compile(const std::string& pattern);
  ~RegexSplitter();
  // text must be valid UTF-8 (checked by the caller). Appends the pieces to out.
  Status Split(std::string_view text, std::vector<std::string_view>& out) const;

 private:
  RegexSplitter() = default;
  void* code_ = nullptr;  // pcre2_code_8*
};

// The pattern with \s / \S replaced by Unicode White_Space classes (exposed for tests).
Result<std::string> RewriteWhitespaceClasses(const std::string& pattern);

}  // namespace graft

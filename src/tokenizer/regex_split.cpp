#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex_split.h"

#include <fmt/core.h>
#include <pcre2.h>

namespace graft {
namespace {

// Unicode White_Space (PropList.txt), as a class body.
constexpr const char* kWhiteSpace =
    "\\x{9}-\\x{d}\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}";

}  // namespace

Result<std::string> RewriteWhitespaceClasses(const std::string& p) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char n = p[i + 1];
      if (n == 's') {
        out += in_class ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]";
      } else if (n == 'S') {
        if (in_class) return Unsupported("tokenizer regex: \\S inside a character class is not supported");
        out += "[^" + std::string(kWhiteSpace) + "]";
      } else {
        out += c;
        out += n;
      }
      ++i;
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];  // a literal ']' first in the class
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

Result<std::shared_ptr<RegexSplitter>> RegexSplitter::Compile(const std::string& pattern) {
  GRAFT_ASSIGN_OR_RETURN(std::string rewritten, RewriteWhitespaceClasses(pattern));
  int err = 0;
  PCRE2_SIZE off = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()), rewritten.size(),
                                   PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    return InvalidArgument(fmt::format("tokenizer regex /{}/ does not compile at offset {}: {}", pattern, off,
                                       reinterpret_cast<const char*>(msg)));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if the JIT is unavailable
  auto s = std::shared_ptr<RegexSplitter>(new RegexSplitter());
  s->code_ = code;
  return s;
}

RegexSplitter::~RegexSplitter() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

Status RegexSplitter::Split(std::string_view text, std::vector<std::string_view>& out) const {
  auto* code = static_cast<pcre2_code*>(code_);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  if (!md) return Internal("pcre2: out of memory");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0, last = 0;
  Status st;
  while (pos <= text.size()) {
    const int rc = pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      st = Internal(fmt::format("tokenizer regex match failed: {}", reinterpret_cast<const char*>(msg)));
      break;
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t b = ov[0], e = ov[1];
    if (b > last) out.push_back(text.substr(last, b - last));
    if (e > b) out.push_back(text.substr(b, e - b));
    last = e;
    if (e == b) {
      // Empty match: step over one whole code point.
      if (e >= text.size()) break;
      size_t n = 1;
      while (e + n < text.size() && (static_cast<uint8_t>(text[e + n]) & 0xc0) == 0x80) ++n;
      pos = e + n;
    } else {
      pos = e;
    }
  }
  if (last < text.size()) out.push_back(text.substr(last));
  pcre2_match_data_free(md);
  return st;
}

}  // namespace graft

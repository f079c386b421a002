#define PCRE2_CODE_UNIT_WIDTH 8
#include "util/pyregex.h"

#include <pcre2.h>

#include <memory>
#include <string>

namespace graft {
namespace {

// Backtracking steps one match may take. The patterns here (PEFT configs' module rules) test
// module names of a few dozen characters in a few hundred steps; PCRE2's default (ten million)
// let a runaway pattern spend ~0.1 s a name.
constexpr uint32_t kRegexMatchLimit = 100000;

struct Match {
  bool matched = false;
  std::optional<std::string> group1;
};

using Code = std::unique_ptr<pcre2_code, decltype(&pcre2_code_free)>;

// `pattern` compiled (UTF mode, plus `options`), or an error naming it and where it stops.
Result<Code> Compile(const std::string& pattern, uint32_t options) {
  int err = 0;
  PCRE2_SIZE off = 0;
  Code code(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | options, &err, &off,
                          nullptr),
            &pcre2_code_free);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    return InvalidArgument("regex /" + pattern + "/ does not compile at offset " + std::to_string(off) + ": " +
                           reinterpret_cast<const char*>(msg));
  }
  return code;
}

Result<Match> Run(const std::string& pattern, const std::string& s, uint32_t options) {
  GRAFT_ASSIGN_OR_RETURN(Code code, Compile(pattern, options));
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create_from_pattern(code.get(), nullptr), &pcre2_match_data_free);
  std::unique_ptr<pcre2_match_context, decltype(&pcre2_match_context_free)> ctx(pcre2_match_context_create(nullptr),
                                                                               &pcre2_match_context_free);
  if (!md || !ctx) return Internal("pcre2: out of memory");
  pcre2_set_match_limit(ctx.get(), kRegexMatchLimit);
  const int rc = pcre2_match(code.get(), reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, 0, md.get(), ctx.get());
  Match m;
  if (rc == PCRE2_ERROR_NOMATCH) return m;
  if (rc < 0) {  // the match limit, above all: a runaway pattern is an error, never a silent "no match"
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(rc, msg, sizeof msg);
    return InvalidArgument("regex /" + pattern + "/ on '" + s + "': " + reinterpret_cast<const char*>(msg) +
                           " (patterns that backtrack this much are refused)");
  }
  m.matched = true;
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
  if (rc >= 2 && ov[2] != PCRE2_UNSET) m.group1 = s.substr(ov[2], ov[3] - ov[2]);
  return m;
}

}  // namespace

Status RegexCompiles(const std::string& pattern) { return Compile(pattern, 0).status(); }

Result<bool> RegexFullMatch(const std::string& pattern, const std::string& s) {
  GRAFT_ASSIGN_OR_RETURN(Match m, Run(pattern, s, PCRE2_ANCHORED | PCRE2_ENDANCHORED));
  return m.matched;
}

Result<bool> RegexMatchPrefix(const std::string& pattern, const std::string& s) {
  GRAFT_ASSIGN_OR_RETURN(Match m, Run(pattern, s, PCRE2_ANCHORED));
  return m.matched;
}

Result<std::optional<std::string>> RegexMatchGroup1(const std::string& pattern, const std::string& s) {
  GRAFT_ASSIGN_OR_RETURN(Match m, Run(pattern, s, PCRE2_ANCHORED));
  return m.group1;
}

}  // namespace graft

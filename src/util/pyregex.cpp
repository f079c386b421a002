#define PCRE2_CODE_UNIT_WIDTH 8
#include "util/pyregex.h"

#include <pcre2.h>

#include <memory>

namespace graft {
namespace {

struct Match {
  bool matched = false;
  std::optional<std::string> group1;
};

Result<Match> Run(const std::string& pattern, const std::string& s, uint32_t options) {
  int err = 0;
  PCRE2_SIZE off = 0;
  std::unique_ptr<pcre2_code, decltype(&pcre2_code_free)> code(
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | options, &err, &off, nullptr),
      &pcre2_code_free);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    return InvalidArgument("regex /" + pattern + "/ does not compile: " + reinterpret_cast<const char*>(msg));
  }
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create_from_pattern(code.get(), nullptr), &pcre2_match_data_free);
  const int rc = pcre2_match(code.get(), reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, 0, md.get(), nullptr);
  Match m;
  if (rc < 0) return m;
  m.matched = true;
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
  if (rc >= 2 && ov[2] != PCRE2_UNSET) m.group1 = s.substr(ov[2], ov[3] - ov[2]);
  return m;
}

}  // namespace

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

#include "util/json_depth.h"

#include <fmt/format.h>

namespace graft {

Status CheckJsonDepth(std::string_view text, const std::string& what, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        return InvalidArgument(fmt::format("{}: JSON nested deeper than {} levels (at byte {})", what, max_depth, i));
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return Status::Ok();
}

}  // namespace graft

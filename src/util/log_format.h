// The format of graft's log lines on stderr: "text" (time, level, message — for a terminal) or
// "json" (one object a line: {"time", "level", "msg"}, the message JSON-escaped — for a log
// shipper). Applies to the default spdlog logger, whichever thread logs.
#pragma once

#include <string>

#include "util/status.h"

namespace graft {

// format: "text" or "json"; anything else is an error naming the choices.
Status SetLogFormat(const std::string& format);

// s as the inside of a JSON string (quotes, backslashes and control characters escaped).
std::string JsonEscape(const std::string& s);

}  // namespace graft

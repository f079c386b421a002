// Parses template text into a Template. Whitespace follows Hugging Face's chat-template
// environment: trim_blocks and lstrip_blocks on, plus "-" markers on tags. Errors name the
// line and the construct ("line 12: unknown tag 'include'").
#pragma once

#include <string>

#include "template/ast.h"
#include "util/status.h"

namespace graft::jinja {

Result<std::unique_ptr<Template>> Parse(const std::string& source);

}  // namespace graft::jinja

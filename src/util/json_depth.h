// A bound on how deeply a JSON text nests, checked before it is parsed.
//
// nlohmann's parser itself does not recurse, but printing a value (dump), converting it to a
// template value (jinja::Value::FromJson) and rendering it (tojson) do, one stack frame a level:
// a request body of 200 KB nested 100,000 deep overflowed the HTTP thread's stack and took the
// whole server down. Every JSON text that comes from a request or a file is checked first.
#pragma once

#include <string>
#include <string_view>

#include "util/status.h"

namespace graft {

// Deeper than any request, checkpoint or tokenizer file needs (a tool schema nesting 60
// object properties stays under it; serde_json, which Hugging Face's tokenizers parse with,
// stops at 128 too), shallow enough for every recursive walk of a parsed value.
inline constexpr int kMaxJsonDepth = 128;

// Ok, or InvalidArgument("<what>: JSON nested deeper than <max_depth> levels (at byte N)").
// Counts [ and { outside strings (escapes honoured); says nothing about whether the text is
// otherwise valid JSON — the parser that follows does.
Status CheckJsonDepth(std::string_view text, const std::string& what, int max_depth = kMaxJsonDepth);

}  // namespace graft

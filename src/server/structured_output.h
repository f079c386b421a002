// The structured-output options of a generation request, as OpenAI and vLLM spell them, compiled
// to the grammar the engine constrains generation with (grammar/json_schema.h):
//   response_format {"type": "text" | "json_object" | "json_schema", "json_schema": {"name",
//     "schema", "strict", "description"}}                       (OpenAI)
//   guided_json (a schema, or its JSON text), guided_regex (grammar/regex.h), guided_choice
//   [strings]                                                   (vLLM, older names)
//   structured_outputs {"json" | "regex" | "choice" | "json_object"}  (vLLM's current object)
// At most one constraint a request. What graft cannot honour is a 400 naming it, never ignored:
// guided_grammar, structured_outputs' grammar / structural_tag, a guided_decoding_backend other
// than "auto", and the schema keywords and regex features json_schema.h and regex.h refuse.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "grammar/grammar.h"

namespace graft {

struct ApiError;

// body: the parsed request; raw_body: its text, re-read for the schema's key order (nullptr: the
// parsed body's order, alphabetical). *grammar stays null when the request asks for no constraint.
std::optional<ApiError> ParseStructuredOutput(const nlohmann::json& body, const std::string* raw_body,
                                              std::shared_ptr<const Grammar>* grammar);

// tool_choice: "none" and "auto" (or none given) leave generation free (*grammar null);
// "required" constrains it to one or more calls of the listed tools, {"type": "function",
// "function": {"name": N}} to one call of N — as Qwen's <tool_call> JSON blocks, which the chat
// output parser turns into tool_calls. A name the tools do not list, "required" without tools
// or on /v1/completions, and any other value are 400s.
std::optional<ApiError> ParseToolChoice(const nlohmann::json& body, const std::string* raw_body, bool chat,
                                        std::shared_ptr<const Grammar>* grammar);

}  // namespace graft

// The grammars of structured output: JSON text that satisfies a JSON Schema (response_format
// json_schema, vLLM's guided_json), any JSON object (json_object), one of a list of strings
// (guided_choice).
//
// A schema compiles to a grammar whose every sentence is a JSON value valid under the schema;
// keywords it cannot guarantee that for are errors naming the keyword and where it sits, never
// ignored. Honoured: type (one or a list), properties / required (properties in their listed
// order; optional ones may be left out; only listed ones are written, which every
// additionalProperties value allows), additionalProperties (without properties: none, or any
// key with values of that schema), items with minItems / maxItems, enum, const, anyOf, oneOf
// (as anyOf: a value may match more than one branch), allOf of one schema, nullable (OpenAPI's
// null-or-this, as zod writes it), $ref to "#" or a
// JSON pointer into the document ($defs, definitions), minLength / maxLength on strings (in JSON
// characters, an escape counting one), the empty schema and `true`. Annotations (title,
// description, default, examples, $schema, $id, $comment, deprecated, readOnly, writeOnly, and
// $defs / definitions as places $ref points into) are read past; any other keyword is an error. Whitespace between tokens: at most kMaxWhitespace
// bytes of space, tab, newline or carriage return a gap, so a model cannot pad forever.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "util/status.h"

namespace graft {

inline constexpr int kMaxWhitespace = 32;

// schema: as parsed with its keys in written order (properties are written in that order).
Result<std::shared_ptr<const Grammar>> JsonSchemaGrammar(const nlohmann::ordered_json& schema);
std::shared_ptr<const Grammar> JsonObjectGrammar();
// Qwen's tool-call blocks for tool_choice "required" or a named function: "<tool_call>\n{"name":
// NAME, "arguments": ARGS}\n</tool_call>" for one of `tools`, ARGS valid under its parameters
// schema (null: any object); `several`: one or more blocks, each after a newline.
struct ToolSpec {
  std::string name;
  nlohmann::ordered_json parameters;
};
Result<std::shared_ptr<const Grammar>> ToolCallGrammar(const std::vector<ToolSpec>& tools, bool several);
// Exactly one of the strings (at least one, none empty).
Result<std::shared_ptr<const Grammar>> ChoiceGrammar(const std::vector<std::string>& choices);

}  // namespace graft

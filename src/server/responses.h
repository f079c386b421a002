// OpenAI's Responses API (POST /v1/responses) on top of chat completions: a request becomes the
// chat body it means, and the chat output becomes a response object or its stream of events.
//
// Request: "model"; "input" as text or a list of messages ({"role": user | assistant | system |
// developer, "content": text or [{"type": "input_text" | "output_text", "text"}]}, with or
// without "type": "message"); "instructions" (a system message first); "max_output_tokens";
// "temperature", "top_p", "seed"-free sampling as chat has it; "text": {"format": {"type":
// "text" | "json_object" | "json_schema", "name", "schema", "strict"}} (structured output);
// "stream"; "store": false; "metadata" (echoed back); "user", "truncation": "disabled";
// vLLM's "chat_template_kwargs" (as chat completions takes it).
// Refused with a 400 naming them: "previous_response_id", "store": true (graft keeps no
// responses), "tools", "tool_choice", "reasoning", "include", "background": true, "top_logprobs",
// other input item types (images, files, function calls) and any other field.
//
// Response: {"id": "resp_...", "object": "response", "created_at", "status": "completed" |
// "incomplete" (incomplete_details.reason "max_output_tokens"), "model", "output": [a
// "reasoning" item when the model reasoned, a "message" item with one "output_text" part],
// "output_text" is the clients' own convenience and is not sent, "usage": {input_tokens,
// output_tokens, total_tokens}, ...}. Streamed: response.created, response.in_progress,
// response.output_item.added, response.content_part.added, response.output_text.delta (each
// piece of content), response.output_text.done, response.content_part.done,
// response.output_item.done, response.completed — each "event: TYPE" with its
// sequence_number; an error mid-stream is a response.failed event.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "server/api.h"
#include "server/chat_output.h"

namespace graft {

// raw_body: the request's text. *chat_raw: the chat completions body it means (as text, keys in
// the request's order, for a schema's property order); *stream, *metadata: its stream flag and
// metadata.
std::optional<ApiError> ResponsesToChat(const std::string& raw_body, std::string* chat_raw, bool* stream,
                                        nlohmann::ordered_json* metadata);

struct ResponseHead {
  std::string id;       // resp_...
  std::string item_id;  // msg_...
  int64_t created = 0;
  std::string model;
  nlohmann::ordered_json metadata = nlohmann::ordered_json::object();
};

// The response object. status: "in_progress" (no output yet), "completed", "incomplete".
// cached_tokens: input tokens continued from the prefix cache (usage.input_tokens_details).
nlohmann::ordered_json ResponseJson(const ResponseHead& h, const std::string& status, const ChatOutput* out,
                                    int input_tokens, int output_tokens, int cached_tokens = 0);
// One server-sent event of the stream: "event: TYPE\ndata: {...,"type": TYPE, "sequence_number": N}\n\n".
std::string ResponseEvent(const std::string& type, nlohmann::ordered_json payload, int* sequence);

}  // namespace graft

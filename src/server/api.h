// The OpenAI-shaped request parsing and response building behind the HTTP handlers (no
// sockets here). Errors carry the HTTP status and the OpenAI error object's type and param.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "io/generation_config.h"
#include "server/chat_output.h"

namespace graft {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;
  nlohmann::ordered_json Json() const;
};

// What the server knows about the models it serves.
struct ServedAdapter {
  AdapterSlots slots;
  int32_t runtime_slot = -1;  // loaded at run time (POST /v1/load_lora_adapter) into this slot; -1: at start-up
  std::string dir;
  int64_t lora_bytes = 0;   // resident factors
  int64_t exact_bytes = 0;  // resident residuals (exact mode also reads the factors and the shared scratch)
};
struct ServedModels {
  std::string base_name;
  std::map<std::string, ServedAdapter> adapters;  // by name
  int64_t exact_scratch_bytes = 0;  // the one reconstruction scratch every exact mode shares
  int64_t exact_base_bytes = 0;     // --exact-base: the bf16 copy of touched projections, shared
  int context = 0;
  int64_t kv_tokens = 0;      // the engine's KV budget (0: none): a request reserves prompt + max_tokens of it
  int64_t kv_bytes_per_token = 0;  // K and V of one token in every full-attention layer (GET /v1/models)
  std::string kv_dtype;            // how the pages store a value: "float32" or "bfloat16"
  SamplingDefaults defaults;  // generation_config.json's (--generation-config): what a request leaves unset
  bool reasoning_parser = true;  // --reasoning-parser qwen3 (the default) or none: chat output's reasoning_content
  // A recurrent model with prefix caching: each chat prompt marks where the conversation's next
  // turn will part from it (GenerationRequest::snapshot_at), so that turn continues from there.
  bool turn_snapshots = false;
  // The slot a request's "model" and "mode" select; a missing model means the base, a missing
  // mode the adapter's default (AdapterSlots::Select). *mode receives the mode served ("" on
  // the base).
  std::optional<ApiError> Resolve(const nlohmann::json& body, int32_t* slot, std::string* name,
                                  std::string* mode = nullptr) const;
};

// A request body parsed as JSON, its nesting depth checked first (a body nested 100,000 deep
// would overflow the parser's stack); a 400 saying why otherwise.
std::optional<ApiError> ParseJsonBody(const std::string& text, nlohmann::json* body);

// The longest sequence (prompt + completion) the server takes: --max-model-len, or by default
// the model's context cut to the KV pool (a sequence reserves its KV up front, so a longer
// one could never run). An explicit value over either is an error naming both numbers.
Result<int> ServedContext(int requested, int model_context, int64_t kv_tokens);

struct GenerationApiRequest {
  bool chat = true;
  bool stream = false;
  bool include_usage = false;
  std::string model;
  int32_t slot = 0;
  std::string prompt_text;  // rendered (chat), or given (completions: as text, or decoded from token ids)
  GenerationRequest gen;    // the first choice: prompt tokens, sampling, stops, logprobs (on_event left empty)
  // Every choice: the prompts (a completions prompt array) times n, prompt-major; choice j of a
  // prompt has seed + j. They share gen's cancellation flag.
  std::vector<GenerationRequest> choices;
  int n = 1;
  bool logprobs = false;
  // Completions' echo: each choice's text (and, with logprobs, its logprobs) starts with its
  // prompt's — echo_texts[j] is choice j's prompt text.
  bool echo = false;
  std::vector<std::string> echo_texts;
  ChatOutputOptions output;  // chat: how the output splits into reasoning, content and tool calls
};

// Validates a /v1/chat/completions or /v1/completions body, renders and tokenizes the prompt.
// raw_body: the body's text, for a JSON schema's key order (server/structured_output.h).
std::optional<ApiError> ParseGenerationRequest(const nlohmann::json& body, bool chat, const ServedModels& models,
                                               const Tokenizer& tok, const ChatTemplate& tmpl,
                                               const std::set<int32_t>& stop_tokens, GenerationApiRequest* out,
                                               const std::string* raw_body = nullptr);

// POST /tokenize (vLLM's shape): {"prompt": text} as /v1/completions would encode it, or
// {"messages": [...]} rendered as /v1/chat/completions would ("add_generation_prompt" defaults
// to true; tools and chat_template_kwargs as there) -> the token ids. "add_special_tokens" is
// accepted and changes nothing (Qwen's tokenizers add no BOS or EOS); "return_token_strs" is
// refused. "model" must name a served model.
std::optional<ApiError> ParseTokenizeRequest(const nlohmann::json& body, const ServedModels& models, const Tokenizer& tok,
                                             const ChatTemplate& tmpl, std::vector<int32_t>* ids);
// POST /detokenize: {"tokens": [ids]} (each below the tokenizer's vocabulary) -> their text,
// special tokens included.
std::optional<ApiError> ParseDetokenizeRequest(const nlohmann::json& body, const ServedModels& models,
                                               const Tokenizer& tok, std::string* text);

// Response bodies. `out` is the generated text as ChatOutputParser splits it (completions: all
// content). A chat completion with tool calls finishes with "tool_calls", its content null when
// only whitespace; a chunk's tool calls are numbered from `first_call` (the calls streamed before).
nlohmann::ordered_json LogprobsJson(const std::vector<TokenLogprob>& lps, bool chat);
struct ChoiceResult {
  ChatOutput out;
  std::vector<TokenLogprob> logprobs;
  std::string finish_reason;
};
// The usage object (OpenAI's): prompt, completion and total tokens, and the prompt tokens that
// came from the prefix cache (prompt_tokens_details.cached_tokens).
nlohmann::ordered_json UsageJson(int prompt_tokens, int completion_tokens, int cached_tokens);
nlohmann::ordered_json CompletionJson(const GenerationApiRequest& r, const std::string& id, int64_t created,
                                      const std::vector<ChoiceResult>& choices, int prompt_tokens, int completion_tokens,
                                      int cached_tokens = 0);
nlohmann::ordered_json ChunkJson(const GenerationApiRequest& r, const std::string& id, int64_t created, int index,
                                 const std::string* role, const ChatOutput& out, int first_call,
                                 const std::vector<TokenLogprob>* lps, const std::string* finish_reason);

}  // namespace graft

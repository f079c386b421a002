// The `graft generate` job: a prompt (chat template applied, unless raw) in, text streamed out.
#pragma once

#include <functional>
#include <set>
#include <string>

#include "backend/ops.h"
#include "engine/sampler.h"
#include "model/model.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "util/status.h"

namespace graft {

struct GenerateJob {
  std::string prompt;
  std::string system;          // optional system message
  bool raw = false;            // true: encode the prompt as is, no chat template
  ChatOptions chat;            // add_generation_prompt, enable_thinking
  int max_tokens = 256;
  int min_tokens = 0;       // no end token before this many (they are never drawn)
  bool ignore_eos = false;  // generate max_tokens whatever end tokens come
  SamplingParams sampling;
  int32_t adapter_slot = 0;       // of the AdapterSet passed to RunGenerate
};

struct GenerateResult {
  int prompt_tokens = 0;
  int generated_tokens = 0;
  std::string stop_reason;  // "eos", "max_tokens", "context"
  double prefill_seconds = 0;
  double decode_seconds = 0;
};

// Token ids that end generation: config.json's eos_token_id(s), generation_config.json's,
// and the tokenizer_config.json eos_token.
std::set<int32_t> StopTokens(const std::string& model_dir, const ModelConfig& cfg, const Tokenizer& tok,
                             const ChatTemplate* tmpl);

// on_text receives each complete-UTF-8 piece of generated text as soon as it exists.
Result<GenerateResult> RunGenerate(const Model& model, Ops& ops, const Tokenizer& tok, const ChatTemplate* tmpl,
                                   const std::set<int32_t>& stop, const GenerateJob& job,
                                   const std::function<void(const std::string&)>& on_text,
                                   const AdapterSet& adapters = AdapterSet{});

}  // namespace graft

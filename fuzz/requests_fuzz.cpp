// libFuzzer target for what a client, a checkpoint or an adapter hands graft as JSON: any bytes
// go through the config.json, adapter_config.json (its module rules then run on real module
// names: regexes from the file) and tokenizer.json parsers, then the depth check and the
// parser, and — whatever the parse gave — the /v1/decide parser, the /v1/chat/completions
// and /v1/completions parsers (prompt rendered with the bundled Qwen chat template and
// tokenized) and the /tokenize and /detokenize ones. Each must answer a value or an error, never crash, overflow a stack or hang.
// Loads models/base (tokenizer and chat template) from the working directory: run from the
// repository root.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "adapters/peft_config.h"
#include "engine/decision.h"
#include "io/model_config.h"
#include "model/architecture.h"
#include "server/api.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "util/json_depth.h"

namespace {

struct Served {
  std::shared_ptr<const graft::Tokenizer> tok;
  std::shared_ptr<const graft::ChatTemplate> tmpl;
  graft::ServedModels models;
  std::set<int32_t> stops;
};

const Served& Server() {
  static const Served s = [] {
    Served r;
    auto tok = graft::Tokenizer::FromFile("models/base/tokenizer.json");
    auto tmpl = graft::ChatTemplate::Load("models/base", "");
    if (!tok.ok() || !tmpl.ok()) std::abort();  // not a finding: the fuzzer runs from the repository root
    r.tok = std::move(tok).value();
    r.tmpl = std::move(tmpl).value();
    r.models.base_name = "base";
    r.models.context = 4096;
    r.stops = {0};
    return r;
  }();
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  // Files from a checkpoint or an adapter: their own parsers (which check depth and parse).
  (void)graft::ParseModelConfig(text, "fuzz/config.json");
  if (auto peft = graft::PeftConfig::Parse(text, "fuzz/adapter_config.json"); peft.ok()) {
    for (const char* m : {"model.layers.0.self_attn.q_proj", "model.language_model.layers.11.linear_attn.in_proj_qkv",
                          "base_model.model.model.layers.3.mlp.down_proj"}) {
      (void)peft->Targets(m);
      if (auto r = peft->RankFor(m); r.ok()) (void)peft->ScaleFor(m, *r);
    }
  }
  if (auto tok = graft::Tokenizer::FromJsonText(text, "fuzz/tokenizer.json"); tok.ok()) {
    (void)(*tok)->Encode("Hello, world! 123 <|im_start|>user\n\u00e9\u4e2d");
  }
  // A request body: the server checks depth, then parses without exceptions.
  if (!graft::CheckJsonDepth(text, "request").ok()) return 0;
  const nlohmann::json body = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return 0;
  graft::DecisionLimits limits;
  limits.max_record_bytes = 4096;
  auto decision = graft::ParseDecisionRequest(body, limits);
  if (decision.ok() && static_cast<int>(decision->questions.size()) > limits.max_questions) __builtin_trap();
  const Served& s = Server();
  for (bool chat : {true, false}) {
    graft::GenerationApiRequest out;
    const auto err = graft::ParseGenerationRequest(body, chat, s.models, *s.tok, *s.tmpl, s.stops, &out);
    if (err && (err->status < 400 || err->status > 599 || err->message.empty())) __builtin_trap();
  }
  std::vector<int32_t> ids;
  if (const auto err = graft::ParseTokenizeRequest(body, s.models, *s.tok, *s.tmpl, &ids);
      err && (err->status < 400 || err->status > 599 || err->message.empty())) {
    __builtin_trap();
  }
  std::string text_out;
  if (const auto err = graft::ParseDetokenizeRequest(body, s.models, *s.tok, &text_out);
      err && (err->status < 400 || err->status > 599 || err->message.empty())) {
    __builtin_trap();
  }
  return 0;
}

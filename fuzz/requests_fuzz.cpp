// libFuzzer target for what a client or a checkpoint hands graft as JSON: any bytes go through
// the depth check and the parser, then — whatever the parse gave — through the /v1/decide
// parser, the /v1/chat/completions and /v1/completions parsers (prompt rendered with the
// bundled Qwen chat template and tokenized) and the config.json parser. Each must answer a
// request or an error, never crash, overflow a stack or hang. Loads models/base (tokenizer and
// chat template) from the working directory: run from the repository root.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/decision.h"
#include "io/model_config.h"
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
  // A checkpoint's config.json: its own parser (which checks depth and parses itself).
  (void)graft::ParseModelConfig(text, "fuzz/config.json");
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
  return 0;
}

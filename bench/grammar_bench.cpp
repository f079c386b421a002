// Structured output's per-step cost, timed alone on the CPU: a JSON schema compiled to a grammar,
// then a conforming answer generated token by token as the engine does it — the constraint's
// mask over the whole vocabulary, then the answer's next token accepted — with the time of each
// mask. The answer is the text given (or a built-in one for the built-in schema), encoded by the
// tokenizer; every one of its tokens must be allowed by the mask (checked: a refusal is an
// error, so the tool also proves the grammar accepts the text).
//   graft_grammar_bench --tokenizer tokenizer.json [--schema FILE --text FILE] [--repeats 5]
// Prints the mask's mean, median, 99th percentile and worst step in microseconds: the first walk
// (the process cold) and the later ones. Each walk is a fresh constraint, as each request gets, so
// its per-sequence cache starts empty every time.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/token_constraint.h"
#include "grammar/json_schema.h"
#include "tokenizer/tokenizer.h"

namespace graft {
namespace {

constexpr const char* kSchema = R"({
  "type": "object",
  "properties": {
    "patient_id": {"type": "string"},
    "age": {"type": "integer"},
    "diagnoses": {"type": "array", "items": {"type": "object", "properties": {
        "code": {"type": "string"}, "confidence": {"type": "number"},
        "severity": {"enum": ["mild", "moderate", "severe"]}}, "required": ["code", "confidence", "severity"]}},
    "follow_up": {"type": "boolean"},
    "notes": {"type": ["string", "null"]}
  },
  "required": ["patient_id", "age", "diagnoses", "follow_up", "notes"]
})";
constexpr const char* kText =
    R"({"patient_id": "A-20931-X", "age": 67, "diagnoses": [{"code": "I50.9", "confidence": 0.82, "severity": )"
    R"("moderate"}, {"code": "E11.65", "confidence": 0.64, "severity": "mild"}], "follow_up": true, "notes": )"
    R"("Reassess ejection fraction in six weeks; titrate the beta blocker and review renal function before any )"
    R"(change to the diuretic dose."})";

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct Stats {
  double mean, p50, p99, max;
};
Stats Summarize(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  double sum = 0;
  for (double u : us) sum += u;
  auto at = [&](double q) { return us[std::min(us.size() - 1, static_cast<size_t>(q * static_cast<double>(us.size())))]; };
  return {sum / static_cast<double>(us.size()), at(0.5), at(0.99), us.back()};
}

int Run(int argc, char** argv) {
  CLI::App app{"Time structured output's token mask a step (CPU)"};
  std::string tokenizer, schema_file, text_file;
  int repeats = 5;
  app.add_option("--tokenizer", tokenizer, "tokenizer.json of the vocabulary to mask")->required();
  app.add_option("--schema", schema_file, "a JSON schema (default: a built-in record schema)");
  app.add_option("--text", text_file, "the answer to walk (required with --schema)");
  app.add_option("--repeats", repeats, "walks after the first")->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);
  if (!schema_file.empty() && text_file.empty()) {
    fmt::print(stderr, "--schema needs --text: the answer to walk\n");
    return 2;
  }
  auto tok = Tokenizer::FromFile(tokenizer);
  if (!tok.ok()) {
    fmt::print(stderr, "{}\n", tok.status().ToString());
    return 1;
  }
  const std::string schema_text = schema_file.empty() ? kSchema : ReadFile(schema_file);
  const std::string text = text_file.empty() ? kText : ReadFile(text_file);
  nlohmann::ordered_json schema;
  try {
    schema = nlohmann::ordered_json::parse(schema_text);
  } catch (const std::exception& e) {
    fmt::print(stderr, "the schema is not JSON: {}\n", e.what());
    return 2;
  }
  auto grammar = JsonSchemaGrammar(schema);
  if (!grammar.ok()) {
    fmt::print(stderr, "{}\n", grammar.status().ToString());
    return 2;
  }
  auto ids = (*tok)->Encode(text);
  if (!ids.ok()) {
    fmt::print(stderr, "{}\n", ids.status().ToString());
    return 1;
  }
  const auto t_vocab = std::chrono::steady_clock::now();
  auto vocab = std::make_shared<const TokenVocab>(**tok, (*tok)->vocab_size());
  const double vocab_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_vocab).count();
  fmt::print("vocabulary {} tokens (table built once a tokenizer: {:.1f} ms); answer {} bytes, {} tokens\n",
             (*tok)->vocab_size(), vocab_ms, text.size(), ids->size());
  std::vector<uint8_t> allowed;
  std::vector<double> first, later;
  for (int walk = 0; walk <= repeats; ++walk) {
    // A fresh constraint a walk, as a request gets; the cache it keeps is its own.
    TokenConstraint c(*grammar, vocab, {}, "");
    for (size_t i = 0; i < ids->size(); ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      c.Mask(allowed);
      const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      (walk == 0 ? first : later).push_back(us);
      const int32_t t = (*ids)[i];
      if (!allowed[static_cast<size_t>(t)]) {
        fmt::print(stderr, "token {} ({:?}) at step {} is refused by the grammar: the text does not conform\n", t,
                   (*tok)->TokenBytes(t), i);
        return 1;
      }
      c.Accept(t);
    }
  }
  auto line = [](const char* what, const std::vector<double>& us) {
    const Stats s = Summarize(us);
    fmt::print("{:<28} steps {:>6}  mean {:>8.1f} us  median {:>8.1f}  p99 {:>8.1f}  max {:>8.1f}\n", what, us.size(), s.mean,
               s.p50, s.p99, s.max);
  };
  line("mask, first walk", first);
  line("mask, later walks", later);
  return 0;
}

}  // namespace
}  // namespace graft

int main(int argc, char** argv) { return graft::Run(argc, argv); }

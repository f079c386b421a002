// Decisions (docs/design.md §4): a record plus multiple-choice questions in, a probability
// distribution over each question's choices out.
//
// Prompt layout — the one function fine-tunes must be trained on (DecisionLayout):
//   system message:  `instructions`, when given
//   user message:    "Record:\n" + record + "\n\n"                                   (record block)
//                    + "Question: " + question + "\nChoices: " + choices joined by " | "
//                    + "\nAnswer with exactly one of the choices."                   (question block)
//   then the chat template's assistant generation prompt with enable_thinking = false.
// With joint = true, question i's conversation also holds the earlier questions as turns:
//   user(record block + question block 0), assistant(chosen answer 0), user(question block 1), ...
// The token sequence of question i is encode(prefix) + encode(rest), where prefix is the
// rendered text up to the end of the record block (the same for every question, encoded once)
// and rest is the remainder of the rendering; a choice continues it with encode(choice).
// A choice's score is the sum of its tokens' log-probabilities; probabilities renormalise the
// scores over the question's choices.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "util/status.h"

namespace graft {

struct DecisionLimits {
  int max_questions = 64;
  int max_choices = 32;
  size_t max_record_bytes = 4u << 20;
  size_t max_text_bytes = 64u << 10;  // a question, a choice or the instructions
};

struct DecisionQuestion {
  std::string id, question;
  std::vector<std::string> choices;
};

struct DecisionRequest {
  std::string model;  // "" = the default (the base, or the only adapter offline)
  std::string mode;   // "lora", "exact" or "" (the adapter's default; AdapterSlots::Select)
  std::string instructions;
  std::string record;
  std::vector<DecisionQuestion> questions;
  bool joint = false;
};

// A request body, validated. Errors name the field ("questions[2].choices: duplicate choice 'yes'").
Result<DecisionRequest> ParseDecisionRequest(const nlohmann::json& body, const DecisionLimits& limits);

// Token layout of one question (see the header comment).
struct QuestionTokens {
  std::vector<int32_t> rest;                  // after the shared record prefix
  std::vector<std::vector<int32_t>> choices;  // each choice's continuation
};

class DecisionLayout {
 public:
  DecisionLayout(const Tokenizer& tok, const ChatTemplate& tmpl) : tok_(tok), tmpl_(tmpl) {}
  // The shared prefix: everything up to the end of the record block.
  Result<std::vector<int32_t>> Prefix(const DecisionRequest& r) const;
  // Question i; `answers` are the choices taken for questions 0..i-1 (joint only).
  Result<QuestionTokens> Question(const DecisionRequest& r, size_t i, const std::vector<std::string>& answers) const;

 private:
  Result<std::string> Render(const DecisionRequest& r, size_t i, const std::vector<std::string>& answers) const;
  const Tokenizer& tok_;
  const ChatTemplate& tmpl_;
};

struct ChoiceScore {
  std::string choice;
  double logprob = 0;      // sum over the choice's tokens
  double probability = 0;  // renormalised over the question's choices
};

struct QuestionResult {
  std::string id;
  std::string choice;  // the most probable
  std::vector<ChoiceScore> scores;
};

struct DecisionResult {
  std::string id;
  std::string model;
  std::string mode;  // the mode served ("lora" or "exact"), "" on the base
  std::vector<QuestionResult> questions;
  int record_tokens = 0;
  int question_tokens = 0;
  int cached_tokens = 0;  // record tokens served from a shared prefix
};

nlohmann::ordered_json DecisionResultJson(const DecisionResult& r);
// Renormalises scores into probabilities and picks the choice (the first on exact ties).
void FinishQuestion(QuestionResult& q);

}  // namespace graft

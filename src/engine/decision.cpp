#include "engine/decision.h"

#include <fmt/core.h>

#include <cmath>
#include <cstring>
#include <set>

#include "weights/lora.h"

namespace graft {
namespace {

using json = nlohmann::json;
constexpr const char* kQuestionSentinel = "\x01GRAFT-QUESTION\x01";

Result<std::string> StringField(const json& body, const char* key, bool required, size_t limit) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) {
    if (required) return InvalidArgument(fmt::format("missing required field '{}'", key));
    return std::string();
  }
  if (!it->is_string()) return InvalidArgument(fmt::format("'{}' must be a string", key));
  std::string s = it->get<std::string>();
  if (s.size() > limit) return InvalidArgument(fmt::format("'{}' is {} bytes; the limit is {}", key, s.size(), limit));
  return s;
}

std::string QuestionBlock(const DecisionQuestion& q) {
  std::string choices;
  for (size_t c = 0; c < q.choices.size(); ++c) choices += (c ? " | " : "") + q.choices[c];
  return "Question: " + q.question + "\nChoices: " + choices + "\nAnswer with exactly one of the choices.";
}

}  // namespace

Result<DecisionRequest> ParseDecisionRequest(const json& body, const DecisionLimits& lim) {
  if (!body.is_object()) return InvalidArgument("the request body must be a JSON object");
  DecisionRequest r;
  GRAFT_ASSIGN_OR_RETURN(r.model, StringField(body, "model", false, 256));
  GRAFT_ASSIGN_OR_RETURN(r.mode, StringField(body, "mode", false, 16));
  GRAFT_RETURN_IF_ERROR(CheckMode(r.mode));
  GRAFT_ASSIGN_OR_RETURN(r.instructions, StringField(body, "instructions", false, lim.max_text_bytes));
  GRAFT_ASSIGN_OR_RETURN(r.record, StringField(body, "record", true, lim.max_record_bytes));
  auto joint = body.find("joint");
  if (joint != body.end() && !joint->is_null()) {
    if (!joint->is_boolean()) return InvalidArgument("'joint' must be true or false");
    r.joint = joint->get<bool>();
  }
  auto qs = body.find("questions");
  if (qs == body.end() || !qs->is_array()) return InvalidArgument("'questions' must be an array");
  if (qs->empty()) return InvalidArgument("'questions' is empty");
  if (static_cast<int>(qs->size()) > lim.max_questions) {
    return InvalidArgument(fmt::format("{} questions; the limit is {}", qs->size(), lim.max_questions));
  }
  std::set<std::string> ids;
  for (size_t i = 0; i < qs->size(); ++i) {
    const json& q = (*qs)[i];
    const std::string where = fmt::format("questions[{}]", i);
    if (!q.is_object()) return InvalidArgument(where + " must be an object");
    DecisionQuestion dq;
    auto id = StringField(q, "id", true, 256);
    if (!id.ok()) return id.status().WithContext(where);
    dq.id = id.value();
    if (dq.id.empty()) return InvalidArgument(where + ".id is empty");
    if (!ids.insert(dq.id).second) return InvalidArgument(fmt::format("{}.id: duplicate question id '{}'", where, dq.id));
    auto text = StringField(q, "question", true, lim.max_text_bytes);
    if (!text.ok()) return text.status().WithContext(where);
    dq.question = text.value();
    auto ch = q.find("choices");
    if (ch == q.end() || !ch->is_array()) return InvalidArgument(where + ".choices must be an array of strings");
    if (ch->size() < 2) return InvalidArgument(fmt::format("{}.choices: needs at least 2 choices, got {}", where, ch->size()));
    if (static_cast<int>(ch->size()) > lim.max_choices) {
      return InvalidArgument(fmt::format("{}.choices: {} choices; the limit is {}", where, ch->size(), lim.max_choices));
    }
    std::set<std::string> seen;
    for (size_t c = 0; c < ch->size(); ++c) {
      const json& v = (*ch)[c];
      if (!v.is_string()) return InvalidArgument(fmt::format("{}.choices[{}] must be a string", where, c));
      const std::string s = v.get<std::string>();
      if (s.empty()) return InvalidArgument(fmt::format("{}.choices[{}] is empty", where, c));
      if (s.size() > lim.max_text_bytes) return InvalidArgument(fmt::format("{}.choices[{}] is too long", where, c));
      if (!seen.insert(s).second) return InvalidArgument(fmt::format("{}.choices: duplicate choice '{}'", where, s));
      dq.choices.push_back(s);
    }
    r.questions.push_back(std::move(dq));
  }
  return r;
}

Result<std::string> DecisionLayout::Render(const DecisionRequest& r, size_t i, const std::vector<std::string>& answers) const {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (!r.instructions.empty()) messages.push_back({{"role", "system"}, {"content", r.instructions}});
  const std::string record_block = "Record:\n" + r.record + "\n\n";
  if (!r.joint || i == 0) {
    messages.push_back({{"role", "user"}, {"content", record_block + kQuestionSentinel + QuestionBlock(r.questions[i])}});
  } else {
    messages.push_back({{"role", "user"}, {"content", record_block + kQuestionSentinel + QuestionBlock(r.questions[0])}});
    for (size_t q = 1; q <= i; ++q) {
      messages.push_back({{"role", "assistant"}, {"content", answers[q - 1]}});
      messages.push_back({{"role", "user"}, {"content", QuestionBlock(r.questions[q])}});
    }
  }
  ChatOptions opt;
  opt.add_generation_prompt = true;
  opt.enable_thinking = false;
  return tmpl_.Render(messages, opt);
}

Result<std::vector<int32_t>> DecisionLayout::Prefix(const DecisionRequest& r) const {
  GRAFT_ASSIGN_OR_RETURN(std::string text, Render(r, 0, {}));
  const size_t at = text.find(kQuestionSentinel);
  if (at == std::string::npos) return Internal("the chat template dropped the question text");
  return tok_.Encode(std::string_view(text).substr(0, at));
}

Result<QuestionTokens> DecisionLayout::Question(const DecisionRequest& r, size_t i, const std::vector<std::string>& answers) const {
  if (i >= r.questions.size() || (r.joint && answers.size() < i)) return Internal("decision layout: bad question index");
  GRAFT_ASSIGN_OR_RETURN(std::string text, Render(r, i, answers));
  const size_t at = text.find(kQuestionSentinel);
  if (at == std::string::npos) return Internal("the chat template dropped the question text");
  QuestionTokens q;
  GRAFT_ASSIGN_OR_RETURN(q.rest, tok_.Encode(std::string_view(text).substr(at + std::strlen(kQuestionSentinel))));
  for (const auto& c : r.questions[i].choices) {
    GRAFT_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tok_.Encode(c));
    if (ids.empty()) return InvalidArgument(fmt::format("choice '{}' encodes to no tokens", c));
    q.choices.push_back(std::move(ids));
  }
  return q;
}

void FinishQuestion(QuestionResult& q) {
  double mx = -INFINITY;
  for (const auto& s : q.scores) mx = std::max(mx, s.logprob);
  double z = 0;
  for (const auto& s : q.scores) z += std::exp(s.logprob - mx);
  size_t best = 0;
  for (size_t c = 0; c < q.scores.size(); ++c) {
    q.scores[c].probability = std::exp(q.scores[c].logprob - mx) / z;
    if (q.scores[c].logprob > q.scores[best].logprob) best = c;
  }
  q.choice = q.scores[best].choice;
}

nlohmann::ordered_json DecisionResultJson(const DecisionResult& r) {
  nlohmann::ordered_json out;
  out["id"] = r.id;
  out["model"] = r.model;
  if (!r.mode.empty()) out["mode"] = r.mode;
  out["decisions"] = nlohmann::ordered_json::array();
  for (const auto& q : r.questions) {
    nlohmann::ordered_json probs = nlohmann::ordered_json::object(), lps = nlohmann::ordered_json::object();
    for (const auto& s : q.scores) probs[s.choice] = s.probability, lps[s.choice] = s.logprob;
    out["decisions"].push_back({{"id", q.id}, {"choice", q.choice}, {"probabilities", probs}, {"logprobs", lps}});
  }
  out["usage"] = {{"record_tokens", r.record_tokens}, {"question_tokens", r.question_tokens}, {"cached_tokens", r.cached_tokens}};
  return out;
}

}  // namespace graft

#include "engine/token_constraint.h"

#include "grammar/json_schema.h"

namespace graft {
namespace {

std::vector<std::string> GrammarBytes(const Tokenizer& tok, int vocab) {
  std::vector<std::string> b(static_cast<size_t>(vocab));
  std::vector<bool> added(static_cast<size_t>(vocab), false);
  for (const auto& a : tok.added_tokens()) {
    if (a.special && a.id >= 0 && a.id < vocab) added[static_cast<size_t>(a.id)] = true;
  }
  for (int32_t t = 0; t < vocab && t < tok.vocab_size(); ++t) {
    if (!added[static_cast<size_t>(t)]) b[static_cast<size_t>(t)] = tok.TokenBytes(t);
  }
  return b;
}

std::vector<std::string> AllBytes(const Tokenizer& tok, int vocab) {
  std::vector<std::string> b(static_cast<size_t>(vocab));
  for (int32_t t = 0; t < vocab && t < tok.vocab_size(); ++t) b[static_cast<size_t>(t)] = tok.TokenBytes(t);
  return b;
}

// The split a JSON string's inside makes of the vocabulary (TokenTrie::SplitBy), made with the
// table instead of on a schema's first request, where it was the slowest step (~0.5 ms): one
// mask inside a string, its split then kept by the trie.
void PrepareJsonStrings(const TokenTrie& trie) {
  auto g = JsonSchemaGrammar(nlohmann::ordered_json{{"type", "string"}});
  if (!g.ok()) return;
  GrammarMatcher m(*g);
  if (!m.Accept("\"")) return;
  std::vector<uint8_t> allowed;
  MaskCache cache;
  TokenMask(m, trie, allowed, cache);
}

}  // namespace

TokenVocab::TokenVocab(const Tokenizer& tok, int vocab)
    : text(AllBytes(tok, vocab)), grammar_tokens(GrammarBytes(tok, vocab)), masks(std::make_unique<MaskStore>(kMaskStoreBytes)) {
  PrepareJsonStrings(grammar_tokens);
}

TokenConstraint::TokenConstraint(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenVocab> vocab,
                                 std::set<int32_t> stop_tokens, std::string gate)
    : grammar_(vocab->masks->Canonical(std::move(grammar))), matcher_(grammar_), vocab_(std::move(vocab)),
      stop_(std::move(stop_tokens)), gate_(std::move(gate)),
      gated_(gate_.empty()) {}

std::string TokenConstraint::Remainder(int32_t token, bool* completes) const {
  const std::string text = tail_ + vocab_->text[static_cast<size_t>(token)];
  const size_t at = text.find(gate_);
  *completes = at != std::string::npos;
  return *completes ? text.substr(at + gate_.size()) : text;
}

bool TokenConstraint::Allows(int32_t token) const {
  if (token < 0 || static_cast<size_t>(token) >= vocab_->text.size()) return false;
  if (!gated_) {
    // Only a token holding the gate's last byte can complete it; the rest pass without a copy.
    if (vocab_->text[static_cast<size_t>(token)].find(gate_.back()) == std::string::npos) return true;
    bool completes = false;
    const std::string rest = Remainder(token, &completes);
    return !completes || matcher_.Allows(rest);
  }
  if (stop_.count(token)) return matcher_.CanStop();
  const std::string& b = vocab_->grammar_tokens.bytes(token);
  return !b.empty() && matcher_.Allows(b);
}

void TokenConstraint::Mask(std::vector<uint8_t>& allowed) const {
  if (!gated_) {
    allowed.resize(vocab_->text.size());
    for (size_t t = 0; t < allowed.size(); ++t) allowed[t] = Allows(static_cast<int32_t>(t));
    return;
  }
  if (!vocab_->masks->Get(grammar_.get(), matcher_.state(), allowed)) {
    TokenMask(matcher_, vocab_->grammar_tokens, allowed, cache_);
    vocab_->masks->Put(grammar_, matcher_.state(), allowed);
  }
  const uint8_t stop = matcher_.CanStop();
  for (int32_t t : stop_) {
    if (t >= 0 && static_cast<size_t>(t) < allowed.size()) allowed[static_cast<size_t>(t)] = stop;
  }
}

void TokenConstraint::Accept(int32_t token) {
  if (!gated_) {
    bool completes = false;
    const std::string rest = Remainder(token, &completes);
    if (completes) {
      gated_ = true;
      matcher_.Accept(rest);
    } else {
      tail_ = rest.size() >= gate_.size() ? rest.substr(rest.size() - (gate_.size() - 1)) : rest;
    }
    return;
  }
  if (stop_.count(token)) return;
  matcher_.Accept(vocab_->grammar_tokens.bytes(token));
}

bool TokenConstraint::MustStop() const { return gated_ && !matcher_.CanContinue(); }

}  // namespace graft

// TokenConstraint: which tokens a sequence under structured output may draw next.
//
// The grammar (grammar/) holds the text the sequence generates after `gate`: with an empty gate
// all of it; with "</think>" (the prompt opened a thinking block) the reasoning is free and the
// answer after it constrained, as vLLM applies structured output after its reasoning parser.
// Before the gate every token is allowed except one that completes the gate with bytes after it
// the grammar refuses. Under the grammar a token is allowed when the grammar accepts its bytes
// (a non-special added token's are its text, so <tool_call> can be one token); special tokens
// never are, and stop tokens only where the text is a whole sentence of the grammar. The mask never changes a logit, so where the unconstrained choice is
// allowed the constrained sequence draws it.
//
// TokenVocab is built once per tokenizer and shared by every constraint, with the masks found so
// far (MaskStore: equal grammars share them, so a state met before — by this sequence or any
// other with the same schema — costs a lookup). A constraint belongs to one sequence (engine
// thread only).
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "grammar/mask_store.h"
#include "grammar/matcher.h"
#include "tokenizer/tokenizer.h"

namespace graft {

struct TokenVocab {
  static constexpr size_t kMaskStoreBytes = size_t{64} << 20;  // ~3,400 masks of a 151K vocabulary
  // vocab: the model's (may exceed the tokenizer's; ids past it have no bytes).
  TokenVocab(const Tokenizer& tok, int vocab);
  std::vector<std::string> text;  // every token's bytes, added tokens included
  TokenTrie grammar_tokens;       // the tokens a grammar may match (special tokens left out)
  std::unique_ptr<MaskStore> masks;  // grammar states' masks over grammar_tokens (thread-safe)
};

class TokenConstraint {
 public:
  TokenConstraint(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenVocab> vocab,
                  std::set<int32_t> stop_tokens, std::string gate);
  bool Allows(int32_t token) const;
  // allowed[t] for every token t of the vocabulary.
  void Mask(std::vector<uint8_t>& allowed) const;
  // The token drawn (Allows(token) was true).
  void Accept(int32_t token);
  // Under the grammar, the text is whole and nothing may follow it: the sequence must stop.
  bool MustStop() const;

 private:
  std::string Remainder(int32_t token, bool* completes) const;  // the bytes after the gate, when `token` completes it
  std::shared_ptr<const Grammar> grammar_;  // the store's canonical copy
  GrammarMatcher matcher_;
  mutable MaskCache cache_;
  std::shared_ptr<const TokenVocab> vocab_;
  std::set<int32_t> stop_;
  std::string gate_;
  bool gated_;        // the grammar applies (the gate is behind us, or there is none)
  std::string tail_;  // before the gate: the text's last gate.size() - 1 bytes
};

}  // namespace graft

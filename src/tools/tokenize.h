// The `graft tokenize` job: a JSON array of strings in, a JSON array of id arrays out (no BOS or
// EOS added; special tokens written in the text are recognised), or the reverse with decode.
#pragma once

#include <string>

#include "tokenizer/tokenizer.h"
#include "util/status.h"

namespace graft {

Status RunTokenize(const Tokenizer& tok, const std::string& input, const std::string& output, bool decode);

}  // namespace graft

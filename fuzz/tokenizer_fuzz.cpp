// libFuzzer target for the tokenizer on request text (every chat message and decision record
// passes through it): any bytes — invalid UTF-8, control characters, special-token look-alikes
// — must encode to ids or an error, and valid UTF-8 must survive decode and encode again.
// Loads models/base/tokenizer.json (the bundled Qwen tokenizer) from the working directory:
// run from the repository root.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "tokenizer/tokenizer.h"

namespace {

const graft::Tokenizer& Tok() {
  static const std::shared_ptr<const graft::Tokenizer> tok = [] {
    auto t = graft::Tokenizer::FromFile("models/base/tokenizer.json");
    if (!t.ok()) std::abort();  // not a finding: the fuzzer runs from the repository root
    return std::move(t).value();
  }();
  return *tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto ids = Tok().Encode(text);
  if (!ids.ok()) return 0;
  for (int32_t id : *ids) {
    if (id < 0) __builtin_trap();
  }
  // Byte-level BPE is lossless up to the NFC normalizer: the decoded text is the normalised
  // input, and encoding it again gives the same ids.
  if (graft::Utf8Lossy(text) == text) {  // valid UTF-8: nothing to replace
    auto again = Tok().Encode(Tok().Decode(*ids));
    if (!again.ok() || *again != *ids) __builtin_trap();
  }
  return 0;
}

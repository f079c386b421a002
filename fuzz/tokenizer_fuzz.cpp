// libFuzzer target for the tokenizer on request text (every chat message and decision record
// passes through it): any bytes — invalid UTF-8, control characters, special-token look-alikes
// — must encode to ids or an error, and valid UTF-8 must survive decode and encode again. Loads models/base/tokenizer.json (the bundled Qwen tokenizer) from
// the working directory: run from the repository root.
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

// Whether `s` is valid UTF-8 (shortest forms, no surrogates, up to U+10FFFF).
bool ValidUtf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? c : c & (0x7f >> n);
    for (int k = 1; k < n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff)) {
      return false;
    }
    i += static_cast<size_t>(n);
  }
  return true;
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
  if (ValidUtf8(text)) {
    auto again = Tok().Encode(Tok().Decode(*ids));
    if (!again.ok() || *again != *ids) __builtin_trap();
  }
  return 0;
}

// Tokenizer: a Hugging Face tokenizer.json (byte-level BPE family), text <-> ids exactly as the
// `tokenizers` library computes them.
//
// Encode (no BOS/EOS added):
//   1. the input must be valid UTF-8 (else an error naming the byte offset);
//   2. added tokens with "normalized": false are found in the raw text (longest first; lstrip,
//      rstrip and single_word honoured) and become their ids;
//   3. the rest is normalized (NFC/NFD/NFKC/NFKD, or a Sequence of them, through ICU), then
//      added tokens with "normalized": true are found in it;
//   4. each remaining piece is pre-tokenized (Split regexes, then ByteLevel) and BPE-encoded.
// Decode maps ids to their strings, reverses the byte-level alphabet (an added token whose text
// is outside it contributes its own UTF-8), and replaces invalid UTF-8 by U+FFFD.
//
// Supported components are listed in LoadTokenizer's errors; anything else is refused with the
// component named. Thread-safety: immutable after loading; Encode/Decode may run concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/status.h"

namespace graft {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool single_word = false;
};

class Tokenizer {
 public:
  static Result<std::shared_ptr<const Tokenizer>> FromFile(const std::string& path);
  static Result<std::shared_ptr<const Tokenizer>> FromJsonText(const std::string& text, const std::string& source);
  ~Tokenizer();

  Result<std::vector<int32_t>> Encode(std::string_view text) const;
  std::string Decode(const std::vector<int32_t>& ids, bool skip_special = false) const;
  // The bytes one token stands for (before UTF-8 repair): what a streaming decoder appends.
  std::string TokenBytes(int32_t id) const;

  std::optional<int32_t> TokenToId(std::string_view token) const;
  // One past the largest id (vocabulary and added tokens).
  int32_t vocab_size() const;
  bool IsSpecial(int32_t id) const;
  const std::vector<AddedToken>& added_tokens() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Replaces each maximal invalid UTF-8 subsequence by U+FFFD (as Rust's from_utf8_lossy).
std::string Utf8Lossy(std::string_view bytes);

// StreamDecoder: turns a stream of token ids into text pieces that are always complete UTF-8,
// holding back the bytes of a character split across tokens until it completes.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool skip_special = true) : tok_(tok), skip_special_(skip_special) {}
  // Text that became complete with this token (may be empty).
  std::string Push(int32_t id);
  // Whatever is held back, repaired with U+FFFD (end of stream).
  std::string Flush();

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace graft

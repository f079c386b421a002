// The byte-level alphabet of GPT-2-style BPE: every byte maps to one printable code point, so
// that any byte string becomes a string of "characters" the vocabulary can hold.
// Printable Latin-1 bytes (0x21-0x7e, 0xa1-0xac, 0xae-0xff) map to themselves; the other 68
// bytes map, in order, to U+0100, U+0101, ... (so space -> U+0120 'Ġ', newline -> U+010A 'Ċ').
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace graft {

// UTF-8 of the code point byte b maps to.
const std::string& ByteToUnicode(uint8_t b);
// Appends the byte-level form of `bytes` to out.
void ByteLevelEncode(std::string_view bytes, std::string& out);
// Decodes one token's byte-level text back to bytes. Returns false (out untouched) when a
// character is outside the byte-level alphabet: the caller then uses the token's own UTF-8.
bool ByteLevelDecode(std::string_view text, std::string& out);

// Appends the UTF-8 encoding of code point cp.
void AppendUtf8(uint32_t cp, std::string& out);
// Length of the valid UTF-8 prefix of s (stops at the first invalid or truncated sequence).
size_t ValidUtf8Prefix(std::string_view s);

}  // namespace graft

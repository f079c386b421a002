// Python's Unicode-aware string casing and classification, as templates call them (ICU).
//
// ChangeCase: str.lower / str.upper (full mappings: 'ß'.upper() is 'SS'), str.capitalize (the
// first character title-cased, the rest lowered), str.title (a character after a cased one
// lowered, any other title-cased: "they're" -> "They'Re") and Jinja's title filter (each word —
// text after whitespace or one of - ( { [ < — with its first character upper-cased and the rest
// lowered: "they're" -> "They're"), str.swapcase and str.casefold. Malformed UTF-8 is passed
// through as it is.
//
// Classify: str.isalpha / isdigit / isdecimal / isnumeric / isalnum / isspace (every character,
// and at least one) and isupper / islower / istitle (Python's definitions: the cased
// characters). Returns false for a name it does not know; Classifies says which it knows.
//
// CodePoints / CodePointBytes: how Python counts a string (len, widths, positions) in UTF-8.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace graft::jinja {

enum class CaseMode { kLower, kUpper, kCapitalize, kPyTitle, kJinjaTitle, kSwap, kFold };
std::string ChangeCase(const std::string& s, CaseMode mode);

bool Classifies(const std::string& name);
bool Classify(const std::string& s, const std::string& name);

// The code points of UTF-8 text (its non-continuation bytes).
inline size_t CodePoints(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xc0) != 0x80;
  return n;
}
// The bytes of s's first n code points (all of s when it has fewer).
inline size_t CodePointBytes(std::string_view s, size_t n) {
  size_t i = 0;
  for (size_t seen = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xc0) != 0x80 && seen++ == n) break;
  }
  return i;
}

}  // namespace graft::jinja

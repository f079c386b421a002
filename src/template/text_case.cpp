#include "template/text_case.h"

#include <unicode/locid.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/utf8.h>

#include <cctype>
#include <string_view>
#include <unordered_map>

namespace graft::jinja {
namespace {

icu::UnicodeString Wide(const std::string& s) {
  return icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), static_cast<int32_t>(s.size())));
}

std::string Narrow(const icu::UnicodeString& u) {
  std::string out;
  u.toUTF8String(out);
  return out;
}

// Calls f(code point, its UTF-8 bytes) for each character of s; a malformed byte is its own
// "character" with code point -1.
template <typename F>
void EachChar(const std::string& s, F&& f) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const int32_t n = static_cast<int32_t>(s.size());
  for (int32_t i = 0; i < n;) {
    const int32_t start = i;
    UChar32 c;
    U8_NEXT(p, i, n, c);
    f(c, std::string_view(s.data() + start, static_cast<size_t>(i - start)));
  }
}

bool Ascii(const std::string& s) {
  for (unsigned char c : s) if (c >= 0x80) return false;
  return true;
}

// ASCII by a table (most of a template's text, and a character at a time below), the rest by ICU.
std::string Lower(std::string s) {
  if (!Ascii(s)) return Narrow(Wide(s).toLower(icu::Locale::getRoot()));
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
std::string Upper(std::string s) {
  if (!Ascii(s)) return Narrow(Wide(s).toUpper(icu::Locale::getRoot()));
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}
// One character mapped: the simple mapping (one code point, no allocation) unless the character
// changes under the mapping yet has no simple one — its full mapping expands ('ß' upper-cases
// to "SS") — then ICU's full mapping of the character. A string of millions of characters cased
// one by one stays linear and cheap.
enum class One { kLower, kUpper, kTitle };
// ICU's full mappings looked up once a call (a string of one special character repeated
// millions of times asks ICU once).
using FullCache = std::unordered_map<uint64_t, std::string>;
void MapOne(UChar32 c, std::string_view ch, One how, FullCache& cache, std::string& out) {
  if (c < 0x80) {
    out += static_cast<char>(how == One::kLower ? std::tolower(c) : std::toupper(c));
    return;
  }
  const UChar32 simple = how == One::kLower ? u_tolower(c) : how == One::kUpper ? u_toupper(c) : u_totitle(c);
  const UProperty changes = how == One::kLower   ? UCHAR_CHANGES_WHEN_LOWERCASED
                            : how == One::kUpper ? UCHAR_CHANGES_WHEN_UPPERCASED
                                                 : UCHAR_CHANGES_WHEN_TITLECASED;
  // The characters with full mappings of their own (Unicode's SpecialCasing: ß, İ, ŉ, ǰ, the
  // Greek with ypogegrammeni or dialytika, Armenian ligatures, the Latin ligatures) go to ICU.
  const bool special = c == 0xDF || c == 0x130 || c == 0x149 || c == 0x1F0 || c == 0x390 || c == 0x3B0 || c == 0x587 ||
                       (c >= 0x1E96 && c <= 0x1E9E) || (c >= 0x1F00 && c <= 0x1FFF) || (c >= 0xFB00 && c <= 0xFB17);
  if (!special && (simple != c || !u_hasBinaryProperty(c, changes))) {
    if (simple == c) {
      out += ch;
    } else {
      uint8_t buf[4];
      int32_t k = 0;
      U8_APPEND_UNSAFE(buf, k, simple);  // a mapping's result is a valid code point: 4 bytes at most
      out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(k));
    }
    return;
  }
  const uint64_t key = static_cast<uint64_t>(c) << 2 | static_cast<uint64_t>(how);
  auto it = cache.find(key);
  if (it == cache.end()) {
    const std::string one(ch);
    std::string full = how == One::kLower ? Narrow(Wide(one).toLower(icu::Locale::getRoot()))
                       : how == One::kUpper
                           ? Narrow(Wide(one).toUpper(icu::Locale::getRoot()))
                           : Narrow(Wide(one).toTitle(nullptr, icu::Locale::getRoot(),
                                                      U_TITLECASE_NO_LOWERCASE | U_TITLECASE_NO_BREAK_ADJUSTMENT));
    it = cache.emplace(key, std::move(full)).first;
  }
  out += it->second;
}

bool Cased(UChar32 c) { return c >= 0 && u_hasBinaryProperty(c, UCHAR_CASED); }

// Python's \s in a str pattern.
bool PySpace(UChar32 c) { return c >= 0 && ((c >= 0x1c && c <= 0x1f) || u_isUWhiteSpace(c)); }

}  // namespace

std::string ChangeCase(const std::string& s, CaseMode mode) {
  switch (mode) {
    case CaseMode::kLower: return Lower(s);
    case CaseMode::kUpper: return Upper(s);
    case CaseMode::kFold: return Ascii(s) ? Lower(s) : Narrow(Wide(s).foldCase(U_FOLD_CASE_DEFAULT));
    default: break;
  }
  std::string out;
  out.reserve(s.size());
  FullCache cache;
  bool first = true, prev_cased = false, word_start = true;
  EachChar(s, [&](UChar32 c, std::string_view ch) {
    if (c < 0) {
      out += ch;
      first = false, prev_cased = false, word_start = false;
      return;
    }
    switch (mode) {
      case CaseMode::kCapitalize: MapOne(c, ch, first ? One::kTitle : One::kLower, cache, out); break;
      case CaseMode::kPyTitle: MapOne(c, ch, prev_cased ? One::kLower : One::kTitle, cache, out); break;
      case CaseMode::kSwap:
        if (c < 0x80 ? std::islower(c) != 0 : u_isULowercase(c)) MapOne(c, ch, One::kUpper, cache, out);
        else if (c < 0x80 ? std::isupper(c) != 0 : u_isUUppercase(c)) MapOne(c, ch, One::kLower, cache, out);
        else out += ch;
        break;
      default: {  // kJinjaTitle
        const bool sep = PySpace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
        if (sep) out += ch;
        else MapOne(c, ch, word_start ? One::kUpper : One::kLower, cache, out);
        word_start = sep;
        break;
      }
    }
    first = false;
    prev_cased = c < 0x80 ? std::isalpha(c) != 0 : Cased(c);
  });
  return out;
}

bool Classifies(const std::string& name) {
  return name == "isalpha" || name == "isdigit" || name == "isdecimal" || name == "isnumeric" || name == "isalnum" ||
         name == "isspace" || name == "isupper" || name == "islower" || name == "istitle";
}

bool Classify(const std::string& s, const std::string& name) {
  const auto numeric_type = [](UChar32 c) { return u_getIntPropertyValue(c, UCHAR_NUMERIC_TYPE); };
  const auto decimal = [&](UChar32 c) { return numeric_type(c) == U_NT_DECIMAL; };
  const auto digit = [&](UChar32 c) { return numeric_type(c) == U_NT_DECIMAL || numeric_type(c) == U_NT_DIGIT; };
  const auto numeric = [&](UChar32 c) { return numeric_type(c) != U_NT_NONE; };
  const auto alpha = [](UChar32 c) { return u_isalpha(c) != 0; };  // categories L*, Python's isalpha
  if (name == "isupper" || name == "islower" || name == "istitle") {
    // Python: at least one cased character; isupper / islower: none of the other case;
    // istitle: upper- or title-case characters only after uncased ones, lower-case only after cased.
    bool any = false, ok = true, prev_cased = false;
    EachChar(s, [&](UChar32 c, std::string_view) {
      if (c < 0) {
        prev_cased = false;
        return;
      }
      const bool upper = u_isUUppercase(c) || u_istitle(c), lower = u_isULowercase(c);
      if (name == "isupper") {
        if (lower) ok = false;
        any = any || upper;
      } else if (name == "islower") {
        if (upper) ok = false;
        any = any || lower;
      } else {
        if (upper) {
          if (prev_cased) ok = false;
          any = true;
        } else if (lower && !prev_cased) {
          ok = false;
        }
      }
      prev_cased = Cased(c);
    });
    return any && ok;
  }
  if (!Classifies(name) || s.empty()) return false;
  bool ok = true;
  EachChar(s, [&](UChar32 c, std::string_view) {
    if (c < 0) {
      ok = false;
      return;
    }
    if (name == "isalpha") ok = ok && alpha(c);
    else if (name == "isdigit") ok = ok && digit(c);
    else if (name == "isdecimal") ok = ok && decimal(c);
    else if (name == "isnumeric") ok = ok && numeric(c);
    else if (name == "isalnum") ok = ok && (alpha(c) || numeric(c));
    else ok = ok && (PySpace(c) || c == 0x85);
  });
  return ok;
}

}  // namespace graft::jinja

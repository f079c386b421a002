#include "template/text_case.h"

#include <unicode/locid.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/utf8.h>

#include <cctype>
#include <functional>

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
void EachChar(const std::string& s, const std::function<void(UChar32, const std::string&)>& f) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const int32_t n = static_cast<int32_t>(s.size());
  for (int32_t i = 0; i < n;) {
    const int32_t start = i;
    UChar32 c;
    U8_NEXT(p, i, n, c);
    f(c, s.substr(static_cast<size_t>(start), static_cast<size_t>(i - start)));
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
// One character title-cased (full mapping: 'ß' -> 'Ss').
std::string Title1(const std::string& ch) {
  if (Ascii(ch)) return Upper(ch);
  return Narrow(Wide(ch).toTitle(nullptr, icu::Locale::getRoot(), U_TITLECASE_NO_LOWERCASE | U_TITLECASE_NO_BREAK_ADJUSTMENT));
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
  bool first = true, prev_cased = false, word_start = true;
  EachChar(s, [&](UChar32 c, const std::string& ch) {
    if (c < 0) {
      out += ch;
      first = false, prev_cased = false, word_start = false;
      return;
    }
    switch (mode) {
      case CaseMode::kCapitalize: out += first ? Title1(ch) : Lower(ch); break;
      case CaseMode::kPyTitle: out += prev_cased ? Lower(ch) : Title1(ch); break;
      case CaseMode::kSwap: out += u_isULowercase(c) ? Upper(ch) : u_isUUppercase(c) ? Lower(ch) : ch; break;
      default: {  // kJinjaTitle
        const bool sep = PySpace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
        out += sep ? ch : word_start ? Upper(ch) : Lower(ch);
        word_start = sep;
        break;
      }
    }
    first = false;
    prev_cased = Cased(c);
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
    EachChar(s, [&](UChar32 c, const std::string&) {
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
  EachChar(s, [&](UChar32 c, const std::string&) {
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

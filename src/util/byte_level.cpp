#include "util/byte_level.h"

#include <unordered_map>

namespace graft {
namespace {

struct Tables {
  std::array<std::string, 256> to_unicode;
  std::unordered_map<uint32_t, uint8_t> to_byte;  // code point -> byte
  Tables() {
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
      const uint32_t cp = printable ? static_cast<uint32_t>(b) : next++;
      AppendUtf8(cp, to_unicode[b]);
      to_byte[cp] = static_cast<uint8_t>(b);
    }
  }
};

const Tables& T() {
  static const Tables t;
  return t;
}

// Decodes one code point at s[i]; returns its length, 0 if invalid.
size_t DecodeCp(std::string_view s, size_t i, uint32_t* cp) {
  const auto c = static_cast<uint8_t>(s[i]);
  size_t n;
  uint32_t v;
  if (c < 0x80) { *cp = c; return 1; }
  if ((c & 0xe0) == 0xc0) { n = 2; v = c & 0x1f; }
  else if ((c & 0xf0) == 0xe0) { n = 3; v = c & 0x0f; }
  else if ((c & 0xf8) == 0xf0) { n = 4; v = c & 0x07; }
  else return 0;
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    const auto cc = static_cast<uint8_t>(s[i + k]);
    if ((cc & 0xc0) != 0x80) return 0;
    v = (v << 6) | (cc & 0x3f);
  }
  if ((n == 2 && v < 0x80) || (n == 3 && v < 0x800) || (n == 4 && (v < 0x10000 || v > 0x10ffff)) ||
      (v >= 0xd800 && v <= 0xdfff)) {
    return 0;
  }
  *cp = v;
  return n;
}

}  // namespace

const std::string& ByteToUnicode(uint8_t b) { return T().to_unicode[b]; }

void ByteLevelEncode(std::string_view bytes, std::string& out) {
  const auto& t = T();
  for (char c : bytes) out += t.to_unicode[static_cast<uint8_t>(c)];
}

bool ByteLevelDecode(std::string_view text, std::string& out) {
  const auto& t = T();
  std::string tmp;
  tmp.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    uint32_t cp;
    const size_t n = DecodeCp(text, i, &cp);
    if (n == 0) return false;
    auto it = t.to_byte.find(cp);
    if (it == t.to_byte.end()) return false;
    tmp.push_back(static_cast<char>(it->second));
    i += n;
  }
  out += tmp;
  return true;
}

void AppendUtf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xc0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xe0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else {
    out.push_back(static_cast<char>(0xf0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
}

size_t ValidUtf8Prefix(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    uint32_t cp;
    const size_t n = DecodeCp(s, i, &cp);
    if (n == 0) break;
    i += n;
  }
  return i;
}

}  // namespace graft

#include "tokenizer/tokenizer.h"

#include <fmt/core.h>
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tokenizer/bpe.h"
#include "util/byte_level.h"
#include "tokenizer/regex_split.h"
#include "util/json_depth.h"
#include "util/json_field.h"

namespace graft {
namespace {

using json = nlohmann::json;

constexpr uint64_t kMaxTokenizerBytes = 256ull << 20;
// GPT-2's pre-tokenizer regex, used by ByteLevel with use_regex = true.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

bool IsAscii(std::string_view s) {
  for (char c : s) if (static_cast<uint8_t>(c) >= 0x80) return false;
  return true;
}

bool IsWordByte(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || (static_cast<uint8_t>(c) >= 0x80); }
bool IsSpaceByte(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

}  // namespace

struct Tokenizer::Impl {
  std::unique_ptr<BpeModel> bpe;
  std::vector<AddedToken> added;               // as listed in the file
  std::vector<const icu::Normalizer2*> norms;  // applied in order
  std::vector<std::shared_ptr<RegexSplitter>> splits;
  bool add_prefix_space = false;
  std::vector<std::string> id_to_added;  // by id; empty when not an added token
  std::vector<bool> special;
  int32_t size = 0;

  // Splits `text` into ordered segments: either an added token id or a stretch of text.
  struct Segment {
    int32_t id;  // -1: text
    std::string_view text;
  };
  void SplitAdded(std::string_view text, bool normalized, std::vector<Segment>& out) const;
  Result<std::string> Normalize(std::string_view text) const;
  Status EncodeText(std::string_view text, std::vector<int32_t>& ids) const;
};

void Tokenizer::Impl::SplitAdded(std::string_view text, bool normalized, std::vector<Segment>& out) const {
  // Candidates: added tokens of this kind, longest first so the longest match wins.
  std::vector<const AddedToken*> cands;
  for (const auto& a : added) if (a.normalized == normalized && !a.content.empty()) cands.push_back(&a);
  std::sort(cands.begin(), cands.end(), [](auto* x, auto* y) { return x->content.size() > y->content.size(); });
  bool first_byte[256] = {};
  for (auto* a : cands) first_byte[static_cast<uint8_t>(a->content[0])] = true;
  size_t start = 0, i = 0;
  while (i < text.size()) {
    const AddedToken* hit = nullptr;
    if (first_byte[static_cast<uint8_t>(text[i])]) {
      for (auto* a : cands) {
        if (text.compare(i, a->content.size(), a->content) != 0) continue;
        if (a->single_word) {
          const bool left_ok = i == 0 || !IsWordByte(text[i - 1]);
          const size_t e = i + a->content.size();
          const bool right_ok = e >= text.size() || !IsWordByte(text[e]);
          if (!left_ok || !right_ok) continue;
        }
        hit = a;
        break;
      }
    }
    if (!hit) {
      ++i;
      continue;
    }
    size_t b = i, e = i + hit->content.size();
    if (hit->lstrip) while (b > start && IsSpaceByte(text[b - 1])) --b;
    if (hit->rstrip) while (e < text.size() && IsSpaceByte(text[e])) ++e;
    if (b > start) out.push_back({-1, text.substr(start, b - start)});
    out.push_back({hit->id, {}});
    start = i = e;
  }
  if (start < text.size()) out.push_back({-1, text.substr(start)});
}

Result<std::string> Tokenizer::Impl::Normalize(std::string_view text) const {
  if (norms.empty() || IsAscii(text)) return std::string(text);  // ASCII is invariant under every form
  UErrorCode err = U_ZERO_ERROR;
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  for (const auto* n : norms) {
    if (n->quickCheck(u, err) == UNORM_YES) continue;
    u = n->normalize(u, err);
  }
  if (U_FAILURE(err)) return Internal(std::string("ICU normalization failed: ") + u_errorName(err));
  std::string out;
  u.toUTF8String(out);
  return out;
}

Status Tokenizer::Impl::EncodeText(std::string_view text, std::vector<int32_t>& ids) const {
  std::string prefixed;
  if (add_prefix_space && !text.empty() && text[0] != ' ') {
    prefixed = " " + std::string(text);
    text = prefixed;
  }
  std::vector<std::string_view> pieces{text}, next;
  for (const auto& s : splits) {
    next.clear();
    for (auto p : pieces) GRAFT_RETURN_IF_ERROR(s->Split(p, next));
    pieces.swap(next);
  }
  std::string word;
  for (auto p : pieces) {
    word.clear();
    ByteLevelEncode(p, word);
    GRAFT_RETURN_IF_ERROR(bpe->EncodeWord(word, ids));
  }
  return Status::Ok();
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

Result<std::shared_ptr<const Tokenizer>> Tokenizer::FromFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return NotFound(path + ": cannot open");
  const auto size = static_cast<uint64_t>(in.tellg());
  if (size > kMaxTokenizerBytes) return InvalidArgument(fmt::format("{}: {} bytes is larger than the limit", path, size));
  in.seekg(0);
  std::string text(size, '\0');
  in.read(text.data(), static_cast<std::streamsize>(size));
  return FromJsonText(text, path);
}

namespace {

Status ParseNormalizer(const json& n, const std::string& src, std::vector<const icu::Normalizer2*>& out) {
  if (n.is_null()) return Status::Ok();
  GRAFT_ASSIGN_OR_RETURN(const std::string type, StringField(n, "type", "", src + ": normalizer"));
  UErrorCode err = U_ZERO_ERROR;
  if (type == "Sequence") {
    auto it = n.find("normalizers");
    if (it == n.end() || !it->is_array()) return InvalidArgument(src + ": normalizer Sequence without \"normalizers\"");
    for (const auto& e : *it) GRAFT_RETURN_IF_ERROR(ParseNormalizer(e, src, out));
    return Status::Ok();
  }
  const icu::Normalizer2* norm = nullptr;
  if (type == "NFC") norm = icu::Normalizer2::getNFCInstance(err);
  else if (type == "NFD") norm = icu::Normalizer2::getNFDInstance(err);
  else if (type == "NFKC") norm = icu::Normalizer2::getNFKCInstance(err);
  else if (type == "NFKD") norm = icu::Normalizer2::getNFKDInstance(err);
  else return Unsupported(fmt::format("{}: normalizer \"{}\" is not supported (NFC, NFD, NFKC, NFKD, Sequence)", src, type));
  if (U_FAILURE(err) || !norm) return Internal("ICU: cannot load the " + type + " normalizer");
  out.push_back(norm);
  return Status::Ok();
}

// Fills splits / add_prefix_space; requires exactly one ByteLevel step, last.
struct PreTokenizerSpec {
  std::vector<std::shared_ptr<RegexSplitter>> splits;
  bool add_prefix_space = false;
  bool byte_level = false;
};

Status ParsePreTokenizer(const json& p, const std::string& src, PreTokenizerSpec& spec) {
  if (p.is_null()) return Unsupported(src + ": a tokenizer without a ByteLevel pre-tokenizer is not supported");
  GRAFT_ASSIGN_OR_RETURN(const std::string type, StringField(p, "type", "", src + ": pre_tokenizer"));
  if (type == "Sequence") {
    auto it = p.find("pretokenizers");
    if (it == p.end() || !it->is_array()) return InvalidArgument(src + ": pre_tokenizer Sequence without \"pretokenizers\"");
    for (const auto& e : *it) {
      if (spec.byte_level) return Unsupported(src + ": pre-tokenizers after ByteLevel are not supported");
      GRAFT_RETURN_IF_ERROR(ParsePreTokenizer(e, src, spec));
    }
    return Status::Ok();
  }
  if (type == "Split") {
    auto pat = p.find("pattern");
    if (pat == p.end() || !pat->is_object() || !pat->contains("Regex") || !(*pat)["Regex"].is_string()) {
      return Unsupported(src + ": Split pre-tokenizer without a {\"Regex\": ...} pattern is not supported");
    }
    GRAFT_ASSIGN_OR_RETURN(const std::string behavior, StringField(p, "behavior", "", src + ": Split pre-tokenizer"));
    GRAFT_ASSIGN_OR_RETURN(const bool invert, BoolField(p, "invert", false, src + ": Split pre-tokenizer"));
    if (behavior != "Isolated" || invert) {
      return Unsupported(fmt::format("{}: Split behavior \"{}\" (invert {}) is not supported (Isolated only)", src,
                                     behavior, invert));
    }
    auto splitter = RegexSplitter::Compile((*pat)["Regex"].get<std::string>());
    if (!splitter.ok()) return splitter.status().WithContext(src);
    spec.splits.push_back(std::move(splitter).value());
    return Status::Ok();
  }
  if (type == "ByteLevel") {
    spec.byte_level = true;
    GRAFT_ASSIGN_OR_RETURN(spec.add_prefix_space, BoolField(p, "add_prefix_space", false, src + ": ByteLevel pre-tokenizer"));
    GRAFT_ASSIGN_OR_RETURN(const bool use_regex, BoolField(p, "use_regex", true, src + ": ByteLevel pre-tokenizer"));
    if (use_regex) {
      GRAFT_ASSIGN_OR_RETURN(auto splitter, RegexSplitter::Compile(kGpt2Pattern));
      spec.splits.push_back(std::move(splitter));
    }
    return Status::Ok();
  }
  return Unsupported(fmt::format("{}: pre-tokenizer \"{}\" is not supported (Sequence, Split, ByteLevel)", src, type));
}

}  // namespace

Result<std::shared_ptr<const Tokenizer>> Tokenizer::FromJsonText(const std::string& text, const std::string& src) {
  GRAFT_RETURN_IF_ERROR(CheckJsonDepth(text, src));
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument(src + ": not a JSON object");
  auto impl = std::make_unique<Impl>();
  if (!j.contains("model")) return InvalidArgument(src + ": missing \"model\"");
  GRAFT_ASSIGN_OR_RETURN(impl->bpe, BpeModel::FromJson(j["model"], src));
  GRAFT_RETURN_IF_ERROR(ParseNormalizer(j.value("normalizer", json()), src, impl->norms));
  PreTokenizerSpec pre;
  GRAFT_RETURN_IF_ERROR(ParsePreTokenizer(j.value("pre_tokenizer", json()), src, pre));
  impl->splits = std::move(pre.splits);
  impl->add_prefix_space = pre.add_prefix_space;
  if (!pre.byte_level) return Unsupported(src + ": only byte-level BPE tokenizers (a ByteLevel pre-tokenizer) are supported");
  const json dec = j.value("decoder", json());
  if (!dec.is_object() || !dec.contains("type") || dec["type"] != "ByteLevel") {
    return Unsupported(fmt::format("{}: decoder {} is not supported (ByteLevel only)", src, dec.dump()));
  }
  impl->size = impl->bpe->size();
  auto added = j.find("added_tokens");
  if (added != j.end() && !added->is_null()) {
    if (!added->is_array()) return InvalidArgument(src + ": \"added_tokens\" is not an array");
    for (const auto& a : *added) {
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
          !a["content"].is_string()) {
        return InvalidArgument(fmt::format("{}: added token {} needs an integer \"id\" and a string \"content\"", src, a.dump()));
      }
      AddedToken t;
      // Read wide: an id past int32's range must not wrap into a plausible one.
      if (a["id"].get<int64_t>() < 0 || a["id"].get<int64_t>() > (1 << 30)) {
        return InvalidArgument(fmt::format("{}: added token id {} is out of range", src, a["id"].dump()));
      }
      t.id = a["id"].get<int32_t>();
      t.content = a["content"].get<std::string>();
      const std::string where = fmt::format("{}: added token {}", src, t.id);
      GRAFT_ASSIGN_OR_RETURN(t.special, BoolField(a, "special", false, where));
      GRAFT_ASSIGN_OR_RETURN(t.lstrip, BoolField(a, "lstrip", false, where));
      GRAFT_ASSIGN_OR_RETURN(t.rstrip, BoolField(a, "rstrip", false, where));
      GRAFT_ASSIGN_OR_RETURN(t.normalized, BoolField(a, "normalized", !t.special, where));
      GRAFT_ASSIGN_OR_RETURN(t.single_word, BoolField(a, "single_word", false, where));
      impl->size = std::max(impl->size, t.id + 1);
      impl->added.push_back(std::move(t));
    }
  }
  impl->id_to_added.resize(static_cast<size_t>(impl->size));
  impl->special.assign(static_cast<size_t>(impl->size), false);
  for (const auto& a : impl->added) {
    impl->id_to_added[a.id] = a.content;
    impl->special[a.id] = a.special;
  }
  for (int32_t id = 0; id < impl->size; ++id) {
    if (impl->id_to_added[id].empty() && (id >= impl->bpe->size() || impl->bpe->IdToToken(id).empty())) {
      return InvalidArgument(fmt::format("{}: id {} has no token (ids must be dense)", src, id));
    }
  }
  return std::shared_ptr<const Tokenizer>(new Tokenizer(std::move(impl)));
}

Result<std::vector<int32_t>> Tokenizer::Encode(std::string_view text) const {
  const size_t valid = ValidUtf8Prefix(text);
  if (valid != text.size()) {
    return InvalidArgument(fmt::format("text is not valid UTF-8 (byte {} of {})", valid, text.size()));
  }
  std::vector<int32_t> ids;
  std::vector<Impl::Segment> raw, norm;
  impl_->SplitAdded(text, /*normalized=*/false, raw);
  for (const auto& seg : raw) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
      continue;
    }
    GRAFT_ASSIGN_OR_RETURN(std::string n, impl_->Normalize(seg.text));
    norm.clear();
    impl_->SplitAdded(n, /*normalized=*/true, norm);
    for (const auto& s : norm) {
      if (s.id >= 0) ids.push_back(s.id);
      else GRAFT_RETURN_IF_ERROR(impl_->EncodeText(s.text, ids));
    }
  }
  return ids;
}

std::string Tokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || id >= impl_->size) return {};
  const std::string& text = impl_->id_to_added[id].empty() ? impl_->bpe->IdToToken(id) : impl_->id_to_added[id];
  std::string out;
  if (!ByteLevelDecode(text, out)) out = text;
  return out;
}

std::string Tokenizer::Decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (skip_special && IsSpecial(id)) continue;
    bytes += TokenBytes(id);
  }
  return Utf8Lossy(bytes);
}

std::optional<int32_t> Tokenizer::TokenToId(std::string_view token) const {
  for (const auto& a : impl_->added) if (a.content == token) return a.id;
  const int32_t id = impl_->bpe->TokenToId(token);
  return id >= 0 ? std::optional<int32_t>(id) : std::nullopt;
}

int32_t Tokenizer::vocab_size() const { return impl_->size; }
bool Tokenizer::IsSpecial(int32_t id) const { return id >= 0 && id < impl_->size && impl_->special[id]; }
const std::vector<AddedToken>& Tokenizer::added_tokens() const { return impl_->added; }

std::string Utf8Lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const size_t ok = ValidUtf8Prefix(s.substr(i));
    out.append(s.substr(i, ok));
    i += ok;
    if (i >= s.size()) break;
    // s[i] starts an invalid sequence: consume its maximal valid prefix as one U+FFFD.
    const auto c = static_cast<uint8_t>(s[i]);
    size_t need = 0;
    uint8_t lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) need = 1;
    else if (c >= 0xe0 && c <= 0xef) { need = 2; if (c == 0xe0) lo = 0xa0; if (c == 0xed) hi = 0x9f; }
    else if (c >= 0xf0 && c <= 0xf4) { need = 3; if (c == 0xf0) lo = 0x90; if (c == 0xf4) hi = 0x8f; }
    size_t n = 1;
    for (size_t k = 0; k < need && i + n < s.size(); ++k) {
      const auto cc = static_cast<uint8_t>(s[i + n]);
      if (cc < (k == 0 ? lo : 0x80) || cc > (k == 0 ? hi : 0xbf)) break;
      ++n;
    }
    out += "\xef\xbf\xbd";
    i += n;
  }
  return out;
}

std::string StreamDecoder::Push(int32_t id) {
  if (skip_special_ && tok_.IsSpecial(id)) return {};
  pending_ += tok_.TokenBytes(id);
  // Keep back a trailing sequence that is a valid but incomplete UTF-8 prefix.
  size_t keep = 0;
  for (size_t back = 1; back <= 3 && back <= pending_.size(); ++back) {
    const auto c = static_cast<uint8_t>(pending_[pending_.size() - back]);
    if ((c & 0xc0) == 0x80) continue;  // continuation byte: look further back
    const size_t len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
    if (len > back) keep = back;  // the character is not complete yet
    break;
  }
  std::string out = Utf8Lossy(std::string_view(pending_).substr(0, pending_.size() - keep));
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string StreamDecoder::Flush() {
  std::string out = Utf8Lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace graft

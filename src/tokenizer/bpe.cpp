#include "tokenizer/bpe.h"

#include <fmt/core.h>

#include <nlohmann/json.hpp>
#include <queue>

#include "util/json_field.h"

namespace graft {
namespace {

constexpr size_t kCacheMaxWordBytes = 128;
constexpr size_t kCacheMaxEntries = 1 << 18;

size_t Utf8Len(uint8_t lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xe0) == 0xc0) return 2;
  if ((lead & 0xf0) == 0xe0) return 3;
  return 4;
}

}  // namespace

Result<std::unique_ptr<BpeModel>> BpeModel::FromJson(const nlohmann::json& m, const std::string& source) {
  auto bad = [&](const std::string& what) { return InvalidArgument(fmt::format("{}: model: {}", source, what)); };
  if (!m.is_object()) return bad("not an object");
  GRAFT_ASSIGN_OR_RETURN(const std::string type, StringField(m, "type", "BPE", source + ": model"));
  if (type != "BPE") return Unsupported(fmt::format("{}: model type \"{}\" is not supported (only BPE)", source, type));
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    auto it = m.find(k);
    if (it != m.end() && !it->is_null() && !(it->is_string() && it->get<std::string>().empty())) {
      return Unsupported(fmt::format("{}: model.{} = {} is not supported", source, k, it->dump()));
    }
  }
  if (m.contains("dropout") && !m["dropout"].is_null()) return Unsupported(source + ": BPE dropout is not supported");
  GRAFT_ASSIGN_OR_RETURN(const bool byte_fallback, BoolField(m, "byte_fallback", false, source + ": model"));
  if (byte_fallback) return Unsupported(source + ": BPE byte_fallback is not supported");
  auto model = std::make_unique<BpeModel>();
  GRAFT_ASSIGN_OR_RETURN(model->ignore_merges_, BoolField(m, "ignore_merges", false, source + ": model"));
  auto vocab = m.find("vocab");
  if (vocab == m.end() || !vocab->is_object() || vocab->empty()) return bad("missing or empty \"vocab\" object");
  int64_t max_id = -1;
  for (const auto& [tok, id] : vocab->items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > (1 << 30)) {
      return bad(fmt::format("vocab entry \"{}\" has id {}, not a non-negative integer", tok, id.dump()));
    }
    max_id = std::max(max_id, id.get<int64_t>());
    model->vocab_[tok] = static_cast<int32_t>(id.get<int64_t>());
  }
  model->id_to_token_.resize(static_cast<size_t>(max_id + 1));
  for (const auto& [tok, id] : model->vocab_) {
    if (!model->id_to_token_[static_cast<size_t>(id)].empty()) {
      return bad(fmt::format("id {} is given to both \"{}\" and \"{}\"", id, model->id_to_token_[id], tok));
    }
    model->id_to_token_[static_cast<size_t>(id)] = tok;
  }
  auto merges = m.find("merges");
  if (merges == m.end() || !merges->is_array()) return bad("missing \"merges\" array");
  int32_t rank = 0;
  for (const auto& e : *merges) {
    std::string a, b;
    if (e.is_string()) {  // "a b"
      const std::string s = e.get<std::string>();
      const size_t sp = s.find(' ', 1);
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
        return bad(fmt::format("merge {} \"{}\" is not two tokens separated by one space", rank, s));
      }
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {  // ["a", "b"]
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    } else {
      return bad(fmt::format("merge {} is {}, neither \"a b\" nor [\"a\", \"b\"]", rank, e.dump()));
    }
    const int32_t ia = model->TokenToId(a), ib = model->TokenToId(b), im = model->TokenToId(a + b);
    if (ia < 0 || ib < 0 || im < 0) {
      return bad(fmt::format("merge {} (\"{}\", \"{}\") uses a token that is not in the vocabulary", rank, a, b));
    }
    model->merges_.emplace(Key(ia, ib), Merge{rank, im});  // the first (best) rank wins on duplicates
    ++rank;
  }
  auto unk = m.find("unk_token");
  if (unk != m.end() && unk->is_string()) model->unk_id_ = model->TokenToId(unk->get<std::string>());
  return model;
}

int32_t BpeModel::TokenToId(std::string_view token) const {
  auto it = vocab_.find(std::string(token));
  return it == vocab_.end() ? -1 : it->second;
}

Status BpeModel::EncodeWord(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return Status::Ok();
  const bool cacheable = word.size() <= kCacheMaxWordBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = cache_.find(std::string(word));
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return Status::Ok();
    }
  }
  std::vector<int32_t> ids;
  if (const int32_t whole = ignore_merges_ ? TokenToId(word) : -1; whole >= 0) {
    ids.push_back(whole);
  } else {
    // Symbols: one per character, in a doubly linked list.
    struct Sym {
      int32_t id;
      int32_t prev, next;
    };
    std::vector<Sym> syms;
    for (size_t i = 0; i < word.size();) {
      const size_t n = std::min(Utf8Len(static_cast<uint8_t>(word[i])), word.size() - i);
      int32_t id = TokenToId(word.substr(i, n));
      if (id < 0) {
        if (unk_id_ < 0) {
          return InvalidArgument(fmt::format("character \"{}\" is not in the vocabulary and there is no unk_token",
                                             std::string(word.substr(i, n))));
        }
        id = unk_id_;
      }
      syms.push_back({id, static_cast<int32_t>(syms.size()) - 1, static_cast<int32_t>(syms.size()) + 1});
      i += n;
    }
    syms.back().next = -1;
    struct Cand {
      int32_t rank, pos, left, right;
      bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
    auto push = [&](int32_t pos) {
      if (pos < 0 || syms[pos].next < 0) return;
      auto it = merges_.find(Key(syms[pos].id, syms[syms[pos].next].id));
      if (it != merges_.end()) heap.push({it->second.rank, pos, syms[pos].id, syms[syms[pos].next].id});
    };
    for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i) push(i);
    while (!heap.empty()) {
      const Cand c = heap.top();
      heap.pop();
      Sym& l = syms[c.pos];
      if (l.id != c.left || l.next < 0 || syms[l.next].id != c.right) continue;  // stale
      const int32_t r = l.next;
      l.id = merges_.at(Key(c.left, c.right)).merged;
      l.next = syms[r].next;
      if (l.next >= 0) syms[l.next].prev = c.pos;
      syms[r].id = -1;
      push(l.prev);
      push(c.pos);
    }
    for (int32_t i = 0; i >= 0; i = syms[i].next) ids.push_back(syms[i].id);
  }
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (cache_.size() < kCacheMaxEntries) cache_.emplace(std::string(word), std::move(ids));
  }
  return Status::Ok();
}

}  // namespace graft

// BpeModel: byte-level BPE (Hugging Face "BPE" model type) over a vocabulary of byte-level
// strings and a ranked merge list.
//
// Merges load from either form tokenizer.json uses: "a b" strings (older files) or ["a", "b"]
// pairs (newer). A word is encoded by repeatedly merging the adjacent pair of lowest rank
// (leftmost on ties), as Hugging Face does, in O(n log n) for long words. Results for short
// words are cached.
//
// Thread-safety: Encode may be called concurrently (the cache is locked).
#pragma once

#include <cstdint>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "util/status.h"

namespace graft {

class BpeModel {
 public:
  // model: the "model" object of tokenizer.json.
  static Result<std::unique_ptr<BpeModel>> FromJson(const nlohmann::json& model, const std::string& source);

  // word: byte-level text of one pre-token. Appends its ids.
  Status EncodeWord(std::string_view word, std::vector<int32_t>& out) const;
  // -1 when absent.
  int32_t TokenToId(std::string_view token) const;
  const std::string& IdToToken(int32_t id) const { return id_to_token_[static_cast<size_t>(id)]; }
  // One past the largest id of the vocabulary.
  int32_t size() const { return static_cast<int32_t>(id_to_token_.size()); }
  size_t num_merges() const { return merges_.size(); }

 private:
  struct Merge {
    int32_t rank;
    int32_t merged;
  };
  static uint64_t Key(int32_t a, int32_t b) { return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b); }

  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::unordered_map<uint64_t, Merge> merges_;
  bool ignore_merges_ = false;
  int32_t unk_id_ = -1;
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;  // GUARDED_BY(cache_mu_)
};

}  // namespace graft

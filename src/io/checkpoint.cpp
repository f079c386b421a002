#include "io/checkpoint.h"

#include <fmt/core.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "util/bf16.h"
#include "util/bytes.h"
#include "util/file.h"
#include "util/json_depth.h"

namespace graft {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr uint64_t kMaxIndexBytes = 64ull << 20;

}  // namespace

Result<Checkpoint> Checkpoint::Open(const std::string& dir) {
  Checkpoint c;
  c.dir_ = dir;
  const std::string index_path = (fs::path(dir) / "model.safetensors.index.json").string();
  const std::string single_path = (fs::path(dir) / "model.safetensors").string();
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return NotFound(dir + ": not a directory");

  if (!fs::exists(index_path, ec)) {
    if (!fs::exists(single_path, ec)) {
      return NotFound(fmt::format("{}: neither model.safetensors nor model.safetensors.index.json", dir));
    }
    GRAFT_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(single_path));
    c.files_.push_back(std::make_unique<SafetensorsFile>(std::move(f)));
    for (const auto& t : c.files_[0]->tensors()) c.tensors_[t.name] = TensorRef{c.files_[0].get(), &t};
    return c;
  }

  GRAFT_ASSIGN_OR_RETURN(std::string text, ReadFileLimited(index_path, kMaxIndexBytes));
  GRAFT_RETURN_IF_ERROR(CheckJsonDepth(text, index_path));
  json idx = json::parse(text, nullptr, false);
  if (idx.is_discarded() || !idx.is_object()) return Corrupt(index_path + ": not a JSON object");
  auto wm = idx.find("weight_map");
  if (wm == idx.end() || !wm->is_object() || wm->empty()) {
    return Corrupt(index_path + ": missing or empty \"weight_map\" object");
  }
  std::map<std::string, std::string> weight_map;  // tensor -> shard
  std::map<std::string, std::string> first_tensor_of;  // shard -> a tensor it should hold
  for (const auto& [name, shard] : wm->items()) {
    if (!shard.is_string()) return Corrupt(fmt::format("{}: weight_map['{}'] is not a string", index_path, name));
    const std::string s = shard.get<std::string>();
    if (s.empty() || s.find('/') != std::string::npos || s == "." || s == "..") {
      return Corrupt(fmt::format("{}: weight_map['{}'] = '{}' is not a file name inside the directory",
                                 index_path, name, s));
    }
    weight_map[name] = s;
    first_tensor_of.emplace(s, name);
  }
  std::map<std::string, const SafetensorsFile*> by_shard;
  for (const auto& [shard, some_tensor] : first_tensor_of) {
    const std::string p = (fs::path(dir) / shard).string();
    if (!fs::exists(p, ec)) {
      return NotFound(fmt::format("{}: shard '{}' (holding '{}', per the index) is missing", dir, shard,
                                  some_tensor));
    }
    GRAFT_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(p));
    c.files_.push_back(std::make_unique<SafetensorsFile>(std::move(f)));
    by_shard[shard] = c.files_.back().get();
  }
  uint64_t sum = 0;
  for (const auto& [shard, file] : by_shard) {
    for (const auto& t : file->tensors()) {
      auto it = weight_map.find(t.name);
      if (it == weight_map.end()) {
        return Corrupt(fmt::format("{}: tensor '{}' in shard '{}' is not in the index's weight_map",
                                   dir, t.name, shard));
      }
      if (it->second != shard) {
        return Corrupt(fmt::format("{}: tensor '{}' is in shard '{}' but the index places it in '{}'",
                                   dir, t.name, shard, it->second));
      }
      if (c.tensors_.count(t.name)) {
        return Corrupt(fmt::format("{}: tensor '{}' appears in more than one shard", dir, t.name));
      }
      c.tensors_[t.name] = TensorRef{file, &t};
      sum += t.num_bytes();
    }
  }
  for (const auto& [name, shard] : weight_map) {
    if (!c.tensors_.count(name)) {
      return Corrupt(fmt::format("{}: the index places tensor '{}' in shard '{}', which does not hold it",
                                 dir, name, shard));
    }
  }
  auto meta = idx.find("metadata");
  if (meta != idx.end() && meta->is_object()) {
    auto ts = meta->find("total_size");
    if (ts != meta->end() && ts->is_number_unsigned() && ts->get<uint64_t>() != sum) {
      return Corrupt(fmt::format("{}: metadata.total_size is {} but the shards' tensors hold {} bytes",
                                 index_path, ts->get<uint64_t>(), sum));
    }
  }
  return c;
}

TensorRef Checkpoint::Find(std::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? TensorRef{} : it->second;
}

std::vector<TensorRef> Checkpoint::All() const {
  std::vector<TensorRef> v;
  v.reserve(tensors_.size());
  for (const auto& [n, r] : tensors_) v.push_back(r);
  return v;
}

uint64_t Checkpoint::total_bytes() const {
  uint64_t s = 0;
  for (const auto& [n, r] : tensors_) s += r.info->num_bytes();
  return s;
}

Result<std::vector<float>> ReadAsFloat(const TensorRef& t) {
  const auto n = t.info->num_elements();
  std::vector<float> out(n);
  const uint8_t* p = t.data();
  switch (t.info->dtype) {
    case DType::kF32:
      CopyBytes(out.data(), p, n * 4);
      break;
    case DType::kBF16:
      for (uint64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = Bf16ToFloat(h);
      }
      break;
    case DType::kF16:
      for (uint64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = F16ToFloat(h);
      }
      break;
    default:
      return Unsupported(fmt::format("{}: tensor '{}' has dtype {}; expected BF16, F16 or F32",
                                     t.file->path(), t.info->name, DTypeName(t.info->dtype)));
  }
  return out;
}

}  // namespace graft

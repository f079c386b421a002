#include "io/identity.h"

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "util/file.h"
#include "util/json_depth.h"
#include "util/progress.h"
#include "util/sha256.h"

namespace graft {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// name:size:mtime of every file in the directory, sorted: the cache's validity key.
json Fingerprint(const std::string& dir) {
  json files = json::array();
  std::vector<fs::directory_entry> entries;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.is_regular_file(ec)) entries.push_back(e);
  }
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.path().filename() < b.path().filename(); });
  for (const auto& e : entries) {
    const auto mtime = e.last_write_time(ec).time_since_epoch().count();
    files.push_back({e.path().filename().string(), e.file_size(ec), static_cast<int64_t>(mtime)});
  }
  return files;
}

}  // namespace

Result<std::string> ComputeIdentity(const Checkpoint& ckpt, const std::string& config_json_text) {
  GRAFT_RETURN_IF_ERROR(CheckJsonDepth(config_json_text, ckpt.dir() + "/config.json"));
  json cfg = json::parse(config_json_text, nullptr, false);
  if (cfg.is_discarded()) return InvalidArgument(ckpt.dir() + "/config.json: not valid JSON");
  Sha256 h;
  h.Update("graft-identity-v1\n");
  h.Update(cfg.dump());  // nlohmann::json keeps keys sorted: canonical
  h.Update("\n");
  const auto all = ckpt.All();
  Progress bar("identity " + ckpt.dir(), ckpt.total_bytes(), /*bytes=*/true);
  for (const auto& t : all) {
    h.Update(fmt::format("{}\n{}\n{}\n{}\n", t.info->name, DTypeName(t.info->dtype),
                         fmt::join(t.info->shape, ","), t.info->num_bytes()));
    constexpr uint64_t kStep = 8u << 20;
    for (uint64_t off = 0; off < t.info->num_bytes(); off += kStep) {
      const uint64_t n = std::min(kStep, t.info->num_bytes() - off);
      h.Update(t.data() + off, n);
      bar.Add(n);
    }
    t.file->Release(*t.info);  // hashing streams: keep resident memory near one tensor
  }
  bar.Finish();
  return h.HexDigest();
}

Result<IdentityResult> CachedIdentity(const Checkpoint& ckpt, const std::string& cache_dir) {
  GRAFT_ASSIGN_OR_RETURN(std::string config_text, ReadFileLimited((fs::path(ckpt.dir()) / "config.json").string(), 16u << 20));
  std::error_code ec;
  const std::string abs = fs::absolute(ckpt.dir(), ec).lexically_normal().string();
  const json fingerprint = Fingerprint(ckpt.dir());
  fs::path cache_file;
  if (!cache_dir.empty()) {
    cache_file = fs::path(cache_dir) / "identity" / (Sha256Hex(abs).substr(0, 32) + ".json");
    std::ifstream in(cache_file);
    if (in) {
      json cached = json::parse(in, nullptr, false);
      // A cache file of another shape (damaged, or written by hand) is recomputed, never trusted
      // or thrown on: every field is type-checked before it is read.
      if (!cached.is_discarded() && cached.is_object() && cached.contains("dir") && cached["dir"].is_string() &&
          cached["dir"].get<std::string>() == abs &&
          cached.contains("files") && cached["files"] == fingerprint && cached.contains("identity") &&
          cached["identity"].is_string() && cached["identity"].get<std::string>().size() == 64) {
        return IdentityResult{cached["identity"].get<std::string>(), true};
      }
    }
  }
  GRAFT_ASSIGN_OR_RETURN(std::string id, ComputeIdentity(ckpt, config_text));
  if (!cache_file.empty()) {
    fs::create_directories(cache_file.parent_path(), ec);
    const fs::path tmp = cache_file.string() + ".tmp";
    std::ofstream out(tmp);
    out << json{{"dir", abs}, {"files", fingerprint}, {"identity", id}}.dump(1) << "\n";
    out.close();
    if (out) fs::rename(tmp, cache_file, ec);  // a cache that cannot be written is only slower
  }
  return IdentityResult{id, false};
}

}  // namespace graft

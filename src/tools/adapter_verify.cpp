#include "tools/adapter_verify.h"

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "weights/exact.h"
#include "adapters/lora_loader.h"
#include "model/architecture.h"
#include "io/checkpoint.h"
#include "io/identity.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "util/bytes.h"
#include "util/json_depth.h"
#include "util/json_field.h"
#include "util/sha256.h"

namespace graft {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

Result<json> ReadManifest(const std::string& dir) {
  const std::string path = (fs::path(dir) / "graft_manifest.json").string();
  std::ifstream in(path);
  if (!in) return NotFound(path + ": missing (verify needs the manifest's hashes)");
  std::ostringstream ss;
  ss << in.rdbuf();
  GRAFT_RETURN_IF_ERROR(CheckJsonDepth(ss.str(), path));
  json j = json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Corrupt(path + ": not a JSON object");
  return j;
}

// A field of a JSON object as inspect prints it: a string bare, anything else as JSON, "?" when
// absent or when `j` is not an object (inspect shows what is there; verify judges it).
std::string Shown(const json& j, const char* key) {
  if (!j.is_object()) return "?";
  const auto it = j.find(key);
  if (it == j.end()) return "?";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

std::string HashOf(const SafetensorsFile& f, const TensorInfo& t) {
  Sha256 h;
  h.Update(f.Data(t), t.num_bytes());
  return h.HexDigest();
}

}  // namespace

Status RunVerify(const VerifyJob& job, std::string* report) {
  auto say = [&](const std::string& line) { *report += line + "\n"; };
  GRAFT_ASSIGN_OR_RETURN(ModelConfig cfg, LoadModelConfig(job.base));
  GRAFT_ASSIGN_OR_RETURN(Checkpoint bck, Checkpoint::Open(job.base));
  LoraLoadOptions opt;
  opt.name = job.dir;
  opt.force = job.force;
  opt.base_identity = [&]() -> Result<std::string> {
    GRAFT_ASSIGN_OR_RETURN(IdentityResult id, CachedIdentity(bck, job.cache_dir));
    return id.identity;
  };
  GRAFT_ASSIGN_OR_RETURN(LoraAdapter ad, LoadLoraAdapter(job.dir, cfg, opt));
  say(fmt::format("ok  inventory, shapes, dtypes, values: {} modules, rank {}..{}", ad.num_modules(), ad.min_rank(), ad.max_rank()));
  say(ad.base_identity.empty() ? "--  base identity: the manifest names none"
                               : fmt::format("ok  base identity {}", ad.base_identity));

  GRAFT_ASSIGN_OR_RETURN(json manifest, ReadManifest(job.dir));
  if (!manifest.contains("tensors") || !manifest["tensors"].is_object()) return Corrupt("graft_manifest.json: no \"tensors\" hashes");
  std::vector<std::string> bad;
  int checked = 0;
  for (const auto& [file, hashes] : manifest["tensors"].items()) {
    if (file.find('/') != std::string::npos || !hashes.is_object()) return Corrupt("graft_manifest.json: bad \"tensors\" entry " + file);
    GRAFT_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open((fs::path(job.dir) / file).string()));
    for (const auto& t : f.tensors()) {
      if (!hashes.contains(t.name)) bad.push_back(fmt::format("{}: tensor '{}' is not in the manifest", file, t.name));
    }
    for (const auto& [name, h] : hashes.items()) {
      const TensorInfo* t = f.Find(name);
      if (!t) {
        bad.push_back(fmt::format("{}: tensor '{}' listed in the manifest is missing", file, name));
      } else if (!h.is_string() || HashOf(f, *t) != h.get<std::string>()) {
        bad.push_back(fmt::format("{}: tensor '{}' does not match its SHA-256 in the manifest", file, name));
      }
      ++checked;
    }
  }
  if (!bad.empty()) {
    return Corrupt(fmt::format("{}: {} hash problem(s):\n  - {}", job.dir, bad.size(), fmt::join(bad, "\n  - ")));
  }
  say(fmt::format("ok  {} tensor hashes", checked));

  if (!job.exact) return Status::Ok();
  if (job.merged.empty()) return InvalidArgument("--exact needs --merged DIR");
  if (!manifest.contains("exact")) return InvalidArgument(job.dir + ": the adapter has no exact representation (extract --exact)");
  GRAFT_ASSIGN_OR_RETURN(Checkpoint mck, Checkpoint::Open(job.merged));
  GRAFT_ASSIGN_OR_RETURN(IdentityResult mid, CachedIdentity(mck, job.cache_dir));
  const std::string mpath = job.dir + "/graft_manifest.json";
  GRAFT_ASSIGN_OR_RETURN(const std::string merged_identity, StringField(manifest, "merged_identity", "", mpath));
  if (merged_identity != mid.identity) {
    return InvalidArgument(fmt::format("{} has identity {} but the adapter was extracted from {}", job.merged, mid.identity,
                                       merged_identity));
  }
  const json& exact = manifest["exact"];
  GRAFT_ASSIGN_OR_RETURN(const int64_t residual_elements, Int64Field(exact, "residual_elements", 0, mpath + " \"exact\""));
  GRAFT_ASSIGN_OR_RETURN(const int64_t residual_bytes, Int64Field(exact, "residual_bytes", 0, mpath + " \"exact\""));
  if (!manifest.contains("modules") || !manifest["modules"].is_object()) {
    return Corrupt(mpath + ": no \"modules\" object (the projections the exact representation covers)");
  }
  GRAFT_ASSIGN_OR_RETURN(SafetensorsFile ex, SafetensorsFile::Open((fs::path(job.dir) / "graft_exact.safetensors").string()));
  GRAFT_ASSIGN_OR_RETURN(SafetensorsFile lf, SafetensorsFile::Open((fs::path(job.dir) / "adapter_model.safetensors").string()));
  int projections = 0;
  for (const auto& [module, info] : manifest["modules"].items()) {
    const std::string tensor = module + ".weight";
    TensorRef b = bck.Find(tensor), m = mck.Find(tensor);
    const TensorInfo* a_t = lf.Find("base_model.model." + module + ".lora_A.weight");
    const TensorInfo* b_t = lf.Find("base_model.model." + module + ".lora_B.weight");
    const TensorInfo* idx = ex.Find(module + ".exact_index");
    const TensorInfo* val = ex.Find(module + ".exact_value");
    if (!b.file || !m.file || !a_t || !b_t || !idx || !val) {
      return Corrupt(fmt::format("{}: the exact representation of {} is incomplete", job.dir, module));
    }
    if (b.info->dtype != DType::kBF16 || m.info->dtype != DType::kBF16 || idx->dtype != DType::kU8 || val->dtype != DType::kBF16) {
      return Corrupt(fmt::format("{}: unexpected dtypes for {}", job.dir, module));
    }
    // The product reads A as [r, K] and B as [N, r] over a base and merged weight of [N, K].
    const auto& bs = b.info->shape;
    const bool shapes_ok = bs.size() == 2 && m.info->shape == bs && a_t->shape.size() == 2 && b_t->shape.size() == 2 &&
                           a_t->shape[1] == bs[1] && b_t->shape[0] == bs[0] && b_t->shape[1] == a_t->shape[0] &&
                           a_t->shape[0] > 0 && a_t->shape[0] <= bs[1];
    if (!shapes_ok) {
      return Corrupt(fmt::format("{}: the shapes of {} do not fit (base {}, merged {}, lora_A {}, lora_B {})", job.dir, module,
                                 fmt::join(bs, "x"), fmt::join(m.info->shape, "x"), fmt::join(a_t->shape, "x"),
                                 fmt::join(b_t->shape, "x")));
    }
    GRAFT_ASSIGN_OR_RETURN(std::vector<float> a, ReadAsFloat(TensorRef{&lf, a_t}));
    GRAFT_ASSIGN_OR_RETURN(std::vector<float> bb, ReadAsFloat(TensorRef{&lf, b_t}));
    const int64_t n = bs[0], k = bs[1];
    const int r = static_cast<int>(a_t->shape[0]);
    std::vector<uint16_t> base(static_cast<size_t>(n * k));
    CopyBytes(base.data(), b.data(), base.size() * 2);
    std::vector<uint16_t> rec = ReconstructBf16(base.data(), n, k, a.data(), bb.data(), r);
    ExactResidual res;
    res.index_stream.assign(ex.Data(*idx), ex.Data(*idx) + idx->num_bytes());
    res.values.resize(val->num_elements());
    CopyBytes(res.values.data(), ex.Data(*val), val->num_bytes());
    GRAFT_RETURN_IF_ERROR(ApplyResidual(res, rec).WithContext(module));
    int64_t diff = 0;
    for (int64_t i = 0; i < n * k; ++i) {
      uint16_t mv;
      std::memcpy(&mv, m.data() + 2 * i, 2);
      diff += rec[i] != mv;
    }
    if (diff) return Corrupt(fmt::format("{}: reconstruction differs from the merged weights in {} of {} elements", module, diff, n * k));
    ++projections;
  }
  say(fmt::format("ok  exact: {} projections reconstruct the merged bf16 weights bit for bit ({} residual elements, {} bytes)",
                  projections, residual_elements, residual_bytes));
  return Status::Ok();
}

Result<std::string> InspectAdapter(const std::string& dir) {
  std::ifstream in(fs::path(dir) / "adapter_config.json");
  if (!in) return NotFound(dir + ": no adapter_config.json");
  GRAFT_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open((fs::path(dir) / "adapter_model.safetensors").string()));
  std::ostringstream ss;
  ss << in.rdbuf();
  GRAFT_RETURN_IF_ERROR(CheckJsonDepth(ss.str(), dir + "/adapter_config.json"));
  json cfg = json::parse(ss.str(), nullptr, false);
  if (cfg.is_discarded()) return Corrupt(dir + "/adapter_config.json: not JSON");
  std::string out = fmt::format("adapter   {}\nconfig    r {} lora_alpha {} rslora {} targets {}\n", dir, Shown(cfg, "r"),
                                Shown(cfg, "lora_alpha"), Shown(cfg, "use_rslora"), Shown(cfg, "target_modules"));
  uint64_t bytes = 0;
  out += fmt::format("{:<64} {:>6} {:>14} {:>10}\n", "module", "rank", "A / B shape", "bytes");
  for (const auto& t : f.tensors()) {
    bytes += t.num_bytes();
    const std::string suffix = ".lora_A.weight";
    if (t.name.size() <= suffix.size() || t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    const std::string module = t.name.substr(0, t.name.size() - suffix.size());
    const TensorInfo* b = f.Find(module + ".lora_B.weight");
    out += fmt::format("{:<64} {:>6} {:>14} {:>10}\n", module.substr(std::min<size_t>(module.size(), 17)), t.shape.size() ? t.shape[0] : 0,
                       fmt::format("{}x{}/{}x{}", t.shape.size() > 1 ? t.shape[0] : 0, t.shape.size() > 1 ? t.shape[1] : 0,
                                   b && b->shape.size() > 1 ? b->shape[0] : 0, b && b->shape.size() > 1 ? b->shape[1] : 0),
                       t.num_bytes() + (b ? b->num_bytes() : 0));
  }
  out += fmt::format("tensors   {} ({:.2f} MB)\n", f.tensors().size(), bytes / 1e6);
  std::ifstream mi(fs::path(dir) / "graft_manifest.json");
  if (mi) {
    std::ostringstream ms;
    ms << mi.rdbuf();
    GRAFT_RETURN_IF_ERROR(CheckJsonDepth(ms.str(), dir + "/graft_manifest.json"));
    json m = json::parse(ms.str(), nullptr, false);
    if (!m.is_discarded()) {
      out += fmt::format("manifest  base {} | merged {} | tool {}\n", Shown(m, "base_identity"), Shown(m, "merged_identity"),
                         Shown(m, "tool"));
      if (m.is_object() && m.contains("exact")) {
        const json& e = m["exact"];
        out += fmt::format("exact     {} residual elements, {} bytes (vs {} bytes of bf16 projections)\n",
                           Shown(e, "residual_elements"), Shown(e, "residual_bytes"), Shown(e, "touched_projection_bf16_bytes"));
      }
      if (m.is_object() && m.contains("quality")) out += fmt::format("quality   {}\n", m["quality"].dump());
      if (m.is_object() && m.contains("other_differences") && !m["other_differences"].empty()) {
        out += fmt::format("other     {}\n", m["other_differences"].dump());
      }
    }
  }
  return out;
}

}  // namespace graft

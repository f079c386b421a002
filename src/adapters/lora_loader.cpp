#include "adapters/lora_loader.h"

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "adapters/peft_config.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "model/projections.h"
#include "util/bf16.h"
#include "util/bytes.h"
#include "util/file.h"
#include "util/json_depth.h"

namespace graft {
namespace {

namespace fs = std::filesystem;

constexpr const char* kKeyPrefix = "base_model.model.";
constexpr size_t kMaxReported = 40;

struct ModuleTensors {
  const TensorInfo* a = nullptr;
  const TensorInfo* b = nullptr;
};

// "model.layers.3.self_attn.q_proj" -> prefix "model.", layer 3, path "self_attn.q_proj".
bool SplitModule(const std::string& module, std::string* prefix, int* layer, std::string* path) {
  const size_t at = module.find("layers.");
  if (at == std::string::npos || (at > 0 && module[at - 1] != '.')) return false;
  size_t p = at + 7, q = p;
  while (q < module.size() && std::isdigit(static_cast<unsigned char>(module[q]))) ++q;
  if (q == p || q >= module.size() || module[q] != '.' || q - p > 6) return false;
  *prefix = module.substr(0, at);
  *layer = std::stoi(module.substr(p, q - p));
  *path = module.substr(q + 1);
  return true;
}

bool AllFinite(const Weight& w) {
  for (int64_t i = 0, n = w.rows * w.cols; i < n; ++i)
    if (!std::isfinite(w.at(i))) return false;
  return true;
}

Result<Weight> ToWeight(const SafetensorsFile& f, const TensorInfo& t) {
  Weight w;
  w.name = t.name;
  w.rows = t.shape[0];
  w.cols = t.shape[1];
  if (t.dtype == DType::kBF16) {
    w.is_bf16 = true;
    w.bf16.resize(t.num_elements());
    CopyBytes(w.bf16.data(), f.Data(t), t.num_bytes());
  } else {
    GRAFT_ASSIGN_OR_RETURN(w.f32, ReadAsFloat(TensorRef{&f, &t}));
  }
  return w;
}

// The name an "other_differences" entry gives its tensor ("?" when the entry is not an object
// with a string "tensor": the manifest is input, and a message about it must not throw).
std::string OtherTensorName(const nlohmann::json& e) {
  if (!e.is_object()) return "?";
  const auto it = e.find("tensor");
  return it != e.end() && it->is_string() ? it->get<std::string>() : "?";
}

// graft_exact.safetensors: for every module, "<module>.exact_index" (U8 varints) and
// "<module>.exact_value" (BF16), decoded and indexed now (weights/exact.h); nothing else.
void LoadExact(const std::string& dir, const nlohmann::json& mj, const std::string& prefix, const ModelConfig& cfg,
               LoraAdapter& ad, std::vector<std::string>& problems) {
  std::string mode = "lora";
  if (auto it = mj.find("default_mode"); it != mj.end()) {
    if (!it->is_string() || (*it != "lora" && *it != "exact")) {
      problems.push_back("graft_manifest.json: \"default_mode\" must be \"lora\" or \"exact\"");
      return;
    }
    mode = it->get<std::string>();
  }
  auto ex = mj.find("exact");
  if (ex == mj.end() || ex->is_null()) {
    if (mode == "exact") problems.push_back("graft_manifest.json: \"default_mode\" is \"exact\" but the adapter has no exact representation");
    return;
  }
  if (!ex->is_object()) {
    problems.push_back("graft_manifest.json: \"exact\" must be an object");
    return;
  }
  if (auto other = mj.find("other_differences"); other != mj.end() && other->is_array() && !other->empty()) {
    problems.push_back(fmt::format("graft_manifest.json: {} tensor(s) besides the projections differ from the base (e.g. {}); "
                                   "exact mode reproduces projections only, so it cannot serve this release",
                                   other->size(), OtherTensorName((*other)[0])));
    return;
  }
  const std::string path = (fs::path(dir) / "graft_exact.safetensors").string();
  auto opened = SafetensorsFile::Open(path);
  if (!opened.ok()) {
    problems.push_back(fmt::format("the manifest lists an exact representation: {}", opened.status().message()));
    return;
  }
  const SafetensorsFile& f = opened.value();
  size_t used = 0;
  for (int layer = 0; layer < cfg.num_layers; ++layer) {
    for (const auto& p : LayerProjections(cfg, cfg.layer_kinds[layer])) {
      for (LoraModule& m : ad.layers[static_cast<size_t>(layer)].targets[static_cast<size_t>(p.target)]) {
        if (m.row_offset != p.row_offset || m.b.rows != p.rows) continue;
        const std::string module = prefix + m.name;
        const TensorInfo* idx = f.Find(module + ".exact_index");
        const TensorInfo* val = f.Find(module + ".exact_value");
        if (!idx || !val) {
          problems.push_back(fmt::format("graft_exact.safetensors: no {}.exact_{} (every module needs its residual)", module,
                                         idx ? "value" : "index"));
          continue;
        }
        used += 2;
        if (idx->dtype != DType::kU8 || idx->shape.size() != 1 || val->dtype != DType::kBF16 || val->shape.size() != 1) {
          problems.push_back(fmt::format("graft_exact.safetensors: {}: expected a 1-D U8 index and a 1-D BF16 value tensor", module));
          continue;
        }
        ExactResidual res;
        res.index_stream.assign(f.Data(*idx), f.Data(*idx) + idx->num_bytes());
        res.values.resize(static_cast<size_t>(val->num_elements()));
        CopyBytes(res.values.data(), f.Data(*val), val->num_bytes());
        auto indexed = IndexResidual(std::move(res), p.rows * p.cols);
        if (!indexed.ok()) {
          problems.push_back(fmt::format("graft_exact.safetensors: {}: {}", module, indexed.status().message()));
          continue;
        }
        m.exact = std::make_shared<const IndexedResidual>(std::move(indexed).value());
      }
    }
  }
  if (used != f.tensors().size()) {
    problems.push_back(fmt::format("graft_exact.safetensors: {} tensor(s) belong to no module of the adapter",
                                   f.tensors().size() - used));
  }
  if (problems.empty()) {
    ad.has_exact = true;
    ad.default_exact = mode == "exact";
  }
}

}  // namespace

Result<LoraAdapter> LoadLoraAdapter(const std::string& dir, const ModelConfig& cfg, const LoraLoadOptions& opt) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return NotFound(dir + ": not a directory");
  const std::string cfg_path = (fs::path(dir) / "adapter_config.json").string();
  const std::string st_path = (fs::path(dir) / "adapter_model.safetensors").string();
  if (!fs::exists(cfg_path, ec)) return NotFound(dir + ": no adapter_config.json (is this a PEFT adapter?)");
  if (!fs::exists(st_path, ec)) {
    if (fs::exists(fs::path(dir) / "adapter_model.bin", ec)) {
      return Unsupported(dir + ": adapter_model.bin is a pickle, which graft does not load; save the adapter with "
                               "safetensors (save_pretrained(safe_serialization=True))");
    }
    return NotFound(dir + ": no adapter_model.safetensors");
  }
  GRAFT_ASSIGN_OR_RETURN(std::string cfg_text, ReadFileLimited(cfg_path, 16u << 20));
  GRAFT_ASSIGN_OR_RETURN(PeftConfig pc, PeftConfig::Parse(cfg_text, cfg_path));
  GRAFT_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(st_path));

  LoraAdapter ad;
  ad.name = opt.name;
  ad.dir = dir;
  ad.layers.resize(static_cast<size_t>(cfg.num_layers));
  std::vector<std::string> problems;

  // 1. Every key: base_model.model.<module>.lora_{A,B}.weight of a known projection.
  std::map<std::string, ModuleTensors> modules;  // full module name -> tensors
  std::string prefix;
  for (const auto& t : file.tensors()) {
    const std::string& key = t.name;
    if (key.rfind(kKeyPrefix, 0) != 0) {
      problems.push_back(fmt::format("{}: key does not start with \"{}\"", key, kKeyPrefix));
      continue;
    }
    std::string rest = key.substr(std::strlen(kKeyPrefix));
    auto ends = [&](const std::string& s) { return rest.size() > s.size() && rest.compare(rest.size() - s.size(), s.size(), s) == 0; };
    bool is_a = false;
    if (ends(".lora_A.weight")) is_a = true;
    else if (ends(".lora_B.weight")) is_a = false;
    else {
      std::string why = "unknown tensor suffix";
      if (rest.find("lora_embedding_") != std::string::npos) why = "embedding LoRA is not supported";
      else if (rest.find("lora_magnitude_vector") != std::string::npos) why = "DoRA magnitude vectors are not supported";
      else if (ends(".lora_B.bias")) why = "LoRA B biases are not supported";
      else if (ends(".bias")) why = "bias tensors are not supported (bias must be \"none\")";
      else if (ends(".weight")) why = "a full replacement module (modules_to_save) is not supported";
      problems.push_back(fmt::format("{}: {}", key, why));
      continue;
    }
    const std::string module = rest.substr(0, rest.size() - std::strlen(".lora_A.weight"));
    std::string mprefix, path;
    int layer = -1;
    if (!SplitModule(module, &mprefix, &layer, &path)) {
      const bool head = module.find("lm_head") != std::string::npos || module.find("embed_tokens") != std::string::npos;
      problems.push_back(fmt::format("{}: module '{}' {}", key, module,
                                     head ? "(embedding or lm_head LoRA) is not supported" : "is not a layer projection graft knows"));
      continue;
    }
    if (mprefix != "model." && mprefix != "model.language_model.") {
      problems.push_back(fmt::format("{}: module prefix '{}' is neither 'model.' nor 'model.language_model.'", key, mprefix));
      continue;
    }
    if (prefix.empty()) prefix = mprefix;
    else if (prefix != mprefix) {
      problems.push_back(fmt::format("{}: mixes module prefixes '{}' and '{}'", key, prefix, mprefix));
      continue;
    }
    if (layer >= cfg.num_layers) {
      problems.push_back(fmt::format("{}: layer {} does not exist (the base has {} layers)", key, layer, cfg.num_layers));
      continue;
    }
    const auto projs = LayerProjections(cfg, cfg.layer_kinds[layer]);
    bool known = false;
    for (const auto& p : projs) known |= p.path == path;
    if (!known) {
      problems.push_back(fmt::format("{}: layer {} ({}) has no projection '{}'", key, layer,
                                     cfg.layer_kinds[layer] == LayerKind::kFullAttention ? "full attention" : "linear attention",
                                     path));
      continue;
    }
    auto& m = modules[module];
    (is_a ? m.a : m.b) = &t;
  }
  if (modules.empty() && problems.empty()) problems.push_back("the adapter holds no LoRA tensors");
  if (prefix.empty()) prefix = cfg.weight_prefix;

  // 2. Targeted modules: nothing extra, nothing missing; shapes, ranks, dtypes, values.
  for (int layer = 0; layer < cfg.num_layers; ++layer) {
    for (const auto& p : LayerProjections(cfg, cfg.layer_kinds[layer])) {
      const std::string module = fmt::format("{}layers.{}.{}", prefix, layer, p.path);
      Result<bool> targets = pc.Targets(module);
      if (!targets.ok()) return targets.status().WithContext(cfg_path);
      const bool targeted = *targets;
      auto it = modules.find(module);
      if (it == modules.end()) {
        if (targeted) problems.push_back(fmt::format("{}: targeted by adapter_config.json but has no tensors", module));
        continue;
      }
      const ModuleTensors mt = it->second;
      modules.erase(it);
      if (!targeted) {
        problems.push_back(fmt::format("{}: has tensors but adapter_config.json does not target it", module));
        continue;
      }
      if (!mt.a || !mt.b) {
        problems.push_back(fmt::format("{}{}.{}: missing (its pair is present)", kKeyPrefix, module, mt.a ? "lora_B.weight" : "lora_A.weight"));
        continue;
      }
      GRAFT_ASSIGN_OR_RETURN(int rank, pc.RankFor(module));
      bool ok = true;
      for (const TensorInfo* t : {mt.a, mt.b}) {
        if (t->dtype != DType::kBF16 && t->dtype != DType::kF16 && t->dtype != DType::kF32) {
          problems.push_back(fmt::format("{}: dtype {} (expected BF16, F16 or F32)", t->name, DTypeName(t->dtype)));
          ok = false;
        }
      }
      const std::vector<int64_t> want_a{rank, p.cols}, want_b{p.rows, rank};
      if (mt.a->shape != want_a) {
        problems.push_back(fmt::format("{}: shape [{}], expected [{}, {}] (rank {} from adapter_config.json, {} inputs)",
                                       mt.a->name, fmt::format("{}", fmt::join(mt.a->shape, ", ")), rank, p.cols, rank, p.cols));
        ok = false;
      }
      if (mt.b->shape != want_b) {
        problems.push_back(fmt::format("{}: shape [{}], expected [{}, {}] ({} outputs, rank {})", mt.b->name,
                                       fmt::format("{}", fmt::join(mt.b->shape, ", ")), p.rows, rank, p.rows, rank));
        ok = false;
      }
      if (!ok) continue;
      LoraModule lm;
      GRAFT_ASSIGN_OR_RETURN(lm.a, ToWeight(file, *mt.a));
      GRAFT_ASSIGN_OR_RETURN(lm.b, ToWeight(file, *mt.b));
      for (const Weight* w : {&lm.a, &lm.b}) {
        if (!AllFinite(*w)) {
          problems.push_back(fmt::format("{}: holds NaN or infinite values", w->name));
          ok = false;
        }
      }
      if (!ok) continue;
      lm.name = fmt::format("layers.{}.{}", layer, p.path);
      lm.row_offset = p.row_offset;
      lm.rank = rank;
      GRAFT_ASSIGN_OR_RETURN(lm.scale, pc.ScaleFor(module, rank));
      ad.layers[layer].targets[static_cast<size_t>(p.target)].push_back(std::move(lm));
    }
  }

  // 3. A manifest that names a base identity must name this base.
  const std::string manifest_path = (fs::path(dir) / "graft_manifest.json").string();
  nlohmann::json mj;
  if (fs::exists(manifest_path, ec)) {
    GRAFT_ASSIGN_OR_RETURN(std::string text, ReadFileLimited(manifest_path, 64u << 20));
    if (Status depth = CheckJsonDepth(text, manifest_path); !depth.ok()) {
      problems.push_back(depth.message());
    } else if (mj = nlohmann::json::parse(text, nullptr, false); mj.is_discarded() || !mj.is_object()) {
      problems.push_back(manifest_path + ": not a JSON object");
      mj = nlohmann::json();
    } else if (mj.contains("base_identity") && mj["base_identity"].is_string()) {
      ad.base_identity = mj["base_identity"].get<std::string>();
      if (!opt.force && opt.base_identity) {
        GRAFT_ASSIGN_OR_RETURN(std::string base, opt.base_identity());
        if (base != ad.base_identity) {
          problems.push_back(fmt::format("graft_manifest.json: made for base {} but the loaded base is {} "
                                         "(pass --force to load it anyway)",
                                         ad.base_identity, base));
        }
      }
    }
  }

  // 4. The exact representation, when the manifest has one (and the serving default).
  if (problems.empty() && mj.is_object() && opt.load_exact) LoadExact(dir, mj, prefix, cfg, ad, problems);

  if (!problems.empty()) {
    std::string m = fmt::format("{}: {} problem{} with this adapter:", dir, problems.size(), problems.size() == 1 ? "" : "s");
    for (size_t i = 0; i < problems.size() && i < kMaxReported; ++i) m += "\n  - " + problems[i];
    if (problems.size() > kMaxReported) m += fmt::format("\n  ... and {} more", problems.size() - kMaxReported);
    if (!pc.base_model_name_or_path.empty()) {
      m += fmt::format("\n  (adapter_config.json says it was made for \"{}\")", pc.base_model_name_or_path);
    }
    return InvalidArgument(m);
  }
  if (opt.bf16_factors && !ad.has_exact) {
    for (LoraLayer& layer : ad.layers) {
      for (auto& mods : layer.targets) {
        for (LoraModule& m : mods) {
          for (Weight* w : {&m.a, &m.b}) {
            if (w->is_bf16) continue;
            w->bf16.resize(w->f32.size());
            for (size_t i = 0; i < w->f32.size(); ++i) w->bf16[i] = FloatToBf16(w->f32[i]);
            w->f32.clear();
            w->f32.shrink_to_fit();
            w->is_bf16 = true;
            ad.factors_rounded = true;
          }
        }
      }
    }
  }
  return ad;
}

}  // namespace graft

#include "model/quant_loader.h"

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <fnmatch.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "util/bytes.h"
#include "util/file.h"
#include "util/json_depth.h"
#include "util/json_field.h"
#include "util/pyregex.h"

namespace graft {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::vector<std::string> StringList(const json& j, const char* key, const std::string& source, Status& st) {
  std::vector<std::string> out;
  if (!j.contains(key) || j[key].is_null()) return out;
  if (!j[key].is_array()) {
    st = InvalidArgument(fmt::format("{}: '{}' must be a list of module names", source, key));
    return out;
  }
  for (const auto& e : j[key]) {
    if (!e.is_string()) {
      st = InvalidArgument(fmt::format("{}: '{}' must be a list of module names", source, key));
      return out;
    }
    out.push_back(e.get<std::string>());
  }
  return out;
}

Result<QuantScheme> FromQuantizationConfig(const json& q, const std::string& source) {
  QuantScheme s;
  s.source = source;
  if (!q.is_object() || !q.contains("quant_method") || !q["quant_method"].is_string()) {
    return InvalidArgument(fmt::format("{}: quantization_config needs a string 'quant_method'", source));
  }
  s.method = q["quant_method"].get<std::string>();
  Status st = Status::Ok();
  if (s.method == "fp8") {
    if (q.contains("fmt") && q["fmt"] != "e4m3") {
      return Unsupported(fmt::format("{}: fp8 format {} (graft reads e4m3)", source, q["fmt"].dump()));
    }
    if (q.contains("activation_scheme") && q["activation_scheme"] != "dynamic") {
      return Unsupported(fmt::format("{}: fp8 activation_scheme {} (graft quantizes activations dynamically, per token)",
                                     source, q["activation_scheme"].dump()));
    }
    const json& b = q.contains("weight_block_size") ? q["weight_block_size"] : json();
    if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || b[0] != b[1] || b[0].get<int64_t>() <= 0 ||
        b[0].get<int64_t>() > 4096) {
      return Unsupported(fmt::format("{}: fp8 weight_block_size {} (graft reads square block scales, e.g. [128, 128])",
                                     source, b.dump()));
    }
    s.block = b[0].get<int>();
    s.skip = StringList(q, "modules_to_not_convert", source, st);
  } else if (s.method == "compressed-tensors") {
    GRAFT_ASSIGN_OR_RETURN(s.format, StringField(q, "format", "", source + ": quantization_config"));
    const json& groups = q.contains("config_groups") ? q["config_groups"] : json::object();
    if (!groups.is_object()) return InvalidArgument(fmt::format("{}: config_groups must be an object", source));
    for (const auto& [name, g] : groups.items()) {
      if (!g.is_object()) return InvalidArgument(fmt::format("{}: config_groups.{} must be an object", source, name));
      if (s.format.empty() && g.contains("format") && g["format"].is_string()) s.format = g["format"].get<std::string>();
      const json& w = g.contains("weights") ? g["weights"] : json();
      if (w.is_object() && w.contains("group_size") && w["group_size"].is_number_integer()) {
        // Read wide: a group size past int's range must not wrap into a plausible one.
        const int64_t group = w["group_size"].get<int64_t>();
        if (group <= 0 || group > (int64_t{1} << 20)) {
          return InvalidArgument(fmt::format("{}: config_groups.{}.weights.group_size {} is out of range (1 to 2^20)",
                                             source, name, w["group_size"].dump()));
        }
        s.group = static_cast<int>(group);
      }
      if (w.is_object() && w.contains("actorder") && !w["actorder"].is_null() && w["actorder"] != false) {
        return Unsupported(fmt::format("{}: config_groups.{}: activation reordering (actorder {}) is not supported", source,
                                       name, w["actorder"].dump()));
      }
    }
    if (s.format != "pack-quantized" && s.format != "float-quantized" && s.format != "nvfp4-pack-quantized") {
      return Unsupported(fmt::format("{}: compressed-tensors format '{}' (graft reads pack-quantized int4, "
                                     "float-quantized fp8 and nvfp4-pack-quantized)",
                                     source, s.format));
    }
    s.skip = StringList(q, "ignore", source, st);
  } else if (s.method == "modelopt") {
    GRAFT_ASSIGN_OR_RETURN(s.format, StringField(q, "quant_algo", "", source + ": quantization_config"));
    if (s.format != "NVFP4") {
      return Unsupported(fmt::format("{}: ModelOpt quant_algo '{}' (graft reads NVFP4)", source, s.format));
    }
    s.skip = StringList(q, "exclude_modules", source, st);
  } else {
    return Unsupported(fmt::format("{}: quant_method '{}' (graft reads fp8, compressed-tensors and modelopt NVFP4 "
                                   "checkpoints; AWQ, GPTQ and MLX layouts are not supported)",
                                   source, s.method));
  }
  GRAFT_RETURN_IF_ERROR(st);
  GRAFT_RETURN_IF_ERROR(s.CheckPatterns());
  return s;
}

bool EndsWithPart(const std::string& name, const std::string& tail) {
  return name == tail || (name.size() > tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0 &&
                          name[name.size() - tail.size() - 1] == '.');
}

// Reads a small float tensor (scales) of any float dtype, checking every value is finite.
Result<std::vector<float>> Scales(const TensorRef& r) {
  GRAFT_ASSIGN_OR_RETURN(std::vector<float> v, ReadAsFloat(r));
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) {
      return InvalidArgument(fmt::format("{}: tensor '{}' element {} is not finite", r.file->path(), r.info->name, i));
    }
  }
  return v;
}

}  // namespace

Status QuantScheme::CheckPatterns() const {
  for (const auto& p : skip) {
    if (method == "compressed-tensors" && p.rfind("re:", 0) == 0) {
      if (Status st = RegexCompiles(p.substr(3)); !st.ok()) {
        return InvalidArgument(fmt::format("{}: ignore pattern '{}' is not a regular expression ({})", source, p, st.message()));
      }
    }
  }
  return Status::Ok();
}

Result<bool> QuantScheme::Skips(const std::string& module) const {
  for (size_t i = 0; i < skip.size(); ++i) {
    const std::string& p = skip[i];
    if (method == "fp8") {
      if (module.find(p) != std::string::npos) return true;
    } else if (method == "compressed-tensors") {
      if (p.rfind("re:", 0) == 0) {
        Result<bool> m = RegexMatchPrefix(p.substr(3), module);
        if (!m.ok()) return m.status().WithContext(fmt::format("{}: ignore pattern '{}'", source, p));
        if (*m) return true;
      } else if (EndsWithPart(module, p)) {
        return true;
      }
    } else if (method == "modelopt") {
      if (fnmatch(p.c_str(), module.c_str(), 0) == 0 || EndsWithPart(module, p)) return true;
    }
  }
  return false;
}

std::string QuantScheme::Describe() const {
  if (none()) return "none";
  if (method == "fp8") return fmt::format("fp8 e4m3 ({}x{} blocks)", block, block);
  return method + " " + format;
}

Result<QuantScheme> LoadQuantScheme(const std::string& dir) {
  const fs::path cfg = fs::path(dir) / "config.json";
  std::error_code ec;
  if (fs::exists(cfg, ec)) {
    GRAFT_ASSIGN_OR_RETURN(std::string text, ReadFileLimited(cfg.string(), 16u << 20));
    GRAFT_RETURN_IF_ERROR(CheckJsonDepth(text, cfg.string()));
    json j = json::parse(text, nullptr, false);
    if (!j.is_object()) return InvalidArgument(cfg.string() + ": not a JSON object");
    if (j.contains("quantization")) {
      return Unsupported(cfg.string() + ": MLX 'quantization' layouts are not supported");
    }
    if (j.contains("quantization_config") && !j["quantization_config"].is_null()) {
      return FromQuantizationConfig(j["quantization_config"], cfg.string());
    }
  }
  const fs::path mo = fs::path(dir) / "hf_quant_config.json";
  if (fs::exists(mo, ec)) {
    GRAFT_ASSIGN_OR_RETURN(std::string text, ReadFileLimited(mo.string(), 16u << 20));
    GRAFT_RETURN_IF_ERROR(CheckJsonDepth(text, mo.string()));
    json j = json::parse(text, nullptr, false);
    if (!j.is_object() || !j.contains("quantization") || !j["quantization"].is_object()) {
      return InvalidArgument(mo.string() + ": expected an object with a 'quantization' object");
    }
    json q = j["quantization"];
    q["quant_method"] = "modelopt";
    return FromQuantizationConfig(q, mo.string());
  }
  return QuantScheme{};
}

Result<std::shared_ptr<const QuantizedWeight>> ReadQuantizedLinear(const Checkpoint& ck, const QuantScheme& s,
                                                                   const std::string& module, int64_t n, int64_t k,
                                                                   std::vector<std::string>& used) {
  auto find = [&](const char* suffix) { return ck.Find(module + "." + suffix); };
  const TensorRef weight = find("weight"), packed = find("weight_packed"), scale_inv = find("weight_scale_inv"),
                  scale = find("weight_scale");
  const bool fp8_weight = weight.file && weight.info->dtype == DType::kF8E4M3;
  const bool u8_weight = weight.file && weight.info->dtype == DType::kU8;
  const std::string where = weight.file ? weight.file->path() : (packed.file ? packed.file->path() : ck.dir());
  auto fail = [&](const std::string& why) { return InvalidArgument(fmt::format("{}: {}: {}", where, module, why)); };
  if (!packed.file && !scale_inv.file && !fp8_weight && !u8_weight) {
    // Neither stored form: a module the scheme quantizes gets an error naming what it should
    // hold (rather than the dense path's "missing 'weight'", which a 4-bit checkpoint never has).
    if (!weight.file && !s.none()) {
      GRAFT_ASSIGN_OR_RETURN(const bool skipped, s.Skips(module));
      if (!skipped) {
        return fail(fmt::format("has neither '{0}.weight' nor '{0}.weight_packed' ({1} declares {2})", module, s.source,
                                s.Describe()));
      }
    }
    return std::shared_ptr<const QuantizedWeight>();
  }

  if (s.none()) return fail("stored quantized, but config.json declares no quantization_config");
  GRAFT_ASSIGN_OR_RETURN(const bool skipped, s.Skips(module));
  if (skipped) return fail(fmt::format("stored quantized, but {}'s skip list names it", s.source));
  auto shape_is = [&](const TensorRef& r, std::vector<int64_t> want, const char* what) -> Status {
    if (!r.file) return fail(fmt::format("missing tensor '{}.{}'", module, what));
    if (r.info->shape != want) {
      return fail(fmt::format("'{}' has shape [{}], expected [{}]", r.info->name, fmt::join(r.info->shape, ", "),
                              fmt::join(want, ", ")));
    }
    used.push_back(r.info->name);
    return Status::Ok();
  };
  auto dtype_is = [&](const TensorRef& r, DType want) -> Status {
    if (r.info->dtype == want) return Status::Ok();
    return fail(fmt::format("'{}' has dtype {}, expected {}", r.info->name, DTypeName(r.info->dtype), DTypeName(want)));
  };
  auto bytes = [](const TensorRef& r) { return std::vector<uint8_t>(r.data(), r.data() + r.info->num_bytes()); };
  for (const char* extra : {"input_scale", "input_global_scale", "weight_shape"}) {
    if (const TensorRef r = find(extra); r.file) used.push_back(r.info->name);
  }
  auto q = std::make_shared<QuantizedWeight>();
  q->rows = n;
  q->cols = k;
  auto expect_method = [&](const char* method, const char* format) -> Status {
    if (s.method == method && (format == nullptr || s.format == format)) return Status::Ok();
    return fail(fmt::format("stored as {}{}{}, but {} declares {}", method, format ? " " : "", format ? format : "",
                            s.source, s.Describe()));
  };

  if (scale_inv.file) {  // Qwen FP8, 128x128 blocks
    GRAFT_RETURN_IF_ERROR(expect_method("fp8", nullptr));
    GRAFT_RETURN_IF_ERROR(shape_is(weight, {n, k}, "weight"));
    GRAFT_RETURN_IF_ERROR(dtype_is(weight, DType::kF8E4M3));
    const int64_t b = s.block;
    GRAFT_RETURN_IF_ERROR(shape_is(scale_inv, {(n + b - 1) / b, (k + b - 1) / b}, "weight_scale_inv"));
    q->format = QuantFormat::kFp8Block;
    q->group = s.block;
    q->codes = bytes(weight);
    GRAFT_ASSIGN_OR_RETURN(q->scale, Scales(scale_inv));
  } else if (fp8_weight) {  // compressed-tensors FP8, per channel or per tensor
    if (s.method == "fp8") {
      return fail(fmt::format("missing tensor '{}.weight_scale_inv' (the block scales of its F8_E4M3 weight; {} declares {})",
                              module, s.source, s.Describe()));
    }
    GRAFT_RETURN_IF_ERROR(expect_method("compressed-tensors", "float-quantized"));
    GRAFT_RETURN_IF_ERROR(shape_is(weight, {n, k}, "weight"));
    if (!scale.file) return fail("missing tensor '" + module + ".weight_scale'");
    const uint64_t ns = scale.info->num_elements();
    if (ns != static_cast<uint64_t>(n) && ns != 1) {
      return fail(fmt::format("'{}' has {} values, expected {} (per channel) or 1 (per tensor)", scale.info->name, ns, n));
    }
    used.push_back(scale.info->name);
    q->format = QuantFormat::kFp8Channel;
    q->codes = bytes(weight);
    GRAFT_ASSIGN_OR_RETURN(std::vector<float> sc, Scales(scale));
    q->scale = ns == 1 ? std::vector<float>(static_cast<size_t>(n), sc[0]) : sc;
  } else if (packed.file && packed.info->dtype == DType::kI32) {  // compressed-tensors int4
    GRAFT_RETURN_IF_ERROR(expect_method("compressed-tensors", "pack-quantized"));
    if (k % 8 != 0) return fail(fmt::format("{} input features is not a multiple of 8 (int4 packing)", k));
    GRAFT_RETURN_IF_ERROR(shape_is(packed, {n, k / 8}, "weight_packed"));
    if (!scale.file) return fail(fmt::format("missing tensor '{}.weight_scale' (the int4 group scales)", module));
    if (scale.info->shape.size() != 2 || scale.info->shape[0] != n || scale.info->shape[1] <= 0 ||
        k % scale.info->shape[1] != 0) {
      return fail(fmt::format("'{}' has shape [{}], expected [{}, {} / group size]", scale.info->name,
                              fmt::join(scale.info->shape, ", "), n, k));
    }
    const int64_t groups = scale.info->shape[1];
    q->group = static_cast<int>(k / groups);
    if (s.group > 0 && s.group != q->group && groups != 1) {
      return fail(fmt::format("weight_scale implies group size {}, but {} says group_size {}", q->group, s.source, s.group));
    }
    used.push_back(scale.info->name);
    q->format = QuantFormat::kInt4Group;
    q->words.resize(static_cast<size_t>(n * k / 8));
    CopyBytes(q->words.data(), packed.data(), q->words.size() * 4);
    GRAFT_ASSIGN_OR_RETURN(q->scale, Scales(scale));
    if (const TensorRef shp = find("weight_shape"); shp.file) {
      int64_t dims[2] = {0, 0};  // int64 as compressed-tensors writes it; int32 accepted too
      if (shp.info->num_elements() != 2 || (shp.info->dtype != DType::kI32 && shp.info->dtype != DType::kI64)) {
        return fail("'weight_shape' must hold two integers");
      }
      if (shp.info->dtype == DType::kI32) {
        int32_t d32[2];
        std::memcpy(d32, shp.data(), 8);
        dims[0] = d32[0], dims[1] = d32[1];
      } else {
        std::memcpy(dims, shp.data(), 16);
      }
      if (dims[0] != n || dims[1] != k) {
        return fail(fmt::format("weight_shape says [{}, {}], expected [{}, {}]", dims[0], dims[1], n, k));
      }
    }
    if (const TensorRef zp = find("weight_zero_point"); zp.file) {
      GRAFT_RETURN_IF_ERROR(shape_is(zp, {(n + 7) / 8, groups}, "weight_zero_point"));
      GRAFT_RETURN_IF_ERROR(dtype_is(zp, DType::kI32));
      q->zero_words.resize(static_cast<size_t>(zp.info->num_elements()));
      CopyBytes(q->zero_words.data(), zp.data(), q->zero_words.size() * 4);
    }
    if (const TensorRef gi = find("weight_g_idx"); gi.file) {
      GRAFT_RETURN_IF_ERROR(shape_is(gi, {k}, "weight_g_idx"));
      GRAFT_RETURN_IF_ERROR(dtype_is(gi, DType::kI32));
      for (int64_t c = 0; c < k; ++c) {
        int32_t g;
        std::memcpy(&g, gi.data() + 4 * c, 4);
        if (g != c / q->group) return fail("weight_g_idx reorders columns (activation ordering), which graft does not support");
      }
    }
  } else {  // NVFP4: compressed-tensors (weight_packed U8) or ModelOpt (weight U8)
    const bool ct = packed.file != nullptr;
    GRAFT_RETURN_IF_ERROR(ct ? expect_method("compressed-tensors", "nvfp4-pack-quantized") : expect_method("modelopt", "NVFP4"));
    if (k % 16 != 0) return fail(fmt::format("{} input features is not a multiple of 16 (NVFP4 groups)", k));
    const TensorRef codes = ct ? packed : weight;
    GRAFT_RETURN_IF_ERROR(shape_is(codes, {n, k / 2}, ct ? "weight_packed" : "weight"));
    GRAFT_RETURN_IF_ERROR(dtype_is(codes, DType::kU8));
    GRAFT_RETURN_IF_ERROR(shape_is(scale, {n, k / 16}, "weight_scale"));
    GRAFT_RETURN_IF_ERROR(dtype_is(scale, DType::kF8E4M3));
    const TensorRef global = ct ? find("weight_global_scale") : find("weight_scale_2");
    const char* gname = ct ? "weight_global_scale" : "weight_scale_2";
    if (!global.file) return fail(fmt::format("missing tensor '{}.{}' (the NVFP4 global scale)", module, gname));
    if (global.info->num_elements() != 1) {
      return fail(fmt::format("'{}.{}' holds {} values; it must hold one", module, gname, global.info->num_elements()));
    }
    used.push_back(global.info->name);
    GRAFT_ASSIGN_OR_RETURN(std::vector<float> g, Scales(global));
    if (!(g[0] > 0)) return fail(fmt::format("'{}.{}' is {}; it must be positive", module, gname, g[0]));
    q->format = QuantFormat::kNvfp4;
    q->group = 16;
    q->codes = bytes(codes);
    q->scale_fp8 = bytes(scale);
    q->global = ct ? 1.0f / g[0] : g[0];
  }
  // e4m3 has one NaN pattern (S.1111.111); a checkpoint holding it would turn outputs into NaN.
  auto no_nan = [&](const std::vector<uint8_t>& codes, const char* what) -> Status {
    for (size_t i = 0; i < codes.size(); ++i) {
      if ((codes[i] & 0x7F) == 0x7F) return fail(fmt::format("{} element {} is an e4m3 NaN", what, i));
    }
    return Status::Ok();
  };
  if (q->format == QuantFormat::kFp8Block || q->format == QuantFormat::kFp8Channel) {
    GRAFT_RETURN_IF_ERROR(no_nan(q->codes, "weight"));
  }
  if (q->format == QuantFormat::kNvfp4) GRAFT_RETURN_IF_ERROR(no_nan(q->scale_fp8, "weight_scale"));
  if (weight.file && (fp8_weight || u8_weight || scale_inv.file)) used.push_back(weight.info->name);
  if (packed.file) used.push_back(packed.info->name);
  GRAFT_RETURN_IF_ERROR(ValidateQuantized(*q));
  return std::shared_ptr<const QuantizedWeight>(std::move(q));
}

}  // namespace graft

#include "io/model_config.h"

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "util/file.h"
#include "util/json_depth.h"
#include <sstream>

namespace graft {
namespace {

using json = nlohmann::json;

class Reader {
 public:
  Reader(const json& j, std::string source) : j_(j), source_(std::move(source)) {}

  Status Int(const char* key, int* out, bool required, int lo = 1, int hi = 1 << 30) const {
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) {
      return required ? InvalidArgument(fmt::format("{}: missing field '{}'", source_, key)) : Status::Ok();
    }
    if (!it->is_number_integer()) return InvalidArgument(fmt::format("{}: field '{}' must be an integer", source_, key));
    const auto v = it->get<int64_t>();
    if (v < lo || v > hi) {
      return InvalidArgument(fmt::format("{}: field '{}' = {} is outside [{}, {}]", source_, key, v, lo, hi));
    }
    *out = static_cast<int>(v);
    return Status::Ok();
  }
  Status Num(const json& obj, const char* key, double* out) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return Status::Ok();
    if (!it->is_number()) return InvalidArgument(fmt::format("{}: field '{}' must be a number", source_, key));
    *out = it->get<double>();
    return Status::Ok();
  }
  Status Bool(const char* key, bool* out) const {
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return Status::Ok();
    if (!it->is_boolean()) return InvalidArgument(fmt::format("{}: field '{}' must be true or false", source_, key));
    *out = it->get<bool>();
    return Status::Ok();
  }
  const json& j() const { return j_; }
  const std::string& source() const { return source_; }

 private:
  const json& j_;
  std::string source_;
};

Status Refuse(const std::string& source, const std::string& what) {
  return Unsupported(fmt::format("{}: {}", source, what));
}

// Refuses configuration features that change the forward pass and that graft does not run.
Status CheckUnsupported(const json& t, const std::string& src) {
  for (const char* moe : {"num_experts", "num_local_experts", "n_routed_experts"}) {
    auto it = t.find(moe);
    if (it != t.end() && it->is_number_integer() && it->get<int64_t>() > 0) {
      return Refuse(src, fmt::format("mixture-of-experts models ('{}' = {}) are not supported", moe,
                                     it->get<int64_t>()));
    }
  }
  auto sw = t.find("use_sliding_window");
  if (sw != t.end() && sw->is_boolean() && sw->get<bool>()) {
    return Refuse(src, "sliding-window attention ('use_sliding_window': true) is not supported");
  }
  auto ab = t.find("attention_bias");
  if (ab != t.end() && ab->is_boolean() && ab->get<bool>()) {
    return Refuse(src, "attention projections with bias ('attention_bias': true) are not supported");
  }
  auto act = t.find("hidden_act");
  if (act != t.end() && !(act->is_string() && act->get<std::string>() == "silu")) {
    return Refuse(src, fmt::format("hidden_act {} is not supported (only \"silu\")", act->dump()));
  }
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    auto rs = t.find(key);
    if (rs == t.end() || rs->is_null()) continue;
    if (!rs->is_object()) return InvalidArgument(fmt::format("{}: '{}' must be an object", src, key));
    for (const char* type_key : {"rope_type", "type"}) {
      auto ty = rs->find(type_key);
      if (ty == rs->end() || ty->is_null()) continue;
      if (!ty->is_string()) return InvalidArgument(fmt::format("{}: {}.{} must be a string", src, key, type_key));
      const auto s = ty->get<std::string>();
      if (s != "default" && s != "yarn") {
        return Refuse(src, fmt::format("{}.{} = \"{}\" is not supported (\"default\" or \"yarn\")", key, type_key, s));
      }
    }
  }
  return Status::Ok();
}

Status ReadRope(const json& t, const std::string& src, const ArchConfigSpec& spec, ModelConfig& c) {
  double theta = spec.rope_theta;
  double partial = spec.partial_rotary_factor;
  Reader r(t, src);
  GRAFT_RETURN_IF_ERROR(r.Num(t, "rope_theta", &theta));
  GRAFT_RETURN_IF_ERROR(r.Num(t, "partial_rotary_factor", &partial));
  auto rp = t.find("rope_parameters");
  if (rp != t.end() && rp->is_object()) {
    GRAFT_RETURN_IF_ERROR(r.Num(*rp, "rope_theta", &theta));
    GRAFT_RETURN_IF_ERROR(r.Num(*rp, "partial_rotary_factor", &partial));
  }
  if (!(theta > 0)) return InvalidArgument(fmt::format("{}: rope_theta must be positive", src));
  if (!(partial > 0 && partial <= 1)) {
    return InvalidArgument(fmt::format("{}: partial_rotary_factor {} is outside (0, 1]", src, partial));
  }
  c.rope_theta = theta;
  c.rotary_dim = static_cast<int>(c.head_dim * partial);  // int(), as transformers truncates
  if (c.rotary_dim < 2 || c.rotary_dim % 2 != 0) {
    return InvalidArgument(fmt::format("{}: rotary dimension {} (head_dim {} x {}) must be even and >= 2", src,
                                       c.rotary_dim, c.head_dim, partial));
  }
  const int dim = c.rotary_dim, half = dim / 2;
  std::vector<float> pos_freqs(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) pos_freqs[i] = std::pow(static_cast<float>(theta), static_cast<float>(2 * i) / static_cast<float>(dim));
  c.inv_freq.resize(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) c.inv_freq[i] = 1.0f / pos_freqs[i];
  // YaRN, in whichever of the two places the config keeps it.
  const json* scaling = nullptr;
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    auto it = t.find(key);
    if (it != t.end() && it->is_object() && (it->value("rope_type", "") == "yarn" || it->value("type", "") == "yarn")) scaling = &*it;
  }
  if (!scaling) return Status::Ok();
  c.rope_type = "yarn";
  double factor = 0, attention = 0, beta_fast = 32, beta_slow = 1, original = 0;
  GRAFT_RETURN_IF_ERROR(r.Num(*scaling, "factor", &factor));
  GRAFT_RETURN_IF_ERROR(r.Num(*scaling, "attention_factor", &attention));
  GRAFT_RETURN_IF_ERROR(r.Num(*scaling, "beta_fast", &beta_fast));
  GRAFT_RETURN_IF_ERROR(r.Num(*scaling, "beta_slow", &beta_slow));
  GRAFT_RETURN_IF_ERROR(r.Num(*scaling, "original_max_position_embeddings", &original));
  if (scaling->contains("mscale") || scaling->contains("mscale_all_dim")) {
    return Refuse(src, "YaRN with mscale / mscale_all_dim is not supported");
  }
  if (original > 0) {
    // transformers derives the factor from the two context lengths when both are given.
    if (c.max_position_embeddings <= 0) return InvalidArgument(src + ": YaRN needs max_position_embeddings");
    factor = c.max_position_embeddings / original;
  } else {
    original = c.max_position_embeddings;
  }
  if (!(factor >= 1.0)) return InvalidArgument(fmt::format("{}: YaRN factor {} must be >= 1", src, factor));
  if (!(original > 0)) return InvalidArgument(src + ": YaRN needs original_max_position_embeddings or max_position_embeddings");
  c.rope_attention_scaling = static_cast<float>(attention > 0 ? attention : 0.1 * std::log(factor) + 1.0);
  const bool truncate = scaling->value("truncate", true);
  auto correction_dim = [&](double rotations) {
    return (dim * std::log(original / (rotations * 2 * M_PI))) / (2 * std::log(theta));
  };
  double low = correction_dim(beta_fast), high = correction_dim(beta_slow);
  if (truncate) low = std::floor(low), high = std::ceil(high);
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;
  for (int i = 0; i < half; ++i) {
    const float ramp = std::clamp((static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low), 0.0f, 1.0f);
    const float extrapolation = 1.0f - ramp;  // 1 keeps the original frequency
    const float interp = 1.0f / (static_cast<float>(factor) * pos_freqs[i]);
    c.inv_freq[i] = interp * (1.0f - extrapolation) + c.inv_freq[i] * extrapolation;
  }
  return Status::Ok();
}

Status ReadLayerTypes(const json& t, const std::string& src, const ArchConfigSpec& spec, ModelConfig& c) {
  c.layer_kinds.assign(static_cast<size_t>(c.num_layers), LayerKind::kFullAttention);
  auto lt = t.find("layer_types");
  if (lt != t.end() && !lt->is_null()) {
    if (!lt->is_array() || static_cast<int>(lt->size()) != c.num_layers) {
      return InvalidArgument(fmt::format("{}: layer_types must be an array of num_hidden_layers ({}) names", src,
                                         c.num_layers));
    }
    for (int i = 0; i < c.num_layers; ++i) {
      const auto& v = (*lt)[static_cast<size_t>(i)];
      const std::string s = v.is_string() ? v.get<std::string>() : v.dump();
      if (s == "full_attention" || s == "attention") {
        c.layer_kinds[i] = LayerKind::kFullAttention;
      } else if (s == "linear_attention" && spec.linear_attention) {
        c.layer_kinds[i] = LayerKind::kLinearAttention;
      } else {
        return Refuse(src, fmt::format("layer_types[{}] = \"{}\" is not supported for {}", i, s, c.arch));
      }
    }
    return Status::Ok();
  }
  if (spec.linear_attention) {
    int interval = spec.linear_attention->full_attention_interval;
    GRAFT_RETURN_IF_ERROR(Reader(t, src).Int("full_attention_interval", &interval, false));
    for (int i = 0; i < c.num_layers; ++i) {
      c.layer_kinds[i] = (i + 1) % interval == 0 ? LayerKind::kFullAttention : LayerKind::kLinearAttention;
    }
  }
  return Status::Ok();
}

// eos_token_id: an integer or a list of them, from the text config or the top level. Ids are
// read wide: one past int32's range is an error, not wrapped into a plausible token.
Status ReadEos(const json& top, const json& t, ModelConfig& c, const std::string& source) {
  auto add = [&](const json& e) -> Status {
    if (!e.is_number_integer()) return Status::Ok();
    if (e.get<int64_t>() < 0 || e.get<int64_t>() > INT32_MAX) {
      return InvalidArgument(fmt::format("{}: eos_token_id {} is not a token id", source, e.dump()));
    }
    c.eos_token_ids.push_back(e.get<int32_t>());
    return Status::Ok();
  };
  for (const json* j : {&t, &top}) {
    auto it = j->find("eos_token_id");
    if (it == j->end()) continue;
    if (it->is_number_integer()) GRAFT_RETURN_IF_ERROR(add(*it));
    if (it->is_array()) {
      for (const auto& e : *it) GRAFT_RETURN_IF_ERROR(add(e));
    }
    if (!c.eos_token_ids.empty()) return Status::Ok();
  }
  return Status::Ok();
}

}  // namespace

int ModelConfig::num_layers_of(LayerKind k) const {
  int n = 0;
  for (auto l : layer_kinds) n += l == k;
  return n;
}

std::string ModelConfig::Summary() const {
  const bool gdn = linear_num_key_heads > 0;  // an architecture with Gated DeltaNet layers
  std::string s = fmt::format("{}: {} layers", arch, num_layers);
  if (gdn) {
    s += fmt::format(" ({} GDN + {} full)", num_layers_of(LayerKind::kLinearAttention),
                     num_layers_of(LayerKind::kFullAttention));
  }
  s += fmt::format(", hidden {}, ffn {}, heads {}/{}x{}, vocab {}, rope θ {:g} on {} dims", hidden_size,
                   intermediate_size, num_heads, num_kv_heads, head_dim, vocab_size, rope_theta, rotary_dim);
  if (gdn) {
    s += fmt::format(", GDN {}/{} heads {}x{} conv {}", linear_num_key_heads, linear_num_value_heads,
                     linear_key_head_dim, linear_value_head_dim, linear_conv_kernel);
  }
  if (rope_type == "yarn") s += fmt::format(" (YaRN, attention factor {:.4g})", rope_attention_scaling);
  s += tie_word_embeddings ? ", tied embeddings" : ", untied embeddings";
  return s;
}

Result<ModelConfig> ParseModelConfig(const std::string& json_text, const std::string& source,
                                     const std::vector<const ArchConfigSpec*>& archs) {
  GRAFT_RETURN_IF_ERROR(CheckJsonDepth(json_text, source));
  json top = json::parse(json_text, nullptr, false);
  if (top.is_discarded() || !top.is_object()) return InvalidArgument(source + ": not a JSON object");
  auto mt = top.find("model_type");
  if (mt == top.end() || !mt->is_string()) return InvalidArgument(source + ": missing string field 'model_type'");
  ModelConfig c;
  c.model_type = mt->get<std::string>();
  const ArchConfigSpec* spec = nullptr;
  const ConfigSpelling* spelling = nullptr;
  std::vector<std::string> known;
  for (const ArchConfigSpec* a : archs) {
    for (const ConfigSpelling& sp : a->spellings) {
      known.push_back(sp.model_type);
      if (sp.model_type == c.model_type) spec = a, spelling = &sp;
    }
  }
  if (!spec) {
    return Unsupported(fmt::format("{}: model_type \"{}\" is not supported ({})", source, c.model_type,
                                   fmt::join(known, ", ")));
  }
  c.arch = spec->name;
  c.weight_prefix = spelling->weight_prefix;
  const json* text = &top;
  if (spelling->text_config) {
    auto tc = top.find("text_config");
    if (tc != top.end()) {
      if (!tc->is_object()) return InvalidArgument(source + ": 'text_config' must be an object");
      text = &*tc;
    }
  }
  const json& t = *text;
  GRAFT_RETURN_IF_ERROR(CheckUnsupported(t, source));
  Reader r(t, source);
  GRAFT_RETURN_IF_ERROR(r.Int("vocab_size", &c.vocab_size, true));
  GRAFT_RETURN_IF_ERROR(r.Int("hidden_size", &c.hidden_size, true, 1, 1 << 20));
  GRAFT_RETURN_IF_ERROR(r.Int("intermediate_size", &c.intermediate_size, true, 1, 1 << 22));
  GRAFT_RETURN_IF_ERROR(r.Int("num_hidden_layers", &c.num_layers, true, 1, 1024));
  GRAFT_RETURN_IF_ERROR(r.Int("num_attention_heads", &c.num_heads, true, 1, 4096));
  c.num_kv_heads = c.num_heads;
  GRAFT_RETURN_IF_ERROR(r.Int("num_key_value_heads", &c.num_kv_heads, false, 1, 4096));
  if (c.num_heads % c.num_kv_heads != 0) {
    return InvalidArgument(fmt::format("{}: num_attention_heads {} is not a multiple of num_key_value_heads {}",
                                       source, c.num_heads, c.num_kv_heads));
  }
  c.head_dim = c.hidden_size / c.num_heads;
  GRAFT_RETURN_IF_ERROR(r.Int("head_dim", &c.head_dim, false, 1, 4096));
  GRAFT_RETURN_IF_ERROR(r.Int("max_position_embeddings", &c.max_position_embeddings, false));
  GRAFT_RETURN_IF_ERROR(r.Num(t, "rms_norm_eps", &c.rms_norm_eps));
  // The wrapper's own (top-level) tie_word_embeddings decides, as the wrapper class ties by its
  // config; text_config's copy counts only when the top level has none.
  c.tie_word_embeddings = false;
  GRAFT_RETURN_IF_ERROR(r.Bool("tie_word_embeddings", &c.tie_word_embeddings));
  if (text != &top) GRAFT_RETURN_IF_ERROR(Reader(top, source).Bool("tie_word_embeddings", &c.tie_word_embeddings));
  GRAFT_RETURN_IF_ERROR(ReadRope(t, source, *spec, c));
  GRAFT_RETURN_IF_ERROR(ReadLayerTypes(t, source, *spec, c));
  if (const auto& d = spec->linear_attention) {
    c.linear_num_key_heads = d->key_heads;
    c.linear_num_value_heads = d->value_heads;
    c.linear_key_head_dim = d->key_head_dim;
    c.linear_value_head_dim = d->value_head_dim;
    c.linear_conv_kernel = d->conv_kernel;
    GRAFT_RETURN_IF_ERROR(r.Int("linear_num_key_heads", &c.linear_num_key_heads, false, 1, 4096));
    GRAFT_RETURN_IF_ERROR(r.Int("linear_num_value_heads", &c.linear_num_value_heads, false, 1, 4096));
    GRAFT_RETURN_IF_ERROR(r.Int("linear_key_head_dim", &c.linear_key_head_dim, false, 1, 4096));
    GRAFT_RETURN_IF_ERROR(r.Int("linear_value_head_dim", &c.linear_value_head_dim, false, 1, 4096));
    GRAFT_RETURN_IF_ERROR(r.Int("linear_conv_kernel_dim", &c.linear_conv_kernel, false, 1, 64));
    if (c.linear_num_value_heads % c.linear_num_key_heads != 0) {
      return InvalidArgument(fmt::format("{}: linear_num_value_heads {} is not a multiple of linear_num_key_heads {}",
                                         source, c.linear_num_value_heads, c.linear_num_key_heads));
    }
  }
  GRAFT_RETURN_IF_ERROR(ReadEos(top, t, c, source));
  return c;
}

Result<ModelConfig> LoadModelConfig(const std::string& dir, const std::vector<const ArchConfigSpec*>& archs) {
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  GRAFT_ASSIGN_OR_RETURN(std::string text, ReadFileLimited(path, 16u << 20));
  return ParseModelConfig(text, path, archs);
}

}  // namespace graft

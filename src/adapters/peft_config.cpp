#include "adapters/peft_config.h"

#include <fmt/core.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "util/json_depth.h"
#include "util/json_field.h"
#include "util/pyregex.h"

namespace graft {
namespace {

using json = nlohmann::ordered_json;

// Ranks past this are not adapters (and would overflow the int a rank is kept in).
constexpr double kMaxRank = 1 << 20;
constexpr int64_t kMaxLayer = 1 << 20;

bool ListMatches(const std::vector<std::string>& list, const std::string& name) {
  for (const auto& e : list) {
    if (name == e) return true;
    if (name.size() > e.size() && name.compare(name.size() - e.size(), e.size(), e) == 0 &&
        name[name.size() - e.size() - 1] == '.') {
      return true;
    }
  }
  return false;
}

Status ReadStringOrList(const json& v, const std::string& field, const std::string& src, std::optional<std::string>* str,
                        std::vector<std::string>* list) {
  if (v.is_null()) return Status::Ok();
  if (v.is_string()) {
    *str = v.get<std::string>();
    return Status::Ok();
  }
  if (v.is_array()) {
    for (const auto& e : v) {
      if (!e.is_string()) return InvalidArgument(fmt::format("{}: {} holds a non-string entry {}", src, field, e.dump()));
      list->push_back(e.get<std::string>());
    }
    return Status::Ok();
  }
  return InvalidArgument(fmt::format("{}: {} must be a string or a list of strings", src, field));
}

// Key of rank_pattern / alpha_pattern that applies to `name`, or nullopt.
template <typename T>
Result<std::optional<T>> PatternValue(const std::vector<std::pair<std::string, T>>& patterns, const std::string& name) {
  for (const auto& [key, value] : patterns) {
    GRAFT_ASSIGN_OR_RETURN(bool m, RegexMatchPrefix("(.*\\.)?(" + key + ")$", name));
    if (m) return std::optional<T>(value);
  }
  return std::optional<T>();
}

}  // namespace

Result<PeftConfig> PeftConfig::Parse(const std::string& text, const std::string& src) {
  GRAFT_RETURN_IF_ERROR(CheckJsonDepth(text, src));
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument(src + ": not a JSON object");
  std::vector<std::string> refused;
  auto truthy = [&](const char* k) {
    auto it = j.find(k);
    return it != j.end() && !it->is_null() && !(it->is_boolean() && !it->get<bool>()) &&
           !(it->is_array() && it->empty()) && !(it->is_object() && it->empty());
  };
  GRAFT_ASSIGN_OR_RETURN(const std::string type, StringField(j, "peft_type", "", src));
  if (type != "LORA") refused.push_back(fmt::format("peft_type \"{}\" (only LORA)", type));
  if (truthy("use_dora")) refused.push_back("use_dora: DoRA adapters are not supported");
  if (j.contains("bias") && j["bias"].is_string() && j["bias"].get<std::string>() != "none") {
    refused.push_back(fmt::format("bias \"{}\" (only \"none\")", j["bias"].get<std::string>()));
  }
  if (truthy("lora_bias")) refused.push_back("lora_bias: LoRA B biases are not supported");
  if (truthy("modules_to_save")) refused.push_back(fmt::format("modules_to_save {} (full replacement modules)", j["modules_to_save"].dump()));
  if (truthy("layer_replication")) refused.push_back("layer_replication");
  if (truthy("alora_invocation_tokens")) refused.push_back("alora_invocation_tokens (aLoRA)");
  if (truthy("use_qalora")) refused.push_back("use_qalora");
  if (truthy("target_parameters")) refused.push_back("target_parameters (LoRA on parameters, not modules)");
  if (truthy("trainable_token_indices")) refused.push_back("trainable_token_indices (embedding deltas)");
  if (!refused.empty()) {
    std::string m = fmt::format("{}: unsupported adapter features:", src);
    for (const auto& r : refused) m += "\n  - " + r;
    return Unsupported(m);
  }
  PeftConfig c;
  auto num = [&](const char* k, double* out) -> Status {
    auto it = j.find(k);
    if (it == j.end() || it->is_null()) return Status::Ok();
    if (!it->is_number()) return InvalidArgument(fmt::format("{}: {} must be a number", src, k));
    *out = it->get<double>();
    return Status::Ok();
  };
  double r = c.r;
  GRAFT_RETURN_IF_ERROR(num("r", &r));
  GRAFT_RETURN_IF_ERROR(num("lora_alpha", &c.lora_alpha));
  if (r < 1 || r > kMaxRank || r != std::floor(r)) {
    return InvalidArgument(fmt::format("{}: r = {} must be an integer from 1 to {}", src, r, kMaxRank));
  }
  c.r = static_cast<int>(r);
  GRAFT_ASSIGN_OR_RETURN(c.use_rslora, BoolField(j, "use_rslora", false, src));
  GRAFT_ASSIGN_OR_RETURN(c.fan_in_fan_out, BoolField(j, "fan_in_fan_out", false, src));
  c.base_model_name_or_path = j.contains("base_model_name_or_path") && j["base_model_name_or_path"].is_string()
                                  ? j["base_model_name_or_path"].get<std::string>()
                                  : "";
  if (!j.contains("target_modules") || j["target_modules"].is_null()) return InvalidArgument(src + ": missing target_modules");
  GRAFT_RETURN_IF_ERROR(ReadStringOrList(j["target_modules"], "target_modules", src, &c.target_regex, &c.target_list));
  if (c.target_regex && *c.target_regex == "all-linear") c.all_linear = true, c.target_regex.reset();
  if (c.target_list.size() == 1 && c.target_list[0] == "all-linear") c.all_linear = true, c.target_list.clear();
  if (j.contains("exclude_modules")) {
    GRAFT_RETURN_IF_ERROR(ReadStringOrList(j["exclude_modules"], "exclude_modules", src, &c.exclude_regex, &c.exclude_list));
  }
  if (j.contains("layers_to_transform") && !j["layers_to_transform"].is_null()) {
    const auto& l = j["layers_to_transform"];
    // Layer indices, read wide: one past int's range must not wrap into a plausible layer.
    auto layer = [&](const json& e) -> Status {
      if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() > kMaxLayer) {
        return InvalidArgument(fmt::format("{}: layers_to_transform holds {}, not a layer index (0 to {})", src, e.dump(),
                                           kMaxLayer));
      }
      c.layers_to_transform.push_back(e.get<int>());
      return Status::Ok();
    };
    if (l.is_number_integer()) GRAFT_RETURN_IF_ERROR(layer(l));
    else if (l.is_array()) for (const auto& e : l) GRAFT_RETURN_IF_ERROR(layer(e));
    else return InvalidArgument(src + ": layers_to_transform must be an integer or a list");
    if (c.target_regex) return InvalidArgument(src + ": layers_to_transform cannot be used when target_modules is a string");
  }
  if (j.contains("layers_pattern") && !j["layers_pattern"].is_null()) {
    std::optional<std::string> s;
    GRAFT_RETURN_IF_ERROR(ReadStringOrList(j["layers_pattern"], "layers_pattern", src, &s, &c.layers_pattern));
    if (s) c.layers_pattern.push_back(*s);
  }
  for (const char* field : {"rank_pattern", "alpha_pattern"}) {
    auto it = j.find(field);
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_object()) return InvalidArgument(fmt::format("{}: {} must be an object", src, field));
    for (const auto& [k, v] : it->items()) {
      if (!v.is_number()) return InvalidArgument(fmt::format("{}: {}[\"{}\"] must be a number", src, field, k));
      if (std::string(field) == "rank_pattern") {
        if (v.get<double>() < 1 || v.get<double>() > kMaxRank || v.get<double>() != std::floor(v.get<double>())) {
          return InvalidArgument(
              fmt::format("{}: rank_pattern[\"{}\"] = {} must be an integer from 1 to {}", src, k, v.dump(), kMaxRank));
        }
        c.rank_pattern.emplace_back(k, v.get<int>());
      } else {
        c.alpha_pattern.emplace_back(k, v.get<double>());
      }
    }
  }
  return c;
}

Result<bool> PeftConfig::Targets(const std::string& name) const {
  if (exclude_regex) {
    GRAFT_ASSIGN_OR_RETURN(bool ex, RegexFullMatch(*exclude_regex, name));
    if (ex) return false;
  }
  if (ListMatches(exclude_list, name)) return false;
  bool found = all_linear;
  if (target_regex) {
    GRAFT_ASSIGN_OR_RETURN(found, RegexFullMatch(*target_regex, name));
  } else if (!all_linear) {
    found = ListMatches(target_list, name);
  }
  if (!found || layers_to_transform.empty()) return found;
  std::optional<std::string> idx;
  if (layers_pattern.empty()) {
    GRAFT_ASSIGN_OR_RETURN(idx, RegexMatchGroup1(R"(.*\.[^.]*\.(\d+)\.)", name));
  } else {
    for (const auto& p : layers_pattern) {
      GRAFT_ASSIGN_OR_RETURN(idx, RegexMatchGroup1(".*\\." + p + "\\.(\\d+)\\.", name));
      if (idx) break;
    }
  }
  if (!idx) return false;
  const int layer = std::stoi(*idx);
  for (int l : layers_to_transform) if (l == layer) return true;
  return false;
}

Result<int> PeftConfig::RankFor(const std::string& name) const {
  GRAFT_ASSIGN_OR_RETURN(std::optional<int> v, PatternValue(rank_pattern, name));
  return v.value_or(r);
}

Result<double> PeftConfig::AlphaFor(const std::string& name) const {
  GRAFT_ASSIGN_OR_RETURN(std::optional<double> v, PatternValue(alpha_pattern, name));
  return v.value_or(lora_alpha);
}

Result<float> PeftConfig::ScaleFor(const std::string& name, int rank) const {
  GRAFT_ASSIGN_OR_RETURN(double alpha, AlphaFor(name));
  return static_cast<float>(use_rslora ? alpha / std::sqrt(static_cast<double>(rank)) : alpha / rank);
}

}  // namespace graft

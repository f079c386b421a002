// PeftConfig: the fields of a PEFT adapter_config.json that change the math, and PEFT's rules
// for which modules an adapter targets and with which rank and alpha
// (checkpoint-formats.md §2.2):
//   - target_modules: a string is re.fullmatch'ed against the module name; a list matches an
//     entry equal to the name or a suffix "." + entry; "all-linear" is every projection;
//     exclude_modules is checked first with the same rules;
//   - layers_to_transform keeps only those layer indices (list targets only); the index is the
//     first integer after ".<layers_pattern>." (or after any ".<name>." when no pattern);
//   - rank_pattern / alpha_pattern: the first key (file order) with
//     re.match(r"(.*\.)?(" + key + r")$", name) overrides r / lora_alpha;
//   - scale = alpha / r, or alpha / sqrt(r) with use_rslora.
// Parse() refuses what graft does not run (DoRA, biases, modules_to_save, layer replication,
// aLoRA, non-LORA types), naming the field.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "util/status.h"

namespace graft {

struct PeftConfig {
  int r = 8;
  double lora_alpha = 8;
  bool use_rslora = false;
  bool fan_in_fan_out = false;
  std::optional<std::string> target_regex;       // target_modules as a string
  std::vector<std::string> target_list;          // target_modules as a list
  bool all_linear = false;
  std::optional<std::string> exclude_regex;
  std::vector<std::string> exclude_list;
  std::vector<int> layers_to_transform;          // empty: all layers
  std::vector<std::string> layers_pattern;
  std::vector<std::pair<std::string, int>> rank_pattern;      // in file order
  std::vector<std::pair<std::string, double>> alpha_pattern;  // in file order
  std::string base_model_name_or_path;

  static Result<PeftConfig> Parse(const std::string& json_text, const std::string& source);

  // Whether PEFT would put LoRA on the module with this full name (e.g.
  // "model.layers.3.self_attn.q_proj"), in layer `layer`.
  Result<bool> Targets(const std::string& module_name) const;
  Result<int> RankFor(const std::string& module_name) const;
  Result<double> AlphaFor(const std::string& module_name) const;
  Result<float> ScaleFor(const std::string& module_name, int rank) const;
};

}  // namespace graft

// ModelConfig: the text model's hyper-parameters, read from a Hugging Face config.json.
//
// What differs by architecture (its model_type spellings, where the text fields and weights sit,
// its defaults, whether it has Gated DeltaNet layers) is an ArchConfigSpec, which the caller
// passes: each architecture's registry entry holds one (model/architecture.h, which also offers
// the LoadModelConfig(dir) that knows them all). Unknown fields are ignored; features graft does
// not implement (MoE, sliding windows, rope scaling other than YaRN, attention bias, other
// activations) are refused with an error naming the field.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "util/status.h"

namespace graft {

enum class LayerKind { kFullAttention, kLinearAttention };

// One way config.json names an architecture.
struct ConfigSpelling {
  std::string model_type;     // the top-level "model_type"
  std::string weight_prefix;  // where the text weights sit: "model." or "model.language_model."
  bool text_config = false;   // the text fields sit in "text_config" (a multimodal wrapper)
};

// Defaults of the Gated DeltaNet fields, for an architecture that has such layers.
struct LinearAttentionDefaults {
  int key_heads, value_heads, key_head_dim, value_head_dim, conv_kernel;
  int full_attention_interval;  // without layer_types: every interval-th layer is full attention
};

// What parsing needs to know of one architecture.
struct ArchConfigSpec {
  std::string name;                      // the registry name: "qwen3", "qwen3_5"
  std::vector<ConfigSpelling> spellings;
  double rope_theta = 1e4;               // defaults where config.json has none
  double partial_rotary_factor = 1.0;
  std::optional<LinearAttentionDefaults> linear_attention;  // none: every layer is full attention
};

struct ModelConfig {
  std::string arch;           // the architecture's registry name (ArchConfigSpec::name)
  std::string model_type;     // as written in config.json (top level)
  std::string weight_prefix;  // "model." or "model.language_model." (text weights)
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  std::vector<LayerKind> layer_kinds;  // [num_layers]
  // Full attention.
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  double rope_theta = 0;
  int rotary_dim = 0;  // leading dims of each head that RoPE rotates (NeoX pairs i, i + dim/2)
  // RoPE frequencies [rotary_dim / 2] (fp32, as transformers computes them) and the factor
  // cos/sin are multiplied by: plain RoPE (1.0), or YaRN (rope_scaling / rope_parameters
  // rope_type "yarn": interpolated low frequencies, attention factor 0.1·ln(factor) + 1).
  std::vector<float> inv_freq;
  float rope_attention_scaling = 1.0f;
  std::string rope_type = "default";
  // Gated DeltaNet (Qwen3.5 linear-attention layers).
  int linear_num_key_heads = 0;    // Hk
  int linear_num_value_heads = 0;  // Hv
  int linear_key_head_dim = 0;     // dk
  int linear_value_head_dim = 0;   // dv
  int linear_conv_kernel = 0;      // K
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  int max_position_embeddings = 0;
  std::vector<int> eos_token_ids;

  int key_dim() const { return linear_num_key_heads * linear_key_head_dim; }
  int value_dim() const { return linear_num_value_heads * linear_value_head_dim; }
  int conv_dim() const { return 2 * key_dim() + value_dim(); }
  int num_layers_of(LayerKind k) const;
  // One line for start-up logs: "qwen3_5: 4 layers (2 GDN + 2 full), hidden 64, ...".
  std::string Summary() const;
};

// json_text: the contents of config.json; source: its path for error messages; archs: the
// architectures to recognise (a model_type none of them spells is an error listing theirs).
Result<ModelConfig> ParseModelConfig(const std::string& json_text, const std::string& source,
                                     const std::vector<const ArchConfigSpec*>& archs);
// Reads DIR/config.json.
Result<ModelConfig> LoadModelConfig(const std::string& dir, const std::vector<const ArchConfigSpec*>& archs);

}  // namespace graft

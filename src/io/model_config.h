// ModelConfig: the text model's hyper-parameters, read from a Hugging Face config.json.
//
// Accepted model_type values: "qwen3" (flat), "qwen3_5" (the multimodal wrapper: text fields in
// text_config, text weights under model.language_model.) and "qwen3_5_text" (flat). Unknown
// fields are ignored; features graft does not implement (MoE, sliding windows, rope scaling,
// attention bias, other activations) are refused with an error naming the field.
#pragma once

#include <string>
#include <vector>

#include "util/status.h"

namespace graft {

enum class Arch { kQwen3, kQwen3_5 };
enum class LayerKind { kFullAttention, kLinearAttention };

const char* ArchName(Arch a);

struct ModelConfig {
  Arch arch = Arch::kQwen3;
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

// json_text: the contents of config.json; source: its path for error messages.
Result<ModelConfig> ParseModelConfig(const std::string& json_text, const std::string& source);
// Reads DIR/config.json.
Result<ModelConfig> LoadModelConfig(const std::string& dir);

}  // namespace graft

// Model weights as the backends read them: one Weight per slot, fused where the forward pass
// runs several projections as one matmul.
//
// A Weight is a host copy in its storage format (bf16 kept as bf16; f16 and f32 as f32), shaped
// [rows, cols] with rows = the checkpoint's first dimension (output features for a Linear) and
// cols = the product of the others (1 for a vector). Immutable after loading.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/model_config.h"
#include "util/bf16.h"

namespace graft {

struct Weight {
  std::string name;  // checkpoint name(s), '+'-joined when fused
  int64_t rows = 0;
  int64_t cols = 0;
  bool is_bf16 = false;
  std::vector<uint16_t> bf16;  // [rows * cols] when is_bf16
  std::vector<float> f32;      // [rows * cols] otherwise

  bool empty() const { return rows == 0; }
  float at(int64_t i) const { return is_bf16 ? Bf16ToFloat(bf16[static_cast<size_t>(i)]) : f32[static_cast<size_t>(i)]; }
  int64_t bytes() const { return rows * cols * (is_bf16 ? 2 : 4); }
};

// Full attention. qkv rows: [q | k | v] for Qwen3; for Qwen3.5 the q part is q_proj as stored,
// per head [q_h (hd) | gate_h (hd)], so qkv = [nh*2*hd | nkv*hd | nkv*hd].
struct AttentionWeights {
  Weight qkv, o, q_norm, k_norm;
};

// Gated DeltaNet. in_proj rows: [qkv (conv_dim) | z (value_dim) | b (Hv) | a (Hv)].
struct GdnWeights {
  Weight in_proj, conv /* [conv_dim, K] */, a_log, dt_bias, norm /* [dv] */, out;
};

struct LayerWeights {
  LayerKind kind = LayerKind::kFullAttention;
  Weight input_norm, post_norm;
  AttentionWeights attn;
  GdnWeights gdn;
  Weight gate_up /* [2I, H]: [gate | up] */, down;
};

struct ModelWeights {
  Weight embed;  // [vocab, H]
  std::vector<LayerWeights> layers;
  Weight final_norm;
  Weight lm_head;  // empty when tied: the head is `embed`
  const Weight& head() const { return lm_head.empty() ? embed : lm_head; }
  int64_t bytes() const;
};

}  // namespace graft

// Model weights as the backends read them: one Weight per slot, fused where the forward pass
// runs several projections as one matmul.
//
// A Weight is a host copy in its storage format (bf16 kept as bf16; f16 and f32 as f32), shaped
// [rows, cols] with rows = the checkpoint's first dimension (output features for a Linear) and
// cols = the product of the others (1 for a vector). Immutable after loading.
//
// Quantized checkpoints (weights/quantized.h) keep projections in their stored format:
//   quant   set: the whole weight is one quantized tensor (bf16 / f32 empty);
//   parts   non-empty: a fused weight whose checkpoint tensors differ in storage (Qwen3.5's
//           in_proj: qkv and z quantized, b and a bf16; or two NVFP4 tensors with their own
//           global scales), kept as one Weight per tensor, stacked by rows in order; the
//           fused weight itself holds no data. A part is dense or `quant`, never split again.
// Only projections (what MatMul reads) are ever quantized; `at` is for dense weights.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/model_config.h"
#include "weights/quantized.h"
#include "util/bf16.h"

namespace graft {

struct Weight {
  std::string name;  // checkpoint name(s), '+'-joined when fused
  int64_t rows = 0;
  int64_t cols = 0;
  bool is_bf16 = false;
  std::vector<uint16_t> bf16;  // [rows * cols] when is_bf16
  std::vector<float> f32;      // [rows * cols] otherwise
  std::shared_ptr<const QuantizedWeight> quant;  // quantized storage (see above)
  std::vector<Weight> parts;   // mixed-storage fused weight (see above)

  bool empty() const { return rows == 0; }
  bool dense() const { return !quant && parts.empty(); }
  float at(int64_t i) const { return is_bf16 ? Bf16ToFloat(bf16[static_cast<size_t>(i)]) : f32[static_cast<size_t>(i)]; }
  int64_t bytes() const;  // as stored
  std::string storage() const;  // "bf16", "float32", "fp8 (128x128 blocks)", "int4 (groups) + bf16", ...
};

// A fused weight's adjacent parts that stack exactly joined into one part, rows in order: dense
// parts of one storage (Qwen3.5's in_proj b and a, bf16 beside quantized qkv and z), and
// quantized parts QuantizedStackable calls stackable (a checkpoint's gate and up, or q, k and v,
// stored FP8 or int4). One matmul where there were several, each output's sum unchanged (every
// backend sums an output over its own row and K alone). The rest stay as they are; when every
// part joins, the weight becomes that one part under its own name. Without parts: left alone.
void MergeParts(Weight& w);

// Rows [r0, r1) of w as the matmul reads them, as floats into out [(r1 - r0) * cols]: dense
// values as stored; int4 and NVFP4 rows dequantized and rounded to bf16 (W4A16: the weight
// the tensor cores multiply, as Marlin and compressed-tensors' decompression make it); FP8
// rows dequantized in fp32 (their matmul does not read them this way: see CpuOps::MatMul).
void WeightRows(const Weight& w, int64_t r0, int64_t r1, float* out);

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
  // How the layers' projections are stored, for start-up logs: "bf16", "int4 (groups) + bf16", ...
  std::string ProjectionStorage() const;
};

}  // namespace graft

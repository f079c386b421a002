// `graft quantize`: a bf16 checkpoint in, a quantized checkpoint out in a standard layout that
// transformers and vLLM read, with a quality report.
//
//   fp8-block  Qwen's official FP8 layout: every decoder projection except Qwen3.5's
//              in_proj_a / in_proj_b (48 rows; the official checkpoints keep them bf16) becomes
//              `weight` F8_E4M3 [N, K] + `weight_scale_inv` F32 [⌈N/128⌉, ⌈K/128⌉]
//              (weights/quantized.h: amax / 448 per 128x128 block); config.json gains
//              quantization_config {quant_method fp8, fmt e4m3, activation_scheme dynamic,
//              weight_block_size [128, 128], modules_to_not_convert [the Linear modules left as
//              they are]}.
//   w4a16      compressed-tensors pack-quantized: every such projection whose K is a multiple
//              of 128 becomes `weight_packed` I32 [N, K/8] (nibble i of word j = column 8j+i,
//              stored q + 8), `weight_scale` BF16 [N, K/128] (amax / 7.5), `weight_shape` I32
//              [2]; quantization_config {quant_method compressed-tensors, format
//              pack-quantized, config_groups {group_0: Linear, int4 symmetric group 128},
//              ignore [the Linear modules left as they are]}.
//   nvfp4      compressed-tensors nvfp4-pack-quantized, weight only (W4A16: Hopper has no FP4
//              tensor cores): every such projection whose K is a multiple of 16 becomes
//              `weight_packed` U8 [N, K/2] (low nibble = even column, e2m1), `weight_scale`
//              F8_E4M3 [N, K/16], `weight_global_scale` F32 [1] (= 1 / (amax / (6 · 448)));
//              quantization_config as for w4a16 with weights {num_bits 4, type float,
//              strategy tensor_group, group_size 16}.
// Everything else is copied unchanged.
// Streams shard by shard (one output shard per input shard, same names, the index rewritten),
// so peak memory is about one shard. Quality report (graft_quantize_report.json, and the
// result): the original model against the written checkpoint loaded as graft serves it (the
// CPU reference backend, each format multiplied as weights/quantized.h says), mean and max KL of
// next-token distributions and top-1 agreement over random token sequences, float32 activations.
#pragma once

#include <string>

#include "weights/quantized.h"
#include "weights/weights.h"
#include "util/status.h"

namespace graft {

struct QuantizeJob {
  std::string in, out;
  std::string format = "fp8-block";
  int eval_sequences = 4;  // 0 skips the quality report
  int eval_length = 64;
  int threads = 2;
};

struct QuantizeReport {
  int quantized = 0, kept = 0;  // tensors
  int64_t in_bytes = 0, out_bytes = 0;
  double mean_kl = -1, max_kl = -1, top1 = -1;
};

Result<QuantizeReport> RunQuantize(const QuantizeJob& job);

// The formats by their --format names ("fp8-block", "w4a16", "nvfp4").
Result<QuantFormat> ParseQuantFormat(const std::string& name);
// The formats QuantizeWeights takes for measurements (graft bench --dummy-quantize,
// graft_matmul_bench): graft quantize's, and "fp8-channel" — compressed-tensors' per-channel
// FP8 (per-token activation scales), which graft loads but does not write.
Result<QuantFormat> ParseBenchQuantFormat(const std::string& name);

// Quantizes loaded weights in memory the way RunQuantize quantizes a checkpoint (the same
// projections, the same rule for what stays high precision), each fused slot's tensors
// quantized apart and then stacked as loading that checkpoint stacks them (MergeParts,
// weights.h) — for benchmarks on dummy weights at real dimensions. Progress bar.
Status QuantizeWeights(ModelWeights& w, const ModelConfig& cfg, QuantFormat format, int threads);

}  // namespace graft

// Reading quantized checkpoints (checkpoint-formats.md §3): the scheme a checkpoint declares and
// the tensors of one quantized Linear.
//
// Schemes (from config.json's quantization_config, or ModelOpt's hf_quant_config.json):
//   fp8                 Qwen official FP8: `weight` F8_E4M3 [N, K] + `weight_scale_inv`
//                       [⌈N/B⌉, ⌈K/B⌉] (B = weight_block_size, square); skip list
//                       `modules_to_not_convert` (substring match, as transformers does).
//   compressed-tensors  `pack-quantized` int4: `weight_packed` I32 [N, K/8], `weight_scale`
//                       [N, K/G], `weight_shape` [2], optional `weight_zero_point`
//                       [⌈N/8⌉, K/G] and a trivial `weight_g_idx` (activation reordering is
//                       refused); `float-quantized` FP8: `weight` F8_E4M3 + `weight_scale`
//                       [N, 1] (per channel) or one value (per tensor); `nvfp4-pack-quantized`:
//                       `weight_packed` U8 [N, K/2], `weight_scale` F8_E4M3 [N, K/16],
//                       `weight_global_scale` [1] (the reciprocal of the global factor).
//                       Skip list `ignore`: exact module names (or a trailing part of them)
//                       and `re:` regular expressions matched from the start.
//   modelopt NVFP4      `weight` U8 [N, K/2], `weight_scale` F8_E4M3 [N, K/16],
//                       `weight_scale_2` (the global factor); skip list `exclude_modules`
//                       (shell wildcards).
// Activation scales stored beside the weights (`input_scale`, `input_global_scale`) are
// accepted and not used: FP8 activations are quantized per token at run time, and Hopper runs
// NVFP4 weight-only. AWQ, GPTQ and MLX layouts are refused by name.
//
// Codes that decode to NaN (e4m3 S.1111.111, in FP8 weights or NVFP4 group scales) are refused.
// The tensors decide each module's format; the scheme must agree: a quantized module the skip
// list names, or quantized tensors in a checkpoint that declares no scheme (or another one),
// is an error naming the module.
#pragma once

#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "weights/quantized.h"
#include "util/status.h"

namespace graft {

struct QuantScheme {
  std::string method;  // "" (none), "fp8", "compressed-tensors", "modelopt"
  std::string format;  // compressed-tensors: its format; modelopt: the quant_algo
  int block = 128;     // fp8 weight_block_size
  int group = 0;       // int4 group_size from the config (0: taken from the scale's shape)
  std::vector<std::string> skip;  // the skip list as written
  std::string source;  // the file it came from, for errors
  bool none() const { return method.empty(); }
  // Checks that the compressed-tensors `re:` patterns compile; an unreadable pattern is an error
  // naming it. LoadQuantScheme calls it.
  Status CheckPatterns() const;
  // Whether the skip list names `module`. `re:` patterns run as Python's re.match (PCRE2, a
  // bounded number of backtracking steps: a runaway pattern is an error naming it and the
  // module, never a hang or a silent "no").
  Result<bool> Skips(const std::string& module) const;
  std::string Describe() const;  // "fp8 (128x128 blocks)", "compressed-tensors pack-quantized", ...
};

// DIR/config.json's quantization_config, or DIR/hf_quant_config.json; none when neither says.
Result<QuantScheme> LoadQuantScheme(const std::string& dir);

// The Linear `module` (full name, without ".weight") of shape [n, k] if the checkpoint stores
// it quantized, else nullptr (its `.weight` is then an ordinary dense tensor for the caller).
// Every tensor it reads is added to `used`.
Result<std::shared_ptr<const QuantizedWeight>> ReadQuantizedLinear(const Checkpoint& ckpt, const QuantScheme& scheme,
                                                                   const std::string& module, int64_t n, int64_t k,
                                                                   std::vector<std::string>& used);

}  // namespace graft

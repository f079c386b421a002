// Quantized projection weights as checkpoints store them (checkpoint-formats.md §3), and the
// CPU reference dequantization of each format: W[n][k] as a float, computed exactly from the
// stored codes and scales (the formula of each format; products in fp32).
//
//   kFp8Block     Qwen official FP8: codes e4m3 [N, K]; scale [⌈N/128⌉, ⌈K/128⌉] (the file's
//                 `weight_scale_inv`, which multiplies); W = code · scale[n/128][k/128].
//   kFp8Channel   compressed-tensors FP8: codes e4m3 [N, K]; scale [N]; W = code · scale[n].
//   kInt4Group    compressed-tensors W4A16 pack-quantized: words [N, K/8], nibble i (LSB first)
//                 of word j is column 8j + i, stored as u = q + 8; scale [N, K/G]; symmetric
//                 W = (u − 8) · scale[n][k/G]; with zero points (words [⌈N/8⌉, K/G], nibble
//                 n mod 8 of word [n/8][g]) W = (u − zp) · scale.
//   kNvfp4        NVFP4: codes [N, K/2] bytes, low nibble = even k, e2m1; scale e4m3 [N, K/16];
//                 W = e2m1 · float(scale[n][k/16]) · global. ModelOpt's `weight_scale_2` is
//                 `global`; compressed-tensors stores its reciprocal (`weight_global_scale`),
//                 so a loader passes 1 / that.
#pragma once

#include <cstdint>
#include <vector>

#include "util/status.h"

namespace graft {

enum class QuantFormat { kFp8Block, kFp8Channel, kInt4Group, kNvfp4 };
const char* QuantFormatName(QuantFormat f);

struct QuantizedWeight {
  QuantFormat format = QuantFormat::kFp8Block;
  int64_t rows = 0, cols = 0;   // N, K
  int group = 0;                // columns per scale: 128 (fp8 block, int4), 16 (nvfp4); 0 for per channel
  std::vector<uint8_t> codes;   // fp8: [N*K]; nvfp4: [N*K/2]
  std::vector<int32_t> words;   // int4: [N*K/8]
  std::vector<float> scale;     // as described above, widened to float
  std::vector<uint8_t> scale_fp8;  // nvfp4: the e4m3 group scales [N*K/16]
  std::vector<int32_t> zero_words; // int4 with zero points: [⌈N/8⌉ * K/G] (empty: symmetric)
  float global = 1.0f;          // nvfp4
  int64_t StoredBytes() const;
};

// Checks that the arrays have the sizes the format and shape need (so dequantization never
// reads out of bounds); the error names the array and both sizes.
Status ValidateQuantized(const QuantizedWeight& w);

// Whether b's rows can follow a's in one weight with every row's codes and scales unchanged:
// the same format, columns and group, and a's rows a whole number of what shares storage across
// rows — fp8-block's block height (one scale), int4's 8 rows of a zero-point word (both with
// zero points or both without); NVFP4 also needs the same global scale. Per channel always.
bool QuantizedStackable(const QuantizedWeight& a, const QuantizedWeight& b);
// a's rows then b's (both valid, QuantizedStackable): each row dequantizes and multiplies exactly
// as it did in its own weight.
QuantizedWeight StackQuantized(const QuantizedWeight& a, const QuantizedWeight& b);

// Rows [r0, r1) of W as floats into out [(r1 - r0) * cols]. w must be valid.
void DequantizeRows(const QuantizedWeight& w, int64_t r0, int64_t r1, float* out);

// How a projection stored in each format multiplies (Ops::MatMul, every backend):
//   int4, NVFP4  W4A16: the weight dequantized and rounded to bf16 (what Marlin's registers and
//                compressed-tensors' decompression hold), then the bf16 matmul of a dense weight
//                — the same bits as a dense bf16 checkpoint holding those values.
//   FP8          W8A8 with dynamic activation scales, as the format's producers run it: each
//                row of x is cut into groups of A columns (fp8-block: the block size; per
//                channel: the whole row); per group sx = amax/448 (1 when the group is all
//                zero) and codes e4m3(x / sx) (Fp8QuantizeActivations). Then
//                y[n] = Σ_g ascending  dot_g(xq, wq[n]) · (sx[g] · sw[n][g])
//                with dot_g the fp32 16-lane dot product of the decoded codes over group g and
//                sw the weight's scale for that row and group (one per row per channel).
// A row's result depends only on that row (its groups, its scales): batch invariant.
int64_t Fp8ActivationGroup(const QuantizedWeight& w);  // A for an FP8 weight
void Fp8QuantizeActivations(const float* x, int64_t k, int64_t group, uint8_t* codes /*[k]*/,
                            float* scales /*[⌈k/group⌉]*/);
// sw for row n and activation group g of an FP8 weight.
inline float Fp8WeightScale(const QuantizedWeight& w, int64_t n, int64_t g) {
  if (w.format == QuantFormat::kFp8Channel) return w.scale[static_cast<size_t>(n)];
  const int64_t cb = (w.cols + w.group - 1) / w.group;
  return w.scale[static_cast<size_t>((n / w.group) * cb + g)];
}

// Quantizes W [rows, cols] (floats) the way the producers of each format do:
//   kFp8Block    scale = amax(block) / 448 per 128x128 block (1 for an all-zero block);
//                code = e4m3(W / scale).
//   kInt4Group   symmetric (compressed-tensors): scale = bf16(amax(group) / 7.5) per row and
//                128 columns (bf16, as the checkpoint stores it); q = clamp(round-half-even(
//                W / scale), -8, 7); stored u = q + 8.
//   kNvfp4       ModelOpt: global = amax(W) / (6 · 448) (moved up to the nearest float whose
//                reciprocal round trip 1 / (1 / global) is exact, as compressed-tensors stores
//                the reciprocal); per 16 columns the e4m3 scale
//                e4m3(amax(group) / 6 / global); code = e2m1(W / (scale · global)).
// Fails on shapes the format cannot hold (int4: cols % 128, nvfp4: cols % 16) or non-finite W.
// `shared_amax` (NVFP4 only): the global scale comes from max(amax(W), shared_amax) — for the
// tensors vLLM fuses into one module (q/k/v, gate/up, in_proj_qkv/z), which it serves with one
// global scale, so their quantizer gives each the amax of them all (as llm-compressor does).
Result<QuantizedWeight> Quantize(const float* w, int64_t rows, int64_t cols, QuantFormat format,
                                 float shared_amax = 0.0f);

}  // namespace graft

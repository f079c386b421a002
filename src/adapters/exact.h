// The exact representation of a merged projection: LoRA factors plus a sparse residual that
// together give back the merged release's bf16 weights bit for bit.
//
// Reconstruction (the contract exact mode serves; any backend must compute exactly this):
//   acc = Σ_{j<r} B[n][j] · A[j][c]      fp32, j in increasing order, no fused multiply-add
//   v   = float(W_base[n][c]) + acc       fp32
//   W[n][c] = bf16 round-to-nearest-even of v
//   then every (index, value) of the residual overwrites W[index] (index = n·K + c).
// Residual encoding: indices as LEB128 varints of the gap to the previous index minus one
// (the first from -1), values as the bf16 bit patterns.
#pragma once

#include <cstdint>
#include <vector>

#include "util/status.h"

namespace graft {

struct ExactResidual {
  std::vector<uint8_t> index_stream;
  std::vector<uint16_t> values;
  int64_t bytes() const { return static_cast<int64_t>(index_stream.size() + 2 * values.size()); }
};

// base: bf16 [n, k]; a: [r, k]; b: [n, r]. Returns the reconstructed bf16 [n, k] before the residual.
std::vector<uint16_t> ReconstructBf16(const uint16_t* base, int64_t n, int64_t k, const float* a, const float* b, int r);

// The residual that turns `rec` into `target` (both bf16 [count]).
ExactResidual EncodeResidual(const std::vector<uint16_t>& rec, const uint16_t* target, int64_t count);
// Applies a residual, checking every index against `w`'s size.
Status ApplyResidual(const ExactResidual& res, std::vector<uint16_t>& w);

// Adjusts rank-r factors (a [r, k], b [n, r], fp32) so that ReconstructBf16(base, a, b) equals
// `merged` (bf16 [n, k]) at as many elements as possible: alternating projections between
// "every element inside its merged value's rounding interval" and "rank r". Keeps the best
// factors seen; returns the number of elements that still differ.
Result<int64_t> RefitForExact(const uint16_t* base, const uint16_t* merged, int64_t n, int64_t k, int r,
                              std::vector<float>& a, std::vector<float>& b, int iterations, uint64_t seed);

}  // namespace graft

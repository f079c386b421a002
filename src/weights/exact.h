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

// Appends one LEB128 varint (7 bits a byte, low bits first, high bit = more follows).
void AppendVarint(std::vector<uint8_t>& out, uint64_t v);

// The residual that turns `rec` into `target` (both bf16 [count]).
ExactResidual EncodeResidual(const std::vector<uint16_t>& rec, const uint16_t* target, int64_t count);
// Applies a residual, checking every index against `w`'s size.
Status ApplyResidual(const ExactResidual& res, std::vector<uint16_t>& w);

// A residual made ready to serve: decoded once (so a truncated or hostile one is refused when
// it is loaded, never when it is used) and split into chunks of kResidualChunk values, each
// with the byte offset of its first varint and the index before it, so chunks apply in
// parallel (CPU threads, one CUDA thread each) while the stored stream stays as compact as on
// disk. Holds the residual of one projection of `count` elements.
inline constexpr int kResidualChunk = 256;
struct IndexedResidual {
  ExactResidual res;
  int64_t count = 0;
  std::vector<uint32_t> chunk_byte;  // [chunks] offset of the chunk's first varint
  std::vector<int64_t> chunk_prev;   // [chunks] the index before the chunk's first (-1 for the first)
  int64_t chunks() const { return static_cast<int64_t>(chunk_byte.size()); }
  int64_t values() const { return static_cast<int64_t>(res.values.size()); }
  int64_t bytes() const { return res.bytes() + 12 * chunks(); }
};
// Validates every varint and index (inside [0, count), strictly increasing, no trailing bytes).
Result<IndexedResidual> IndexResidual(ExactResidual res, int64_t count);
// Writes chunk c's values into w (bf16 [r.count]); the CPU reference of the CUDA kernel.
void ApplyResidualChunk(const IndexedResidual& r, int64_t c, uint16_t* w);

// Rows [row0, row1) of the reconstruction before the residual (the contract above) into out
// (bf16 [(row1 - row0), k]); a [r, k] and b [n, r] as floats.
void ReconstructRows(const uint16_t* base, int64_t k, const float* a, const float* b, int r, int64_t row0, int64_t row1,
                     uint16_t* out);

// Adjusts rank-r factors (a [r, k], b [n, r], fp32) so that ReconstructBf16(base, a, b) equals
// `merged` (bf16 [n, k]) at as many elements as possible: alternating projections between
// "every element inside its merged value's rounding interval" and "rank r". Keeps the best
// factors seen; returns the number of elements that still differ.
Result<int64_t> RefitForExact(const uint16_t* base, const uint16_t* merged, int64_t n, int64_t k, int r,
                              std::vector<float>& a, std::vector<float>& b, int iterations, uint64_t seed);

}  // namespace graft

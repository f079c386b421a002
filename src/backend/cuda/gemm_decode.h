// The decode GEMM (MatMul's form for 1 to kDecodeFormRows rows (matmul.h), at most 64, of bf16 activations against a dense bf16
// weight): y[m, N] = xb[m, K] · Wᵀ, the activations already bf16 (gemm_pipe.h's ToBf16).
//
// A decode step reads every weight once for a handful of rows, so the whole game is keeping
// enough bytes in flight with few instructions per byte: each warp owns 8 outputs and streams
// their K through a three- or four-stage shared-memory ring (cp.async, the x rows with them;
// one to eight warps a block sharing each stage's x, 128 or 256 K columns a stage, the shape
// picked by m and N — gemm_decode.cu). Full stages copy with precomputed addresses,
// operands come through ldmatrix (x rows as the A operand, rows past m copies of row m - 1 whose
// outputs are dropped), and each 16-wide K chunk goes through mma.sync m16n8k16, ascending from
// zero, exactly as in the prefill form and the WMMA kernels (matmul.h), so a row's bits do not
// depend on which form its batch size picks.
//
// Needs 1 <= m <= kDecodeMaxRows, N % 8 == 0, K % 16 == 0, xb and w 16-byte aligned. split_k > 0
// (a multiple of 16) asks for MatMulSplitK's deterministic split (matmul.h): the product over K
// columns [s split_k, (s + 1) split_k), each from zero, unrounded into y + s m ldy. x_cols > 0:
// x repeated along K, as in GemmPipe (gemm_pipe.h).
#pragma once

#include <cstdint>

#include "util/status.h"

namespace graft::cuda {

inline constexpr int64_t kDecodeMaxRows = 64;

Status GemmDecode(const uint16_t* xb, int64_t m, const uint16_t* w, int64_t n, int64_t k, float* y, int64_t ldy,
                  bool round_output, void* stream, int64_t split_k = 0, int64_t x_cols = 0);

// A LoRA delta's B product added where it belongs (LoraScatterAdd's arithmetic without the
// product's fp32 outputs in memory): output (r, c) = r(xb_r · w_c) goes to y row rows[r] (row r
// when rows is null, device memory) as y = r(y + r(output · scale)), every rounding to bf16.
// The same needs as GemmDecode; no split.
Status GemmDecodeAddRows(const uint16_t* xb, int64_t m, const uint16_t* w, int64_t n, int64_t k, float* y, int64_t ldy,
                         const int32_t* rows, float scale, void* stream);

// One product of a GemmDecodeGroups launch: GemmDecode's arguments (split_k as there, x_cols == K)
// or GemmDecodeAddRows' (y_rows, scale; no split), with x's rows picked: product row r reads
// xb + x_rows[r] · x_ld (row r when x_rows is null; device memory, like y_rows).
struct DecodeGroup {
  const uint16_t* xb = nullptr;
  int64_t x_ld = 0;
  const int32_t* x_rows = nullptr;
  int64_t m = 0;
  const uint16_t* w = nullptr;
  int64_t n = 0, k = 0, split_k = 0;
  float* y = nullptr;
  int64_t ldy = 0;
  const int32_t* y_rows = nullptr;
  float scale = 1.0f;
  bool round = false;  // (add false) GemmDecode's round_output
  // (add true, x_rows null) x made in the launch from a split product's slices instead of read
  // from xb: row r, column c = the bf16 rounding of Σ_s x_partial[s][r][c] ([x_splits, m, K], the
  // slices in ascending s) — SumSplitsBf16Groups' value, so the same bits as that sum's launch
  // and then this product on its output. Every block of the product makes the rows it reads: for
  // a few rows and slices (a decode step's LoRA B product on its A product's slices).
  const float* x_partial = nullptr;
  int64_t x_splits = 0;
};
inline constexpr int kMaxDecodeGroups = 64;
// Up to kMaxDecodeGroups products of the decode form in one launch (groups on the device, host
// the same array on the host): every GemmDecode (add false: a LoRA A product's unrounded split
// slices, or a projection's own product rounded, each as its `round` says) or every
// GemmDecodeAddRows (add true: a LoRA B product added into y). Each product's
// outputs are the bits its own call gives (the same chunks in the same order; the shape, taken
// from the most rows and outputs any product has, never changes them). For a decode step's LoRA:
// every adapter's modules in a few launches, not a few launches a module.
Status GemmDecodeGroups(const DecodeGroup* groups, const DecodeGroup* host, int count, bool add, void* stream);

}  // namespace graft::cuda

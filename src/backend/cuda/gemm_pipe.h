// The prefill GEMM (MatMul's form for more than 64 rows of bf16 activations against a dense
// bf16 weight): y[m, N] = xb[m, K] · Wᵀ with the activations already bf16 (ToBf16 below, the
// very values the other kernels round them to as they stage).
//
// The mma.sync kernel (GemmPipeMmaSync): 128 x 128 outputs per block, 8 warps as 2 x 4 (64 x 32 each), K in 32-wide slices through a
// four-stage shared-memory ring filled by cp.async (16 bytes a copy, zeros past m, N and K), the
// fragments read with ldmatrix into mma.sync m16n8k16 (bf16 → fp32): the instruction WMMA's
// 16 x 16 x 16 step is made of. Every output gains its products as the same ascending sequence
// of 16-wide K chunks through it, starting from zero, exactly as the decode form and the 64-row
// tile do (matmul.h), so a row's bits are the same whichever kernel its batch size picks — tested
// across them. Tiles are visited in groups of eight row tiles, columns within a group, so that a
// wave of blocks shares a few weight tiles through the L2 instead of streaming all of W once per
// row tile.
//
// Needs K % 8 == 0 and xb, w 16-byte aligned. No split-K of its own choosing: a row's bits never
// depend on m. split_k > 0 (a multiple of 16) asks for MatMulSplitK's deterministic split
// (matmul.h): the product over K columns [s split_k, (s + 1) split_k), each from zero, unrounded
// into y + s m ldy — a function of K alone, so the bits still never depend on m. x_cols > 0
// (a multiple of kRepeatAlign dividing K; split_k then too) reads x as [m, x_cols] repeated
// K / x_cols times along K: an fp32 LoRA factor's three bf16 pieces side by side
// (cuda_ops.h) without a tripled copy of x.
#pragma once

#include <cstdint>

#include "util/status.h"

namespace graft::cuda {

// A repeated x's row length must be a multiple of this (so that no stage of either form spans
// two repeats).
inline constexpr int64_t kRepeatAlign = 256;

// out[i] = bf16(x[i]) (round to nearest even) for i < count; out's bf16 words as uint16_t.
Status ToBf16(const float* x, int64_t count, uint16_t* out, void* stream);

// A plain product (no split, x not repeated) runs the wgmma form (gemm_wgmma.h: the same bits),
// and so does an unrounded split into whole 64-column slices of x as it is (GemmWgmmaSplitK: a
// LoRA A product); other split and repeated products run the mma.sync kernel described above.
Status GemmPipe(const uint16_t* xb, int64_t m, const uint16_t* w, int64_t n, int64_t k, float* y, int64_t ldy,
                bool round_output, void* stream, int64_t split_k = 0, int64_t x_cols = 0);
// Always the mma.sync kernel (the tests compare the wgmma form's bits with it; the matmul bench
// times both).
Status GemmPipeMmaSync(const uint16_t* xb, int64_t m, const uint16_t* w, int64_t n, int64_t k, float* y, int64_t ldy,
                       bool round_output, void* stream, int64_t split_k = 0, int64_t x_cols = 0);

}  // namespace graft::cuda

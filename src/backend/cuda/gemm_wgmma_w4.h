// The W4A16 prefill GEMM on Hopper's warpgroup tensor cores: y[m, N] = xb[m, K] · Wᵀ for bf16
// activations (already bf16) against a 4-bit weight W [N, K] (int4 or NVFP4 in the lane order of
// int4_lanes.h), dequantized in registers inside the main loop — no bf16 copy of the weight in
// memory, no partial sums through memory.
//
// Structure: gemm_wgmma.h's (a persistent grid of one block a multiprocessor walking the tiles in
// a grouped order, a producer warpgroup whose one thread feeds a ring of stages by TMA, two
// consumer warpgroups) with the operands as the decode form has them (gemm_decode_w4.h): the
// weights are wgmma's A operand, from registers, and 128 rows of x its N, from the 128-byte
// swizzled stages. Each consumer warp streams its two rows' lane words of every 128-column stage
// straight from memory into a register ring two stages ahead and turns them into A fragments
// (w4_fragments.cuh, the decode form's functions), one 32-column step at a time into two
// alternating register sets, so that a step's dequantization runs while the step before is on
// the tensor cores. A tile: 128 weight rows (64 a consumer, wgmma's M) x 128 rows of x.
//
// Bits: the W4A16 contract (gemm_decode_w4.h): K in slices of kW4SliceColumns columns, each
// slice's product one fp32 accumulator from zero over its ascending 16-wide steps, the slices
// added in ascending order in registers (SumOfSlices' order: the first slice's is the sum) and
// the sum rounded once — SumSplits over MatMulSplitK on the dequantized weight. A wgmma k16 step
// with A from registers is the same fused add of 16 products and the accumulator as the
// mma.sync step (docs/design.md §3.2), so every output has the decode form's bits and the
// dequantized-chunk form's, whatever m, the tile or the grid.
//
// GemmWgmmaW4Fits: m >= 1, the weight as W4LanesFit takes it (N % 8 == 0, K % 128 == 0,
// symmetric int4 groups of 2^j >= 32 columns or NVFP4 with its table, lane order, aligned), xb
// 16-byte aligned.
#pragma once

#include <cstdint>

#include "backend/cuda/device_weight.h"
#include "util/status.h"

namespace graft::cuda {

bool GemmWgmmaW4Fits(int64_t m, const DevWeight& w, const void* xb);
// y's rows are ldy floats apart (>= N); round_output: each sum rounded to bf16 (as a float).
Status GemmWgmmaW4(const uint16_t* xb, int64_t m, const DevWeight& w, float* y, int64_t ldy, bool round_output,
                   void* stream);

}  // namespace graft::cuda

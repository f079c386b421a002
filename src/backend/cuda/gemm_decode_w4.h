// The W4A16 decode GEMM (MatMul's form for 1 to 16 rows of bf16 activations against int4 or
// NVFP4 weights): y[m, N] = xb[m, K] · Wᵀ with W dequantized to bf16 exactly as
// quant_weight.cuh's QuantAt does.
//
// Every W4A16 tensor-core form (this one; past 16 rows the weight dequantized to bf16 through
// the bf16 forms, and the WMMA forms where neither fits, in matmul.cu) sums K in
// slices of kW4SliceColumns columns — MatMulSplitK's slices (matmul.h): each slice's 16-wide
// chunks ascending from zero, then the slices added in ascending order — so every output has
// the bits of SumSplits over MatMulSplitK on a dense bf16 weight holding those values, whichever
// form its batch size picks. The slices are a function of K alone (DESIGN.md §3.2 lets the order
// depend on K and N, never on m); they let a 4-bit product at batch 1 run K's slices on
// separate warps, where one chain of K / 16 dependent mma.sync would take longer than reading
// the weights.
//
// A block owns 16 outputs, the M of mma.sync m16n8k16: the weights are the A operand and the x
// rows its N (8 a tile, two tiles past 8 rows), so one mma covers 16 outputs x 16 K — batch 1
// uses one of the N columns either way, and this way round halves the mma.sync and ldmatrix a
// weight byte. Its warps (one per slice, fewer where their rings would not fit in shared
// memory) stream their slices' packed weights, scales and x columns through four-stage cp.async
// rings of 128-column stages (256 for int4 at up to 8 rows with groups >= 64 where every slice
// keeps its warp); each 16-wide K chunk's A fragment is dequantized in registers straight from the packed
// words (no bf16 tile), then mma.sync. int4 words and NVFP4 bytes are read in the device copy's
// lane order (int4_lanes.h: one word a lane per row and two chunks). int4: one shift and mask per
// fragment register; with bf16-valued scales (DevWeight::scale_bf16, what compressed-tensors
// stores) the pair is dequantized by two bf16x2 FMAs, otherwise by QuantAt's fp32 arithmetic.
// NVFP4: byte permutes from the tensor's table of bf16 values per scale code (nvfp4_table.h, in
// shared memory), QuantAt's values bit for bit — 10 PRMT, 3 shifts and 5 logic ops a word of a
// row instead of 3 fp32 multiplies and a conversion a weight (gate|up at batch 1: 137 -> 69 us).
// The products are the same bits either way round (each output's 16 products in the same K places).
//
// Copies are addressed from running columns (a group's scale is column >> log2 group), so the
// loop is the dequantization and mma.sync plus a few copies a stage (~370 instructions a 1 KB
// stage with bf16 scales, from ~640 when each copy's address was recomputed from the stage
// number); ncu then shows issue and a throttled math pipe as the limit, not memory latency:
// 28-34% of the copy bandwidth at Qwen3.5-27B's shapes.
//
// DecodeW4a16Fits: 1 <= m <= 16, N % 8 == 0, K % 128 == 0, symmetric int4 in lane order with
// groups of a power of two >= 32 columns (or NVFP4 in lane order with its table), 16-byte
// aligned operands.
#pragma once

#include <cstdint>

#include "backend/cuda/device_weight.h"
#include "util/status.h"

namespace graft::cuda {

// K columns a slice of the W4A16 products (equal to MatMulSplitK's for K > 1024; for K <= 1024
// one slice).
inline constexpr int64_t kW4SliceColumns = 1024;

bool DecodeW4a16Fits(int64_t m, const DevWeight& w);
Status GemmDecodeW4a16(const uint16_t* xb, int64_t m, const DevWeight& w, float* y, int64_t ldy, bool round_output,
                       void* stream);

}  // namespace graft::cuda

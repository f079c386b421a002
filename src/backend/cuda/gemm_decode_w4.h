// The W4A16 decode GEMM (MatMul's form for 1 to 16 rows of activations against int4 or NVFP4
// weights): y[m, N] = bf16(x)[m, K] · Wᵀ with W dequantized to bf16 exactly as
// quant_weight.cuh's QuantAt does.
//
// Every W4A16 tensor-core form (this one; past 16 rows gemm_wgmma_w4.h, or for weights neither
// takes the weight dequantized to bf16 through the bf16 forms, and the WMMA forms where none fits,
// in matmul.cu) sums K in
// slices of kW4SliceColumns columns — MatMulSplitK's slices (matmul.h): each slice's 16-wide
// chunks ascending from zero, then the slices added in ascending order — so every output has
// the bits of SumSplits over MatMulSplitK on a dense bf16 weight holding those values, whichever
// form its batch size picks. The slices are a function of K alone (docs/design.md §3.2 lets the order
// depend on K and N, never on m).
//
// A warp owns 16 outputs x one slice, the M of mma.sync m16n8k16: the weights are the A operand
// and the x rows its N (8 a tile, two tiles past 8 rows), so one mma covers 16 outputs x 16 K.
// A block is four such warps on one slice (eight from four rows, sixteen past eight for 8,192 or
// more outputs: they share the slice of x)
// (grid: 64- or 128-output blocks x slices); it converts its
// slice of x to bf16 into shared memory once (x arrives in fp32: no separate bf16 copy, no
// launch for it), each warp streams its weights straight into registers — with the lane order
// of int4_lanes.h a lane's 128 columns of a row are one 16-byte load, the group of four lanes 64
// contiguous bytes — four 128-column stages ahead, and dequantizes each A fragment in registers
// (no shared-memory tile, no copy instructions): int4 by a mask-or-magic LOP3 and two bf16x2
// FMAs a pair (bf16-valued scales, what compressed-tensors stores) or QuantAt's fp32 arithmetic;
// NVFP4 by byte permutes from the tensor's table of bf16 values per scale code
// (nvfp4_table.h, in shared memory). The slices' partial sums go to scratch and SumSplits adds
// them in ascending order (K <= 1024: one slice, written straight to y).
// A whole slice's eight stages are unrolled at compile time (the ring never moves, every load
// and ldmatrix offset is a constant, no stage tests its index; a short last slice keeps the
// loop): w4a16 at batch 1 5.72 against 6.32 ms of projections a step, gate|up 36.1 -> 30.7 us
// (73% of the copy bandwidth), the whole model 108.9 -> 122.3 tok/s (bench/results/decode.md
// § unroll (2026-12-02); 82 registers, five blocks an SM where the loop form had six).
//
// The form it replaced (16 outputs a block, its warps sharing K's slices, cp.async rings) spent
// ~370 instructions a 1 KB of weights on copies and their addressing and kept one block of 17
// warps an SM at K = 17408 (shared memory): 24-43% of the copy bandwidth at batch 1. This one
// issues ~205 a KB; int4 at batch 1 (H200, Qwen3.5-27B shapes): down 39.9 -> 25.2 us, gate|up
// 51.9 -> 41.1 us; now bound by load latency (ncu: long-scoreboard stalls), not issue. Tried and
// dropped (bench/results/decode.md § w4-registers (2026-12-01)): warps streaming several row groups in one
// wave (+17% at 16 rows, -8% NVFP4 at batch 1), the slices summed in the kernel by the last
// warp of a row group (its fences cost more than the SumSplits launch; again by the last block
// of a tile in a slice-major grid, bench/results/decode.md § sweeps (2026-12-02): 4-6% slower), early launch (PDL),
// each warp's whole slice by bulk copies (TMA) into shared memory (the first mma then waits for
// all of it), or by one cp.async group a stage computed as each lands (bench/results/
// bench/results/decode.md § decode-variants (2026-12-01): twice the bytes in flight, but its shared memory costs blocks
// an SM; slower). The weight loads ask L2 for 256-byte segments (a lane's next three stages of
// the row): +4% at batch 1. The loads alone in this pattern reach 3.6 TB/s
// (bench/probes/w4_load_pattern.cu), the kernel ~2.3: the rest is the kernel's, not the pattern's.
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

// The weight side of DecodeW4a16Fits (also the prefill form's, gemm_wgmma_w4.h): N % 8 == 0,
// K % 128 == 0, symmetric int4 in lane order with groups of a power of two >= 32 columns or
// NVFP4 in lane order with its table, 16-byte aligned data and scales.
bool W4LanesFit(const DevWeight& w);
bool DecodeW4a16Fits(int64_t m, const DevWeight& w);
// Whether `tail` — a dense bf16 weight of w's K, a multiple of 16 rows up to 256 (a fused
// weight's unquantized few outputs beside its 4-bit ones: Qwen3.5's GDN b / a) — can ride in
// w's launch (w's rows a multiple of 16 too): its rows as the launch's first blocks, the same chains as MatMul gives it alone
// (MatMulSplitK's slices, SumSplits), its outputs in y's columns after w's.
bool DecodeW4a16TailFits(int64_t m, const DevWeight& w, const DevWeight& tail);
// Scratch bytes GemmDecodeW4a16 needs (the slices' partial sums; 0 for one slice).
int64_t DecodeW4a16ScratchBytes(int64_t m, const DevWeight& w, const DevWeight* tail = nullptr);
// x [m, K] fp32 (16-byte aligned; rounded to bf16 as it is read), y [m, ldy]: columns 0 .. N - 1
// w's outputs, then (tail != nullptr, DecodeW4a16TailFits) the tail's.
Status GemmDecodeW4a16(const float* x, int64_t m, const DevWeight& w, float* y, int64_t ldy, bool round_output,
                       void* stream, void* scratch, const DevWeight* tail = nullptr);

}  // namespace graft::cuda

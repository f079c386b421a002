// CUDA projection y[m, N] = x[m, K] · Wᵀ (W [N, K]), the contract of Ops::MatMul.
//
// bf16 weights with bf16 activations run on the tensor cores (bf16 → fp32): for up to 64 rows
// the decode form (gemm_decode.h: x copied to bf16 into `scratch`, a warp per 8 outputs
// streaming the weights through a cp.async ring; N % 8 == 0, K % 16 == 0), for W4A16 weights up
// to 16 rows gemm_decode_w4.h where it fits (K % 128 == 0, symmetric int4 or NVFP4 in lane
// order: x read in fp32, a warp per 16 outputs and slice streaming the packed weights into
// registers and dequantizing them there), else up to 64 rows a WMMA form with a warp per 16 outputs (N
// and K multiples of 16), 64 x 64 block tiles where nothing else fits, and for more than 64
// rows the prefill form (gemm_pipe.h: x copied to bf16 once into `scratch`, then wgmma fed by
// TMA — gemm_wgmma.h — or, split along K or reading x repeated, a cp.async ring and mma.sync;
// dense weights, k % 8 == 0, aligned) — W4A16 weights in the lane order there run
// gemm_wgmma_w4.h (x copied to bf16 once, the weights dequantized in registers inside the wgmma
// main loop, the slices summed in registers), others are dequantized to bf16 a chunk of output
// rows at a time into `scratch` and run through the prefill form in MatMulSplitK's slices
// (K % 16 == 0, N % 8 == 0; otherwise 128 x 128 WMMA tiles that dequantize as they stage). In all of them,
// every output gains its products as the same sequence of 16-wide K chunks, ascending, through
// the same instruction: the order depends only on K — never on m, the kernel chosen, a row's
// place in the batch or its neighbours' values — so a row's bits never depend on the other rows
// (docs/design.md §3.2; tested across the kernels). Dense weights: one chain over all of K — except
// those with few outputs (N <= 256, N % 8 == 0, K % 16 == 0, K past one slice: a GDN's b / a
// gates), which run MatMulSplitK's slices at every m so that one row spreads over the GPU. W4A16
// weights: K in MatMulSplitK's slices (gemm_decode_w4.h: a chain a slice, the slices added in
// ascending order), in every W4A16 form alike — so batch-1 decode can run the slices on separate
// warps. fp32
// weights, or fp32 activations (which bf16 tensor cores would round), run a SIMT kernel that
// sums in the CPU reference's 16-lane order. The result is rounded to bf16 once at the end
// when round_output and bf16 (logits pass round_output = false and stay fp32).
#pragma once

#include <cstdint>

#include "backend/cuda/device_weight.h"
#include "backend/cuda/gemm_wgmma.h"
#include "util/status.h"

namespace graft::cuda {

//
// Quantized weights (weights/quantized.h): int4 and NVFP4 (W4A16) run the same kernels, each weight
// dequantized to bf16 as it is staged — bit for bit SumSplits over MatMulSplitK on a dense bf16
// weight holding those values (for K <= 1024, one slice: the plain matmul's bits), and with fp32
// activations the CPU reference's bits through the SIMT kernels.
// FP8 weights run MatMulFp8. y's rows are ldy floats apart (>= N), so one tensor of a fused
// weight can fill its own columns.
// `scratch`: MatMulScratchBytes(m, w, bf16) bytes of device memory (16-byte aligned; nullptr
// when that is 0), which MatMul overwrites.
int64_t MatMulScratchBytes(int64_t m, const DevWeight& w, bool bf16);
// Where a MatMul call with this scratch leaves x's bf16 copy [m, K] (the forms that read x as
// bf16 copy it first, to the scratch's start), or nullptr where its form makes none: a LoRA
// delta on the same x reads it rather than copying x again.
const uint16_t* MatMulBf16Copy(int64_t m, const DevWeight& w, bool bf16, bool x_aligned16, const void* scratch);

// Which kernel MatMul runs: a pure function of the row count, the weight's format, shape and
// data alignment, the activation dtype and whether x is 16-byte aligned — the one place the
// routing described above is decided (MatMul and MatMulScratchBytes both follow it). The loud
// default is kTile128 / kTile64: the first tensor-core kernels, far slower, kept for bf16 and
// 4-bit weights that no streaming or pipelined form takes (a misaligned or odd shape); their names
// say "fallback", and the form table test fails if a model's projection lands there.
enum class MatMulForm : uint8_t {
  kW4Decode,         // gemm_decode_w4.h: 4-bit weights, up to 16 rows
  kBf16Decode,       // gemm_decode.h: up to 64 rows
  kBf16DecodeSplit,  // ... in MatMulSplitK's slices (few outputs, long K)
  kBf16Prefill,      // gemm_pipe.h -> gemm_wgmma.h: past 64 rows
  kBf16PrefillSplit, // ... in slices (the mma.sync prefill kernel)
  kW4PrefillWgmma,   // gemm_wgmma_w4.h: 4-bit weights in lane order past 16 rows, dequantized in registers
  kW4Prefill,        // 4-bit weights past 16 rows that form does not take, and every 4-bit weight from
                     // 2048 rows: dequantized to bf16 a chunk of output rows at a time, each chunk's
                     // product with its slices summed in the kernel (GemmWgmmaSplitKSumF32)
  kW4Skinny,         // 4-bit weights, up to 64 rows, where the decode form does not fit
  kTile128,          // fallback: bf16 tensor cores, 128 x 128 tiles (past 64 rows, aligned)
  kTile64,           // fallback: bf16 tensor cores, 64 x 64 tiles
  kSimtTiled,        // fp32 (activations or weights), more than 8 rows: the CPU reference's sums
  kSimt,             // fp32, up to 8 rows
  kNone,             // FP8 weights: MatMulFp8's
};
const char* MatMulFormName(MatMulForm f);
MatMulForm ChooseMatMulForm(int64_t m, const DevWeight& w, bool bf16, bool x_aligned16);
// The row count up to which dense bf16 weights take the decode form (gemm_decode.h, at most
// kDecodeMaxRows), the prefill form (wgmma) beyond. Either gives a row the same bits. 32: at 33,
// 48 and 64 rows the wgmma form runs Qwen3.5-27B's projections in 24.1 / 22.7 / 22.2 ms a step
// against the decode form's 31.0 / 33.5 / 35.3 (H100, bench/results/decode.md § crossover).

inline constexpr int64_t kDecodeFormRows = 32;

// A twin (backend/ops.h) the bf16 forms can read as it is: xb when 16-byte aligned, else null.
inline const uint16_t* UsableTwin(const uint16_t* xb) {
  return xb != nullptr && reinterpret_cast<uintptr_t>(xb) % 16 == 0 ? xb : nullptr;
}
// xb_twin: null, or x's values as bf16 [m, K] (Ops' twin, 16-byte aligned): the forms that read
// x as bf16 take it instead of copying x into the scratch (MatMulBf16Copy then names no copy).
Status MatMul(const float* x, int64_t m, const DevWeight& w, float* y, int64_t ldy, bool round_output, bool bf16,
              void* stream, void* scratch, const uint16_t* xb_twin = nullptr);

// The mma.sync forms on activations already bf16 (xb, 16-byte aligned): the decode form up to
// kDecodeFormRows rows, the prefill form beyond — the kernels MatMul and MatMulSplitK run after
// their ToBf16, the same bits. xb is [m, x_cols]: x_cols == K, or (Bf16FormsFit) a multiple of
// kRepeatAlign dividing K that is read repeated along K — the input of an fp32 LoRA factor split
// into three bf16 pieces, without the tripled copy. split_k: MatMulSplitK's slices into y as its
// `partial` (ldy == N), unrounded.
bool Bf16FormsFit(int64_t m, const DevWeight& w, int64_t x_cols);
Status MatMulBf16(const uint16_t* xb, int64_t x_cols, int64_t m, const DevWeight& w, float* y, int64_t ldy,
                  bool round_output, bool split_k, void* stream);

// A deterministic split-K for products with few outputs and a long K (the LoRA down
// projection: N = rank): K is cut into slices of SplitKColumns(K) columns — a function of K
// alone — and each slice's product, its 16-wide chunks ascending through the bf16 WMMA
// instruction, lands unrounded in partial [splits, m, N] (splits = ceil(K / SplitKColumns(K)));
// SumSplits then adds the slices in ascending order and rounds once. A row's bits therefore
// depend only on K, N and its own values, never on m. bf16 dense weights, bf16 activations.
int64_t SplitKColumns(int64_t k);
// `scratch`: MatMulSplitKScratchBytes(m, w) bytes, 16-byte aligned: the bf16 copy of x that the
// decode and prefill forms read when the slices run through them (the partials are the
// caller's; MatMulScratchBytes would also count MatMul's own partials for few-output weights).
int64_t MatMulSplitKScratchBytes(int64_t m, const DevWeight& w);
Status MatMulSplitK(const float* x, int64_t m, const DevWeight& w, float* partial, void* stream, void* scratch);
Status SumSplits(const float* partial, int64_t m, const DevWeight& w, float* y, bool round_output, void* stream);
// SumSplits rounded to bf16, into bf16 words y [m, N] (a LoRA t for its bf16 B product: the
// values SumSplits(..., round_output = true) gives, without an fp32 copy and a ToBf16).
Status SumSplitsBf16(const float* partial, int64_t m, const DevWeight& w, uint16_t* y, void* stream);
// SumSplitsBf16 of a stacked weight (several LoRA A factors one above the other, block b its rows
// [starts[b], starts[b + 1]), starts[0] = 0, starts[blocks] = N): each block's outputs in a
// [m, rows of the block] array of its own, one after another — block b at y + m · starts[b] — as
// SumSplitsBf16 of that factor alone writes them; `place` puts the call's rows inside taller
// arrays (gemm_wgmma.h's BlockRows). 1 <= blocks <= kMaxSumBlocks.
inline constexpr int kMaxSumBlocks = 8;
Status SumSplitsBf16Blocks(const float* partial, int64_t m, const DevWeight& w, const int64_t* starts, int blocks,
                           uint16_t* y, void* stream, BlockRows place = {});
// Several SumSplitsBf16 in one launch: sum i adds partial [splits, m, cols] (its own product's
// slices) into y [m, cols] as SumSplitsBf16 does — each sum the bits of its own call. For a decode
// step's LoRA t of every adapter's modules at once (cuda/gemm_decode.h's GemmDecodeGroups).
struct SplitSum {
  const float* partial = nullptr;
  int64_t splits = 0, m = 0, cols = 0;
  uint16_t* y = nullptr;
};
inline constexpr int kMaxSplitSums = 64;
Status SumSplitsBf16Groups(const SplitSum* sums, int count, void* stream);
// MatMulBf16(split_k = true) then SumSplitsBf16Blocks in one launch where the summed split form
// takes it (gemm_wgmma.h's GemmWgmmaSplitKSum: the same bits, no partials through memory): more
// than kDecodeFormRows rows, x read as it is (x_cols == K), w one dense bf16 tensor the wgmma
// GEMM takes, and 128 x 128 output tiles for at least a quarter of the multiprocessors (fewer: the
// split form is faster). A LoRA module's t = r(x · Aᵀ) at prefill sizes, several stacked factors' at once.
bool SplitKSumFits(int64_t m, const DevWeight& w, int64_t x_cols, const void* xb);
Status MatMulSplitKSumBf16(const uint16_t* xb, int64_t m, const DevWeight& w, const int64_t* starts, int blocks,
                           uint16_t* y, void* stream, BlockRows place = {});
// SumSplits into y with rows ldy (>= N) apart: one tensor of a fused weight filling its columns.
Status SumSplitsInto(const float* partial, int64_t m, const DevWeight& w, float* y, int64_t ldy, bool round_output,
                     void* stream);

// FP8 W8A8 as weights/quantized.h defines it: activations quantized per row and group into
// `scratch` (Fp8ScratchFloats(m, w) floats of device memory), then with bf16 activations the
// FP8 tensor cores where gemm_fp8.h fits (each group's dot summed by the hardware: close to the
// CPU, not its bits; batch invariant), otherwise — and always with fp32 activations — a SIMT
// GEMM in the CPU reference's order, the CPU's bits.
int64_t Fp8ScratchFloats(int64_t m, const DevWeight& w);
Status MatMulFp8(const float* x, int64_t m, const DevWeight& w, float* scratch, float* y, int64_t ldy,
                 bool round_output, bool bf16, void* stream);

}  // namespace graft::cuda

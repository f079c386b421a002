// The prefill GEMM on Hopper's warpgroup tensor cores: y[m, N] = xb[m, K] · Wᵀ for bf16
// activations (already bf16: gemm_pipe.h's ToBf16) against a dense bf16 weight W [N, K], fp32
// accumulation, y fp32 (rounded to bf16 once at the end when round_output).
//
// Structure (the design Hopper's fastest GEMMs share): a persistent grid of one block per
// multiprocessor walking the output tiles in a grouped order; per block a producer warpgroup
// whose one thread feeds a ring of shared-memory stages with TMA tile copies (128-byte
// swizzled, zeros past m, N and K) completing on mbarriers, and two consumer warpgroups, each
// owning 64 rows of the 128-row tile, that run wgmma m64nNk16 on the stages and hand each slot
// back through a second mbarrier. Registers move from the producer to the consumers
// (setmaxnreg). Tiles: 128 x 256, 128 x 160 or 128 x 128 outputs (WgmmaForm, by m and N only).
//
// Bits: every output has one fp32 accumulator, zeroed, that gains its products as the ascending
// sequence of K's 16-wide chunks (zeros past K add nothing: see the kernel), one wgmma k16 step a
// chunk, no split-K. On Hopper a wgmma k16 step and an mma.sync m16n8k16 step are the same fused
// add of 16 products and the accumulator (docs/design.md §3.2), so each
// output is bit for bit the decode form's and GemmPipe's (gemm_decode.h, gemm_pipe.h) — whatever
// the tile shape, the number of tiles or the row count. Tested against them across shapes.
//
// Needs K % 8 == 0 (TMA's 16-byte row pitch), xb and w 16-byte aligned, m >= 1.
#pragma once

#include <cstdint>

#include "util/status.h"

namespace graft::cuda {

// The tile shape for a product: the one whose tiles fill the multiprocessors in the fewest
// tile-times, a tile of width w costing w / 128 of a 128 x 128 one less the wider tile's saving
// (~10% at 256, ~5% at 160), ties to the wider. 160 is for the widths the others leave a partial
// wave of (N = 5120 at 1K rows: 256 tiles are 1.94 waves on 132 multiprocessors, where 320 narrow
// ones are 2.4 and 160 wide ones 1.2). A pure function of (m, N, multiprocessors): it never
// changes a bit, only the speed.
enum class WgmmaForm { kTile128x256, kTile128x160, kTile128x128 };
WgmmaForm ChooseWgmmaForm(int64_t m, int64_t n, int multiprocessors);
const char* WgmmaFormName(WgmmaForm form);

bool GemmWgmmaFits(int64_t m, int64_t n, int64_t k, const void* xb, const void* w);
// `form`: the tile shape ChooseWgmmaForm picks when null (the tests and the matmul bench name one).
Status GemmWgmma(const uint16_t* xb, int64_t m, const uint16_t* w, int64_t n, int64_t k, float* y, int64_t ldy,
                 bool round_output, void* stream, const WgmmaForm* form = nullptr);

// The split form (MatMulSplitK's contract, gemm_pipe.h): K cut into slices of split_k columns (a
// positive multiple of 64), slice s's product over columns [s split_k, (s + 1) split_k) from zero,
// unrounded, into y + s m ldy — each output one fp32 accumulator over its slice's ascending
// 16-wide steps, so the bits of GemmPipeMmaSync(..., split_k); every slice's tiles one launch.
Status GemmWgmmaSplitK(const uint16_t* xb, int64_t m, const uint16_t* w, int64_t n, int64_t k, int64_t split_k,
                       float* y, int64_t ldy, void* stream, const WgmmaForm* form = nullptr);

// The split form with its slices summed in the kernel (GemmWgmmaSplitK then matmul.h's
// SumSplitsBf16Blocks, in one launch and without the partials going through memory): each output
// keeps one fp32 accumulator for the slice at hand, zeroed at the slice's start, over its
// ascending 16-wide steps — GemmWgmmaSplitK's slice products — and adds it at the slice's end to
// the sum of the slices before (the first slice's is the sum), SumSplits' ascending order; the sum
// is rounded once to bf16 into y: block b (outputs starts[b] <= c < starts[b + 1], starts[0] = 0,
// starts[blocks] = N) as a [m, width] array at y + m starts[b]. A LoRA module's t = r(x · Aᵀ),
// several stacked factors' at once, with every tile over all of K (no tile per slice). 128 x 128
// tiles (the running sums beside the accumulators). 1 <= blocks <= kWgmmaMaxSumBlocks.
// `place` puts the call's rows inside taller arrays (BlockRows).
inline constexpr int kWgmmaMaxSumBlocks = 8;
// Where a stacked product's blocks land: block b as a [rows, width] array at y + rows · starts[b],
// the call's m rows at its rows [row0, row0 + m) — a run of a step's rows written into the t of
// the whole step. rows 0: the call's own m (row0 then 0).
struct BlockRows {
  int64_t rows = 0, row0 = 0;
};
Status GemmWgmmaSplitKSum(const uint16_t* xb, int64_t m, const uint16_t* w, int64_t n, int64_t k, int64_t split_k,
                          const int64_t* starts, int blocks, uint16_t* y, void* stream, BlockRows place = {});
// The same sums as fp32 rows y [m, ldy] (ldy >= N), each rounded once to a bf16 value when
// round_output: SumSplits over GemmWgmmaSplitK's slices, bit for bit (the W4A16 contract's
// product of a dequantized weight, matmul.h).
Status GemmWgmmaSplitKSumF32(const uint16_t* xb, int64_t m, const uint16_t* w, int64_t n, int64_t k, int64_t split_k,
                             float* y, int64_t ldy, bool round_output, void* stream);

// A LoRA module's delta fused into the product (the contract of Ops::MatMulLora, weights/lora.h):
// for the output columns [col_begin, col_begin + cols) the tiles that hold them run, after the base
// product's K steps, the delta's own — t[m, rank] · Bᵀ, B [cols, rank], ascending 16-wide rank
// chunks into a second accumulator from zero — and write y = r(r(base) + r(r(delta) · scale)): the
// bits of GemmWgmma(..., round_output = true), a MatMulBf16 of t against B (one fp32 chain over
// rank) and LoraScatterAdd, without the delta's fp32 outputs going through memory. A tile that
// holds columns of several segments (Qwen3.5's 48-wide b and a gates side by side, a boundary
// inside a tile, several adapters' modules on the same columns) runs each one's stages in turn
// into that accumulator: a column outside a segment gets zero products from its stages (B's rows
// there are the copy engine's zeros), and so does a row of another adapter (its t row is zeros):
// zero products leave a chain's bits as they are. A row takes the segments of its own slot; a
// column outside all of them keeps the plain rounded product.
struct WgmmaLoraSegment {
  const uint16_t* t = nullptr;  // [m, rank] bf16: the rows' r(x · Aᵀ), 16-byte aligned
  const uint16_t* b = nullptr;  // [cols, rank] bf16, 16-byte aligned
  int64_t col_begin = 0, cols = 0;
  int rank = 0;                 // a multiple of 8 (TMA's row pitch)
  float scale = 1.0f;
  // The adapter slot whose rows take it (with row_slot: those whose entry is `slot`), and the
  // rows [row_begin, row_end) that hold them all (row_end <= 0: all m) — a tile outside them skips
  // the segment's stages. t's rows of every row of another adapter inside that range must be
  // zeros where a segment of that adapter shares columns with this one.
  int32_t slot = 0;
  int64_t row_begin = 0, row_end = 0;
};
// Segments a launch takes: a projection's modules (q, k, v) of four adapters.
inline constexpr int kWgmmaMaxLoraSegments = 12;
int WgmmaMultiprocessors();  // the current device's (0 when unknown)
// y = r(xb · Wᵀ) with each segment's delta added as above. Segments of one slot disjoint, all inside
// [0, N), at most kWgmmaMaxLoraSegments; `form` as ChooseWgmmaForm picks it (any gives the same
// bits); otherwise GemmWgmmaFits' needs. row_slot (device memory, m entries; null: every row takes
// every segment, which must then all be one slot's): only the rows whose entry is a segment's slot
// take it — a step mixing adapters' rows with base rows or one another — and a row that takes
// none gets GemmWgmma(..., round_output = true)'s bits (a -0 stays -0: nothing is added to it).
Status GemmWgmmaLora(const uint16_t* xb, int64_t m, const uint16_t* w, int64_t n, int64_t k, float* y, int64_t ldy,
                     const WgmmaLoraSegment* segs, int count, WgmmaForm form, void* stream,
                     const int32_t* row_slot = nullptr);

// The MLP's gate|up product and its activation in one pass: w is [2 inter, K] (gate rows, then up
// rows) and act[m, inter] (bf16 words, rows ld_act apart) = r(r(silu(g)) · u) with g, u the
// rounded outputs GemmWgmma(..., round_output = true) gives for gate row c and up row inter + c —
// the arithmetic of SiluMul (elementwise.h) on them, so bit for bit those two ops, without the
// 2·inter fp32 outputs written and read back. A tile pairs 128 or 136 gate rows with their up
// rows (two copies into the B stage): SwiGluForm, ChooseSwiGluForm's unless `form` names one.
// Needs GemmWgmmaFits(m, 2 inter, K).
enum class SwiGluForm { kPairs128, kPairs136 };
// The pairing whose tiles fill the multiprocessors in the fewest tile-times (a tile's time its
// width): 136 where 128's tiles just overflow a wave — Qwen3.5-27B's 17,408 activations are 136
// tiles of 128 against 132 multiprocessors, 128 of 136 — else 128. A pure function of m, inter
// and the count; it changes no bit.
SwiGluForm ChooseSwiGluForm(int64_t m, int64_t inter, int multiprocessors);
const char* SwiGluFormName(SwiGluForm form);
Status GemmWgmmaSwiGlu(const uint16_t* xb, int64_t m, const uint16_t* w, int64_t inter, int64_t k, uint16_t* act,
                       int64_t ld_act, void* stream, const SwiGluForm* form = nullptr);
// The gated form with LoRA deltas on the gate and up products (Ops::SwiGluMlpLora's first half):
// each segment covers the fused weight's gate rows [0, inter) or its up rows [inter, 2 inter)
// whole — at most one of each per slot — and each tile adds to a row's gate and up outputs what
// GemmWgmmaLora adds with its slot's — r(r(base) + r(r(t · Bᵀ) · scale)), the delta one fp32 chain
// over rank in ascending 16-wide steps from zero (other slots' stages add zero products) — and
// applies SiluMul's arithmetic to the two sums: bit for bit GemmWgmmaLora's product on gate_up (rows
// as row_slot says, null: every row takes every segment, one slot's) then SiluMul, without
// gate|up's fp32 outputs going through memory. The pairing ChooseSwiGluForm's unless `form` names
// one. A tile runs the gate segments' stages (half-width wgmmas) first, folds them into the rounded
// base outputs, then the up segments', so one half of the delta accumulator is live beside them at
// a time (no spills, no serialized wgmmas).
Status GemmWgmmaSwiGluLora(const uint16_t* xb, int64_t m, const uint16_t* w, int64_t inter, int64_t k, uint16_t* act,
                           int64_t ld_act, const WgmmaLoraSegment* segs, int count, void* stream,
                           const int32_t* row_slot = nullptr, const SwiGluForm* form = nullptr);

}  // namespace graft::cuda

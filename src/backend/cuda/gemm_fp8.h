// FP8 W8A8 on Hopper's FP8 tensor cores (wgmma m64nNk32 e4m3 x e4m3 -> fp32, sm_90a), the form
// MatMulFp8 takes with bf16 activations: y[r][n] = Σ_g ascending  dot_g · (sx[r][g] · sw[n][g]),
// as weights/quantized.h defines FP8's product, except that dot_g — the group's dot product of
// the e4m3 codes — is the tensor cores' sum over the group's 32-column chunks in ascending
// order (every product exact; the accumulation inside a chunk and across a group's chunks is
// the hardware's), not the CPU's 16-lane order. So: not the CPU's bits, but each output still
// depends only on its own row of codes and scales and the weight — the same chain for each
// output in every shape (fp8_chain.cuh), so the same bits at any batch size, tile position or
// neighbour. Up to 256 rows this file's kernel (the activation rows as wgmma's A, 64 a tile; the
// weights as its B, 64 or 128 outputs a tile by m; tiles copied by TMA), past 256 the persistent
// one of gemm_fp8_prefill.h. fp8-block weights with at most 8192 outputs and K >= 4096 (a decode
// step's down and o projections) run K in two halves — here two blocks a tile, one cluster — and
// add the halves' totals once (Fp8KSplit): still a function of the weight alone. Each group's dot
// is kept in its own fp32 registers and folded into the running total with the scales once the
// group ends (the promotion DeepSeek-V3 describes for FP8 GEMMs).
// (mma.sync's e4m3 form, which an earlier version used, is emulated on sm_90 through f16.)
//
// GemmFp8Fits: N, K > 0, K % 16 == 0 (16-byte rows), the activation group a multiple of 128
// columns (fp8-block with 128k-wide blocks; per channel: the whole row), 16-byte
// aligned code arrays.
#pragma once

#include <cstdint>

#include "backend/cuda/device_weight.h"
#include "util/status.h"

namespace graft::cuda {

bool GemmFp8Fits(const DevWeight& w, int64_t group);

// Whether a weight's products run K in two halves, the second half's total added to the first's
// once (a cluster of two blocks a tile here; gemm_fp8_prefill.h keeps the first half's in shared
// memory): fp8-block weights with 128-column groups, at most 8192 outputs and K >= 4096. A
// function of the weight alone, so every row count and both kernels run the same chain.
bool Fp8KSplit(const DevWeight& w, int64_t group);

// xq: the activations' e4m3 codes [m, K] (row-major, 16-byte aligned), sx: their scales
// [m, groups]; w an FP8 DevWeight; y [m, ldy].
Status GemmFp8(const uint8_t* xq, const float* sx, int64_t m, const DevWeight& w, int64_t group, float* y,
               int64_t ldy, bool round_output, void* stream);

}  // namespace graft::cuda

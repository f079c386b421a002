// FP8 W8A8 prefill on Hopper: gemm_fp8.h's product — the same chain for every output, bit for bit
// — in the structure of the bf16 prefill GEMM (gemm_wgmma.h): a persistent grid of one block a
// multiprocessor walking 128 x 128 tiles (128 activation rows, 128 outputs) in a grouped order, a
// producer warp whose one thread feeds a ring of 128-column stages by TMA (the activation codes and
// the weight codes, 128-byte swizzled), and two consumer warpgroups, each wgmma m64n128k32 over its
// 64 rows, that hand a slot back by mbarrier as soon as its products are in — no block-wide barrier
// a stage, copies running ahead across tiles.
//
// Bits: gemm_fp8.h's. A group's dot is the four (or, for groups of several stages, more) 32-column
// wgmma chunks in ascending order from zero; at the group's end total += part · (sx · sw) (per
// channel: part · (sx · sw[o]) once, at K's end). Weights that gemm_fp8.cu runs in two halves of
// K (Fp8KSplit) keep the first half's total in shared memory while the second's accumulates, and
// add the two once, first + second. So a row's outputs equal GemmFp8's at any row count.
//
// GemmFp8PrefillFits: GemmFp8Fits (whose fp8-block blocks of 128k rows put a tile's outputs under
// one block scale), 1 <= m <= 2^30, N <= 2^30. GemmFp8 runs it past 256 rows.
#pragma once

#include <cstdint>

#include "backend/cuda/device_weight.h"
#include "util/status.h"

namespace graft::cuda {

bool GemmFp8PrefillFits(int64_t m, const DevWeight& w, int64_t group);

// As GemmFp8 (gemm_fp8.h): xq the activations' e4m3 codes [m, K], sx their scales [m, groups].
Status GemmFp8Prefill(const uint8_t* xq, const float* sx, int64_t m, const DevWeight& w, int64_t group, float* y,
                      int64_t ldy, bool round_output, void* stream);

}  // namespace graft::cuda

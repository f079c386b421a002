// Prefill attention rows on Hopper's warpgroup tensor cores: FlashRows' arithmetic (flash_attention.cu)
// for blocks of 64 queries of two query heads that share a key-value head, head_dim 64, 128 or 256.
//
// FlashAttention-3's structure: a producer warpgroup copies each 64-key tile's K and V rows from
// the bf16 pages into a ring of stages by TMA (one copy a page, or a page's 64 keys, a 64-column
// sub-tile; the pages' tensor maps are made a call), and two consumer warpgroups, one a head, run
// the tiles as the copies land, each at its own pace (mbarriers, no block-wide barrier in the loop),
// so one head's softmax overlaps the other's products and the loads run ahead of both. Per
// 64-key tile (fixed tiles from position 0):
//   S = Q Kᵀ   wgmma m64n64k16 from shared memory, head_dim's 16-wide chunks ascending from zero —
//              each score the mma.sync chain FlashRows runs, so the same bits (a wgmma k16 step and
//              an mma.sync m16n8k16 step are one fused add of 16 products and the accumulator);
//   softmax    in the accumulator's registers, whose layout is the m16n8 fragment FlashRows holds
//              (warp w of the warpgroup: its rows 16 w ..), with FlashRows' code and order;
//   O += P V   wgmma m64nNk16 with P from registers (the fragment FlashRows packs) and V as the
//              pages hold it ([keys][head_dim], an MN-major B operand), the tile's 16-key chunks
//              ascending — FlashRows' chains again.
// Keys at or past a row's position are exact no-ops for it, as in FlashRows (scores -inf, and the
// last tile's V rows past the block's keys zeroed: the pages hold whatever was there), so every
// row has FlashRows' bits whatever its neighbours (tested against it and against decode rows).
#pragma once

#include "backend/cuda/attention.h"
#include "util/status.h"

namespace graft::cuda {

// a: Attention's arguments; the two-head block needs an even number of query heads a key-value
// head, head_dim 64, 128 or 256, bf16, aligned pointers (FlashAttentionFits), more than one row,
// pages of a multiple of 8 tokens that divide 64 or that 64 divides, and a.kv_rows.
bool FlashWgmmaFits(const AttentionArgs& a);
Status FlashWgmma(const AttentionArgs& a, void* stream);

}  // namespace graft::cuda

// Prefill attention rows on Hopper's warpgroup tensor cores: FlashRows' arithmetic (flash_attention.cu)
// for blocks of 64 queries of two query heads that share a key-value head, head_dim 64, 128 or 256.
//
// Each warpgroup owns one head's 64 queries. Per 64-key tile (fixed tiles from position 0):
//   S = Q Kᵀ   wgmma m64n64k16 from shared memory, head_dim's 16-wide chunks ascending from zero —
//              each score the mma.sync chain FlashRows runs, so the same bits (a wgmma k16 step and
//              an mma.sync m16n8k16 step are one fused add of 16 products and the accumulator);
//   softmax    in the accumulator's registers, whose layout is the m16n8 fragment FlashRows holds
//              (warp w of the warpgroup: its rows 16 w ..), with FlashRows' code and order;
//   O += P V   wgmma m64nNk16 with P from registers (the fragment FlashRows packs) and V transposed
//              in shared memory, the tile's 16-key chunks ascending — FlashRows' chains again.
// While S is on the tensor cores the next tile's K rows are copied from the bf16 pages into the
// other of two buffers by cp.async (K-major, 128-byte swizzle) and its V rows loaded into
// registers, stored transposed while P V is on the tensor cores, so loads overlap the products. Tiles past
// a row's position are exact no-ops for it, as in FlashRows, so every row has FlashRows' bits
// whatever its neighbours (tested against it and against decode rows).
#pragma once

#include "backend/cuda/attention.h"
#include "util/status.h"

namespace graft::cuda {

// a: Attention's arguments; the two-head block needs an even number of query heads a key-value
// head, head_dim 64, 128 or 256, bf16, aligned pointers (FlashAttentionFits) and more than one row.
bool FlashWgmmaFits(const AttentionArgs& a);
Status FlashWgmma(const AttentionArgs& a, void* stream);

}  // namespace graft::cuda

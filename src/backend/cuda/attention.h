// CUDA causal GQA attention over a paged KV cache: the contract of Ops::Attention (prefill and
// decode alike), on device pointers.
//
// With bf16 activations and head_dim 64, 128 or 256: the tensor-core kernel
// (flash_attention.cu; FlashAttention below), for every number of queries, so that prefill and
// decode rows agree bit for bit; its probabilities are rounded to bf16 before P·V, as
// FlashAttention and SDPA round them. Otherwise (fp32 activations, other head sizes) the SIMT
// kernels:
// One block per (query row, head). Keys are visited in fixed tiles of kAttnTile positions
// from position 0 with an online softmax, so a query's bits depend only on its own q, its
// position and the keys 0..pos — not on how many queries share the call (prefill chunking,
// batching) or where they sit. Scores are rounded as the CPU reference rounds them
// (r(r(q·k) * scale)); the softmax and the weighted sum stay fp32 until the output, which is
// rounded once. (The CPU reference rounds each probability; the online form cannot, so the two
// agree within the bound in the parity test, not bit for bit.) head_dim <= 256.
#pragma once

#include <cstdint>

#include "util/status.h"

namespace graft::cuda {

inline constexpr int kAttnTile = 128;

// The KV pages hold the activation dtype: fp32 values (float) when !bf16, bf16 values
// (__nv_bfloat16) when bf16 — half the bytes to read, and the tensor-core kernels copy them into
// their tiles without a conversion.
struct AttentionArgs {
  const float* q;             // [n, num_heads, head_dim]
  const void* k_pages;        // [num_pages, page_size, num_kv_heads, head_dim], float or __nv_bfloat16 (above)
  const void* v_pages;
  const int32_t* page_table;  // device
  int page_size;
  const int32_t* pos;         // [n] device
  int n, num_heads, num_kv_heads, head_dim;
  float scale;
  bool bf16;
  float* out;                 // [n, num_heads * head_dim]
  // The pages' rows (num_pages · page_size) where the caller knows them, else 0: the prefill
  // kernel that copies tiles by TMA (flash_wgmma.h) needs the extent for its tensor maps.
  int64_t kv_rows = 0;
};

Status Attention(const AttentionArgs& a, void* stream);

// One sequence's single query row (a decode step) for AttentionSeqs: its q [num_heads,
// head_dim], output, page table and position (device pointers).
struct AttnSeq {
  const float* q;
  const int32_t* page_table;
  const int32_t* pos;
  float* out;
};
// Attention for `count` sequences' one query row each in one launch (seqs a device array;
// shape's q, page_table, pos, n and out are unused): each row exactly Attention's bits — the
// tensor-core kernel's when `flash` (which must be FlashAttentionFits of every row's arguments,
// as Attention would decide them), else the SIMT row kernel's.
Status AttentionSeqs(const AttentionArgs& shape, const AttnSeq* seqs, int count, bool flash, void* stream);

// One piece of a FlashAttentionPieces call: a sequence's rows (device pointers, as AttnSeq's)
// and how many.
struct AttnPiece {
  const float* q;
  const int32_t* page_table;
  const int32_t* pos;
  int n;
  float* out;
};
#ifdef __CUDACC__
// `shape` with one sequence's own pointers and its n rows (an AttnSeq's 1, an AttnPiece's n):
// what a block of a batch kernel computes, as the lone call would.
template <typename Seq>
__device__ inline AttentionArgs PieceArgs(const AttentionArgs& shape, const Seq& s, int n) {
  AttentionArgs a = shape;
  a.q = s.q;
  a.page_table = s.page_table;
  a.pos = s.pos;
  a.n = n;
  a.out = s.out;
  return a;
}
#endif
// The most rows a FlashAttentionPieces piece holds: one query tile (Attention gives 2 to 64 rows
// the tensor-core kernel's one-head block).
inline constexpr int kAttnPieceMaxRows = 64;
// Attention for `count` sequences' pieces of 2 to kAttnPieceMaxRows rows each in one launch
// (pieces a device array; shape's q, page_table, pos, n and out unused; FlashAttentionFits of
// every piece's arguments): each row exactly Attention's bits for its piece alone. A step's short
// prefill pieces (a decision's question runs) would otherwise leave the device idle, one
// launch of num_heads blocks after another.
Status FlashAttentionPieces(const AttentionArgs& shape, const AttnPiece* pieces, int count, void* stream);

// The tensor-core kernel alone (Attention picks it where FlashAttentionFits).
bool FlashAttentionFits(const AttentionArgs& a);
Status FlashAttention(const AttentionArgs& a, void* stream);
Status FlashAttentionSeqs(const AttentionArgs& shape, const AttnSeq* seqs, int count, void* stream);

}  // namespace graft::cuda

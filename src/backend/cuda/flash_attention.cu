// Attention on the tensor cores for bf16 activations (attention.h's contract; the dispatch is
// there). One block per (64 consecutive queries, head), four warps of 16 queries — or, for
// prefill where a key-value head serves an even number of query heads, on wgmma (flash_wgmma.h,
// two such heads a block, the same bits); keys in fixed tiles of 64 positions from position 0,
// for every query
// whatever its neighbours:
//   S = Q Kᵀ   mma.sync m16n8k16, head_dim in 16-wide chunks ascending (Q, K bf16 — the values
//              the cache holds in bf16 mode — fp32 sums), rounded as the CPU rounds scores:
//              r(r(q·k) * scale), keys past the query's position masked;
//   online softmax per query row: the tile's max and sum over its 64 scores in a fixed order
//              (eight per lane, then the lane quad's butterfly), the running max, sum and
//              output rescaled by e^(old − new) (device_math.cuh's AttnExp, as every p);
//   O += P V   P as bf16 (FlashAttention's rounding; the SIMT kernels keep fp32 products),
//              V through ldmatrix.trans, key chunks ascending.
// A row's arithmetic depends only on its q, its position and keys 0..pos: tiles past its
// position are exact no-ops (p = 0, rescale = 1), so it does not matter whether its warp runs
// them for a neighbour — prefill chunking, batching and decode give the same bits.
// Each tile's keys' cache rows (the page table) are read a tile ahead into shared memory: a K / V
// load no longer waits on its own page-table load (H200, 27B shapes: one decode row at context
// 130 28.8 -> 25.9 us, a 4,096-query prefill 1,777 -> 1,481 us a layer). Tried: two-head blocks
// for a decode row too (half the blocks, half the load batches a tile each): 26.3 -> 27.1 us
// (bench/results/decode.md § whole (2026-12-02)).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <string>

#include "backend/cuda/attention.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/flash_wgmma.h"
#include "backend/cuda/launched.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/mma_ptx.cuh"

namespace graft::cuda {
namespace {

constexpr int kQ = 64, kKeys = 64, kThreads = 128;
static_assert(kQ == kAttnPieceMaxRows, "a FlashAttentionPieces piece is one query tile");
constexpr int kBatch = 8;  // float4s of Q, or 16-byte items of K and of V, a thread loads before it stores them

template <int kHd, int kHeads>
struct FlashSmem {
  static constexpr int kLd = kHd + 8;  // 16 bytes of padding: ldmatrix rows in distinct bank groups
  __nv_bfloat16 q[kHeads][kQ][kLd];
  __nv_bfloat16 k[kKeys][kLd];
  __nv_bfloat16 v[kKeys][kLd];
};

// Four floats as bf16 into dst (exact for bf16-valued activations).
__device__ __forceinline__ void PutRow4(__nv_bfloat16* dst, const float4 v) {
  __nv_bfloat162* d = reinterpret_cast<__nv_bfloat162*>(dst);
  d[0] = __floats2bfloat162_rn(v.x, v.y);
  d[1] = __floats2bfloat162_rn(v.z, v.w);
}

// Keys j0 .. j0 + kKeys - 1 of key-value head kvh into k and v (rows[r]: key j0 + r's cache
// row), by the block's kN threads (all calling), kB 16-byte items (8 bf16 values of the pages) a
// thread at a time with every load of a batch issued before any store (the loads' latencies
// overlap: one after another, a 64-key tile took ~10 us of DRAM round trips). The pages hold
// bf16 values (attention.h), copied as they are. Keys at or past len are zeros, never read.
template <int kHd, int kN, int kB, int kLd>
__device__ __forceinline__ void LoadKvTile(const AttentionArgs& a, const int64_t* rows, int j0, int len, int kvh,
                                           __nv_bfloat16 (&k)[kKeys][kLd], __nv_bfloat16 (&v)[kKeys][kLd]) {
  constexpr int kC8 = kHd / 8, kPer = kKeys * kC8 / kN;  // items a row; a thread's a tile
  static_assert(kPer % kB == 0, "whole batches of items a thread");
  const int64_t kv_stride = int64_t{a.num_kv_heads} * kHd;
  const __nv_bfloat16* kp = static_cast<const __nv_bfloat16*>(a.k_pages);
  const __nv_bfloat16* vp = static_cast<const __nv_bfloat16*>(a.v_pages);
  const int tid = threadIdx.x;
#pragma unroll 1
  for (int i0 = 0; i0 < kPer; i0 += kB) {
    uint4 kv[kB], vv[kB];
#pragma unroll
    for (int b = 0; b < kB; ++b) {
      const int e = tid + (i0 + b) * kN, r = e / kC8, c = (e % kC8) * 8;
      kv[b] = vv[b] = make_uint4(0u, 0u, 0u, 0u);
      if (j0 + r < len) {
        const int64_t off = rows[r] * kv_stride + int64_t{kvh} * kHd + c;
        kv[b] = *reinterpret_cast<const uint4*>(kp + off);
        vv[b] = *reinterpret_cast<const uint4*>(vp + off);
      }
    }
#pragma unroll
    for (int b = 0; b < kB; ++b) {
      const int e = tid + (i0 + b) * kN, r = e / kC8, c = (e % kC8) * 8;
      *reinterpret_cast<uint4*>(&k[r][c]) = kv[b];
      *reinterpret_cast<uint4*>(&v[r][c]) = vv[b];
    }
  }
}

// Queries qb * 64 .. + 63 of heads h0 .. h0 + kHeads - 1 (of one key-value head): the whole
// block, warps 4 i .. 4 i + 3 head h0 + i.
template <int kHd, int kHeads>
__device__ void FlashRows(const AttentionArgs& a, int qb, int h0) {
  using Smem = FlashSmem<kHd, kHeads>;
  constexpr int kF4 = kHd / 4;  // float4s per row
  constexpr int kBlockThreads = kThreads * kHeads;
  extern __shared__ __align__(128) unsigned char raw[];
  Smem& sm = *reinterpret_cast<Smem*>(raw);
  __shared__ int block_len;
  __shared__ int64_t key_row[2][kKeys];  // the cache row of each key of this tile, and of the next
  const int t0 = qb * kQ;
  const int kvh = h0 / (a.num_heads / a.num_kv_heads);
  const int tid = threadIdx.x, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int hh = tid / kThreads, warp = (tid % kThreads) / 32, h = h0 + hh;  // this warp's head, its 16 rows

  if (tid == 0) block_len = 0;
  __syncthreads();
  if (tid < kQ && t0 + tid < a.n) atomicMax(&block_len, a.pos[t0 + tid] + 1);
  // Q and each K / V tile are copied kBatch float4s a thread at a time, every load of a batch
  // issued before any store: the loads' latencies overlap (one after another, a 64-key tile
  // took ~10 us of DRAM round trips, whatever the number of queries).
  constexpr int kQPer = kHeads * kQ * kF4 / kBlockThreads, kKvPer = kKeys * (kHd / 8) / kBlockThreads;
  constexpr int kQB = kQPer < kBatch ? kQPer : kBatch, kKvB = kKvPer < kBatch ? kKvPer : kBatch;
  static_assert(kQPer % kQB == 0, "whole batches of float4s a thread");
#pragma unroll 1
  for (int i0 = 0; i0 < kQPer; i0 += kQB) {
    float4 v[kQB];
#pragma unroll
    for (int b = 0; b < kQB; ++b) {
      const int e = tid + (i0 + b) * kBlockThreads, qh = e / (kQ * kF4), r = e / kF4 % kQ, c = (e % kF4) * 4;
      v[b] = t0 + r < a.n ? *reinterpret_cast<const float4*>(a.q + (int64_t{t0 + r} * a.num_heads + h0 + qh) * kHd + c)
                          : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int b = 0; b < kQB; ++b) {
      const int e = tid + (i0 + b) * kBlockThreads, qh = e / (kQ * kF4), r = e / kF4 % kQ, c = (e % kF4) * 4;
      PutRow4(&sm.q[qh][r][c], v[b]);
    }
  }
  // This thread's two query rows (g and g + 8 of its warp) and their key counts (0: no query).
  const int row_a = t0 + warp * 16 + g, row_b = row_a + 8;
  const int len_a = row_a < a.n ? a.pos[row_a] + 1 : 0, len_b = row_b < a.n ? a.pos[row_b] + 1 : 0;
  int warp_len = max(len_a, len_b);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) warp_len = max(warp_len, __shfl_xor_sync(0xffffffffu, warp_len, o));
  __syncthreads();
  const int len = block_len;
  // A key's cache row (page table) is read a tile ahead and kept in shared memory, so that the
  // tile's K / V loads do not each wait on their page-table load first (two round trips a batch).
  auto cache_row = [&](int j) { return int64_t{a.page_table[j / a.page_size]} * a.page_size + j % a.page_size; };
  if (tid < kKeys && tid < len) key_row[0][tid] = cache_row(tid);
  __syncthreads();

  float acc[kHd / 8][4];
#pragma unroll
  for (int j = 0; j < kHd / 8; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  float mx_a = -INFINITY, mx_b = -INFINITY, sum_a = 0.0f, sum_b = 0.0f;

  for (int j0 = 0, buf = 0; j0 < len; j0 += kKeys, buf ^= 1) {
    const int jn = j0 + kKeys + tid;  // the next tile's key this thread looks up (tid < kKeys)
    const int64_t next_row = tid < kKeys && jn < len ? cache_row(jn) : 0;
    // The key tile: rows past the block's longest query are zeros (never read from the cache).
    LoadKvTile<kHd, kBlockThreads, kKvB>(a, key_row[buf], j0, len, kvh, sm.k, sm.v);
    // key_row[buf ^ 1] was last read by the previous tile's loads, before two barriers.
    if (tid < kKeys && jn < len) key_row[buf ^ 1][tid] = next_row;
    __syncthreads();
    if (j0 < warp_len) {  // otherwise every row of this warp would see an exact no-op
      // S = Q Kᵀ: 8 blocks of 8 keys, head_dim chunks ascending.
      float s[kKeys / 8][4];
#pragma unroll
      for (int nb = 0; nb < kKeys / 8; ++nb) s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.0f;
#pragma unroll
      for (int kc = 0; kc < kHd; kc += 16) {
        unsigned qa[4];
        LdMatrixX4(qa, &sm.q[hh][warp * 16 + lane % 16][kc + (lane / 16) * 8]);
#pragma unroll
        for (int nb = 0; nb < kKeys / 8; nb += 2) {
          unsigned kb[4];
          LdMatrixX4(kb, &sm.k[nb * 8 + lane % 8 + (lane / 16) * 8][kc + ((lane / 8) % 2) * 8]);
          Mma16816(s[nb], qa, kb[0], kb[1]);
          Mma16816(s[nb + 1], qa, kb[2], kb[3]);
        }
      }
      // Scores as the CPU rounds them, masked past each row's position; the tile's row max.
      float tmax_a = -INFINITY, tmax_b = -INFINITY;
#pragma unroll
      for (int nb = 0; nb < kKeys / 8; ++nb) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int j = j0 + nb * 8 + 2 * t + e % 2;
          const bool ok = j < (e < 2 ? len_a : len_b);
          const float sc = RoundAct(__fmul_rn(RoundAct(s[nb][e], a.bf16), a.scale), a.bf16);
          s[nb][e] = ok ? sc : -INFINITY;
        }
        tmax_a = fmaxf(tmax_a, fmaxf(s[nb][0], s[nb][1]));
        tmax_b = fmaxf(tmax_b, fmaxf(s[nb][2], s[nb][3]));
      }
#pragma unroll
      for (int o = 1; o <= 2; o <<= 1) {
        tmax_a = fmaxf(tmax_a, __shfl_xor_sync(0xffffffffu, tmax_a, o));
        tmax_b = fmaxf(tmax_b, __shfl_xor_sync(0xffffffffu, tmax_b, o));
      }
      const float new_a = fmaxf(mx_a, tmax_a), new_b = fmaxf(mx_b, tmax_b);
      // (new = -inf only for rows with no query: their values are never written.)
      const float base_a = new_a == -INFINITY ? 0.0f : new_a, base_b = new_b == -INFINITY ? 0.0f : new_b;
      const float l2_a = AttnExpBase(base_a), l2_b = AttnExpBase(base_b);
      const float res_a = AttnRescale(mx_a, base_a, l2_a);
      const float res_b = AttnRescale(mx_b, base_b, l2_b);
      float tsum_a = 0.0f, tsum_b = 0.0f;
#pragma unroll
      for (int nb = 0; nb < kKeys / 8; ++nb) {
        s[nb][0] = AttnExp(s[nb][0], l2_a);
        s[nb][1] = AttnExp(s[nb][1], l2_a);
        s[nb][2] = AttnExp(s[nb][2], l2_b);
        s[nb][3] = AttnExp(s[nb][3], l2_b);
        tsum_a = __fadd_rn(tsum_a, __fadd_rn(s[nb][0], s[nb][1]));
        tsum_b = __fadd_rn(tsum_b, __fadd_rn(s[nb][2], s[nb][3]));
      }
#pragma unroll
      for (int o = 1; o <= 2; o <<= 1) {
        tsum_a = __fadd_rn(tsum_a, __shfl_xor_sync(0xffffffffu, tsum_a, o));
        tsum_b = __fadd_rn(tsum_b, __shfl_xor_sync(0xffffffffu, tsum_b, o));
      }
      sum_a = __fadd_rn(__fmul_rn(sum_a, res_a), tsum_a);
      sum_b = __fadd_rn(__fmul_rn(sum_b, res_b), tsum_b);
      mx_a = new_a;
      mx_b = new_b;
#pragma unroll
      for (int j = 0; j < kHd / 8; ++j) {
        acc[j][0] = __fmul_rn(acc[j][0], res_a);
        acc[j][1] = __fmul_rn(acc[j][1], res_a);
        acc[j][2] = __fmul_rn(acc[j][2], res_b);
        acc[j][3] = __fmul_rn(acc[j][3], res_b);
      }
      // O += P V, key chunks of 16 ascending; P's fragment comes straight from S's.
#pragma unroll
      for (int kc = 0; kc < kKeys / 16; ++kc) {
        unsigned p[4];
        p[0] = PackBf16(s[2 * kc][0], s[2 * kc][1]);
        p[1] = PackBf16(s[2 * kc][2], s[2 * kc][3]);
        p[2] = PackBf16(s[2 * kc + 1][0], s[2 * kc + 1][1]);
        p[3] = PackBf16(s[2 * kc + 1][2], s[2 * kc + 1][3]);
#pragma unroll
        for (int d = 0; d < kHd; d += 16) {
          unsigned vb[4];
          LdMatrixX4Trans(vb, &sm.v[kc * 16 + lane % 8 + ((lane / 8) % 2) * 8][d + (lane / 16) * 8]);
          Mma16816(acc[d / 8], p, vb[0], vb[1]);
          Mma16816(acc[d / 8 + 1], p, vb[2], vb[3]);
        }
      }
    }
    __syncthreads();  // before the next tile overwrites K and V
  }
  // Rows g, g + 8 at columns 8 j + 2 t, + 1.
#pragma unroll
  for (int j = 0; j < kHd / 8; ++j) {
    const int c = 8 * j + 2 * t;
    if (row_a < a.n) {
      float* o = a.out + (int64_t{row_a} * a.num_heads + h) * kHd + c;
      o[0] = RoundAct(__fdiv_rn(acc[j][0], sum_a), a.bf16);
      o[1] = RoundAct(__fdiv_rn(acc[j][1], sum_a), a.bf16);
    }
    if (row_b < a.n) {
      float* o = a.out + (int64_t{row_b} * a.num_heads + h) * kHd + c;
      o[0] = RoundAct(__fdiv_rn(acc[j][2], sum_b), a.bf16);
      o[1] = RoundAct(__fdiv_rn(acc[j][3], sum_b), a.bf16);
    }
  }
}

// One query row (a decode step's) of head h: FlashRows' arithmetic for that row with the block's
// four warps sharing it instead of one warp computing it while three idle. Warp w computes the
// scores of the tile's keys 16 w .. 16 w + 15 (the same mma chains over head_dim as FlashRows'
// n-blocks 2 w, 2 w + 1) and the output columns w hd / 4 .. (w + 1) hd / 4 - 1 (the same chains
// over the tile's key chunks); the scores go through shared memory, and every warp computes the
// tile's max (exact in any order), the running max and rescale, and the tile's sum in FlashRows'
// order (lane quad t: its keys 8 nb + 2 t, + 1 pairwise, nb ascending; then quads 0 + 1 and 2 + 3,
// then the two) — so a decode row keeps the bits the prefill kernel gives the same row. The K / V
// tile loads use the registers the smaller accumulator frees: twice FlashRows' batch.
template <int kHd>
struct RowSmem {
  static constexpr int kLd = kHd + 8;
  __nv_bfloat16 q[16][kLd];  // row 0 the query, rows 1-15 zeros (the mma's other rows)
  __nv_bfloat16 k[kKeys][kLd];
  __nv_bfloat16 v[kKeys][kLd];
  float score[kKeys];  // the tile's rounded, masked scores
  float prob[kKeys];   // and their exps
};

template <int kHd>
__device__ void FlashRow(const AttentionArgs& a, int h) {
  using Smem = RowSmem<kHd>;
  constexpr int kF4 = kHd / 4, kDims = kHd / 4;  // float4s a row; output columns a warp
  extern __shared__ __align__(128) unsigned char raw[];
  Smem& sm = *reinterpret_cast<Smem*>(raw);
  __shared__ int64_t key_row[2][kKeys];
  const int kvh = h / (a.num_heads / a.num_kv_heads);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
  const int len = a.pos[0] + 1;
  for (int e = tid; e < 16 * kF4; e += kThreads) {
    const int r = e / kF4, c = (e % kF4) * 4;
    PutRow4(&sm.q[r][c], r == 0 ? *reinterpret_cast<const float4*>(a.q + int64_t{h} * kHd + c)
                                : make_float4(0.f, 0.f, 0.f, 0.f));
  }
  auto cache_row = [&](int j) { return int64_t{a.page_table[j / a.page_size]} * a.page_size + j % a.page_size; };
  if (tid < kKeys && tid < len) key_row[0][tid] = cache_row(tid);
  __syncthreads();

  constexpr int kKvPer = kKeys * (kHd / 8) / kThreads, kKvB = kKvPer < 2 * kBatch ? kKvPer : 2 * kBatch;
  float acc[kDims / 8][4];
#pragma unroll
  for (int j = 0; j < kDims / 8; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  float mx = -INFINITY, sum = 0.0f;
  for (int j0 = 0, buf = 0; j0 < len; j0 += kKeys, buf ^= 1) {
    const int jn = j0 + kKeys + tid;
    const int64_t next_row = tid < kKeys && jn < len ? cache_row(jn) : 0;
    LoadKvTile<kHd, kThreads, kKvB>(a, key_row[buf], j0, len, kvh, sm.k, sm.v);
    if (tid < kKeys && jn < len) key_row[buf ^ 1][tid] = next_row;
    __syncthreads();
    // This warp's 16 keys: FlashRows' n-blocks 2 warp and 2 warp + 1.
    {
      float s[2][4] = {};
#pragma unroll
      for (int kc = 0; kc < kHd; kc += 16) {
        unsigned qa[4], kb[4];
        LdMatrixX4(qa, &sm.q[lane % 16][kc + (lane / 16) * 8]);
        LdMatrixX4(kb, &sm.k[warp * 16 + lane % 8 + (lane / 16) * 8][kc + ((lane / 8) % 2) * 8]);
        Mma16816(s[0], qa, kb[0], kb[1]);
        Mma16816(s[1], qa, kb[2], kb[3]);
      }
      if (g == 0) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int key = warp * 16 + i * 8 + 2 * t + e;
            const float sc = RoundAct(__fmul_rn(RoundAct(s[i][e], a.bf16), a.scale), a.bf16);
            sm.score[key] = j0 + key < len ? sc : -INFINITY;
          }
        }
      }
    }
    __syncthreads();
    float tmax = fmaxf(sm.score[lane], sm.score[lane + 32]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, o));
    const float nmx = fmaxf(mx, tmax);
    const float base = nmx == -INFINITY ? 0.0f : nmx;
    const float l2 = AttnExpBase(base);
    const float res = AttnRescale(mx, base, l2);
    if (tid < kKeys) sm.prob[tid] = AttnExp(sm.score[tid], l2);
    __syncthreads();
    float tsum = 0.0f;
#pragma unroll
    for (int nb = 0; nb < kKeys / 8; ++nb) tsum = __fadd_rn(tsum, __fadd_rn(sm.prob[nb * 8 + 2 * t], sm.prob[nb * 8 + 2 * t + 1]));
#pragma unroll
    for (int o = 1; o <= 2; o <<= 1) tsum = __fadd_rn(tsum, __shfl_xor_sync(0xffffffffu, tsum, o));
    sum = __fadd_rn(__fmul_rn(sum, res), tsum);
    mx = nmx;
#pragma unroll
    for (int j = 0; j < kDims / 8; ++j) {
      acc[j][0] = __fmul_rn(acc[j][0], res);
      acc[j][1] = __fmul_rn(acc[j][1], res);
      acc[j][2] = __fmul_rn(acc[j][2], res);
      acc[j][3] = __fmul_rn(acc[j][3], res);
    }
    // O += P V over this warp's columns, key chunks ascending (row 0's P; the other rows zero).
#pragma unroll
    for (int kc = 0; kc < kKeys / 16; ++kc) {
      unsigned p[4] = {0u, 0u, 0u, 0u};
      if (g == 0) {
        p[0] = PackBf16(sm.prob[kc * 16 + 2 * t], sm.prob[kc * 16 + 2 * t + 1]);
        p[2] = PackBf16(sm.prob[kc * 16 + 8 + 2 * t], sm.prob[kc * 16 + 8 + 2 * t + 1]);
      }
#pragma unroll
      for (int d = 0; d < kDims; d += 16) {
        unsigned vb[4];
        LdMatrixX4Trans(vb, &sm.v[kc * 16 + lane % 8 + ((lane / 8) % 2) * 8][warp * kDims + d + (lane / 16) * 8]);
        Mma16816(acc[d / 8], p, vb[0], vb[1]);
        Mma16816(acc[d / 8 + 1], p, vb[2], vb[3]);
      }
    }
    __syncthreads();  // before the next tile overwrites K, V and the scores
  }
  if (g == 0) {
#pragma unroll
    for (int j = 0; j < kDims / 8; ++j) {
      float* o = a.out + int64_t{h} * kHd + warp * kDims + 8 * j + 2 * t;
      o[0] = RoundAct(__fdiv_rn(acc[j][0], sum), a.bf16);
      o[1] = RoundAct(__fdiv_rn(acc[j][1], sum), a.bf16);
    }
  }
}

template <int kHd>
__global__ void __launch_bounds__(kThreads) FlashRowKernel(AttentionArgs a) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  FlashRow<kHd>(a, blockIdx.y);
}

// Block (0, h, y): head h of sequence y's one query row, as FlashRowKernel's.
template <int kHd>
__global__ void __launch_bounds__(kThreads) FlashRowSeqsKernel(AttentionArgs shape, const AttnSeq* seqs) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  FlashRow<kHd>(PieceArgs(shape, seqs[blockIdx.z], 1), blockIdx.y);
}

// Block (0, h, y): head h of sequence y's rows (one tile: 2 to kQ rows), as FlashAttentionKernel
// with one head a block takes them alone.
template <int kHd>
__global__ void __launch_bounds__(kThreads) FlashPiecesKernel(AttentionArgs shape, const AttnPiece* pieces) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  const AttnPiece& p = pieces[blockIdx.z];
  FlashRows<kHd, 1>(PieceArgs(shape, p, p.n), 0, blockIdx.y);
}

template <int kHd, int kHeads>
__global__ void __launch_bounds__(kThreads* kHeads) FlashAttentionKernel(AttentionArgs a) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  // The last query tiles first: they walk the most keys (causal), so the grid's tail is short.
  FlashRows<kHd, kHeads>(a, gridDim.x - 1 - blockIdx.x, blockIdx.y * kHeads);
}

template <int kHd>
Status LaunchSeqs(const AttentionArgs& shape, const AttnSeq* seqs, int count, cudaStream_t s) {
  static const cudaError_t ready = cudaFuncSetAttribute(
      FlashRowSeqsKernel<kHd>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(sizeof(RowSmem<kHd>)));
  if (ready != cudaSuccess) return Internal(std::string("cuda FlashAttention: shared memory: ") + cudaGetErrorString(ready));
  const dim3 grid(1, static_cast<unsigned>(shape.num_heads), static_cast<unsigned>(count));
  LaunchPdl(FlashRowSeqsKernel<kHd>, grid, kThreads, sizeof(RowSmem<kHd>), s, shape, seqs);
  return Launched("FlashAttention");
}

template <int kHd>
Status LaunchPieces(const AttentionArgs& shape, const AttnPiece* pieces, int count, cudaStream_t s) {
  static const cudaError_t ready = cudaFuncSetAttribute(
      FlashPiecesKernel<kHd>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(sizeof(FlashSmem<kHd, 1>)));
  if (ready != cudaSuccess) return Internal(std::string("cuda FlashAttention: shared memory: ") + cudaGetErrorString(ready));
  const dim3 grid(1, static_cast<unsigned>(shape.num_heads), static_cast<unsigned>(count));
  LaunchPdl(FlashPiecesKernel<kHd>, grid, kThreads, sizeof(FlashSmem<kHd, 1>), s, shape, pieces);
  return Launched("FlashAttention");
}

template <int kHd>
Status LaunchRow(const AttentionArgs& a, cudaStream_t s) {
  static const cudaError_t ready = cudaFuncSetAttribute(FlashRowKernel<kHd>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                        static_cast<int>(sizeof(RowSmem<kHd>)));
  if (ready != cudaSuccess) return Internal(std::string("cuda FlashAttention: shared memory: ") + cudaGetErrorString(ready));
  LaunchPdl(FlashRowKernel<kHd>, dim3(1, static_cast<unsigned>(a.num_heads)), kThreads, sizeof(RowSmem<kHd>), s, a);
  return Launched("FlashAttention");
}

template <int kHd, int kHeads>
Status Launch(const AttentionArgs& a, cudaStream_t s) {
  static const cudaError_t ready = cudaFuncSetAttribute(FlashAttentionKernel<kHd, kHeads>,
                                                        cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                        static_cast<int>(sizeof(FlashSmem<kHd, kHeads>)));
  if (ready != cudaSuccess) return Internal(std::string("cuda FlashAttention: shared memory: ") + cudaGetErrorString(ready));
  const dim3 grid(static_cast<unsigned>((a.n + kQ - 1) / kQ), static_cast<unsigned>(a.num_heads / kHeads));
  LaunchPdl(FlashAttentionKernel<kHd, kHeads>, grid, kThreads * kHeads, sizeof(FlashSmem<kHd, kHeads>), s, a);
  return Launched("FlashAttention");
}

}  // namespace

bool FlashAttentionFits(const AttentionArgs& a) {
  const bool aligned = reinterpret_cast<uintptr_t>(a.q) % 16 == 0 && reinterpret_cast<uintptr_t>(a.k_pages) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(a.v_pages) % 16 == 0;
  return a.bf16 && aligned && (a.head_dim == 64 || a.head_dim == 128 || a.head_dim == 256) &&
         (a.n + kQ - 1) / kQ <= 0x7fffffff && a.num_heads <= 65535;
}

Status FlashAttentionSeqs(const AttentionArgs& shape, const AttnSeq* seqs, int count, void* stream) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (shape.head_dim) {
    case 64: return LaunchSeqs<64>(shape, seqs, count, s);
    case 128: return LaunchSeqs<128>(shape, seqs, count, s);
    case 256: return LaunchSeqs<256>(shape, seqs, count, s);
  }
  return InvalidArgument("cuda FlashAttention: head_dim must be 64, 128 or 256");
}

Status FlashAttentionPieces(const AttentionArgs& shape, const AttnPiece* pieces, int count, void* stream) {
  if (count < 0 || count > 65535 || (count > 0 && pieces == nullptr)) {
    return InvalidArgument("cuda FlashAttentionPieces: 0 to 65535 pieces");
  }
  if (count == 0) return Status::Ok();
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (shape.head_dim) {
    case 64: return LaunchPieces<64>(shape, pieces, count, s);
    case 128: return LaunchPieces<128>(shape, pieces, count, s);
    case 256: return LaunchPieces<256>(shape, pieces, count, s);
  }
  return InvalidArgument("cuda FlashAttentionPieces: head_dim must be 64, 128 or 256");
}

Status FlashAttention(const AttentionArgs& a, void* stream) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  // Two query heads a block where a key-value head serves an even number of them (they share
  // every tile), there is more than one tile of queries and the pages suit the copy engine — on
  // wgmma (flash_wgmma.h); one head a block otherwise (a single sequence's decode row: twice the
  // blocks). The bits of a row are the same either way.
  const bool pair = a.n > kQ && FlashWgmmaFits(a);

  if (a.n == 1) {  // a decode row: the whole block on it
    switch (a.head_dim) {
      case 64: return LaunchRow<64>(a, s);
      case 128: return LaunchRow<128>(a, s);
      case 256: return LaunchRow<256>(a, s);
    }
  }
  switch (a.head_dim) {
    case 64: return pair ? FlashWgmma(a, s) : Launch<64, 1>(a, s);
    case 128: return pair ? FlashWgmma(a, s) : Launch<128, 1>(a, s);
    case 256: return pair ? FlashWgmma(a, s) : Launch<256, 1>(a, s);
    default: return InvalidArgument("cuda FlashAttention: head_dim must be 64, 128 or 256");
  }
}

}  // namespace graft::cuda

// The tensor-core form's chunk kernels (gdn.h, gdn_tc.cuh): GdnCore from 16 tokens on.
//
// 1. GdnTcPrepKernel, one block a (chunk, key head), every chunk of the call at once: the rows'
//    key and query norms and the products Kr·Krᵀ, Qr·Krᵀ over the chunk's raw bf16 keys and
//    queries (one mma product each, shared by the key head's value heads); then for each of its
//    value heads the cumulative log-decay and the coefficient matrices
//      Ckk[i][m] = Coef(k_i·k_m) (m < i),  Cqk[i][m] = Coef(q_i·k_m) (m <= i);
//    the chunk's keys and queries as bf16 tiles. All into the scratch (GdnTcChunkScratchFloats).
// 2. GdnTcStateKernel, one block a (value head, BW value columns), walking the call's chunks in
//    order with the state S in its warps' mma accumulators:
//    A. Sᵀk_raw and Sᵀq_raw for the chunk's 64 rows (mma, S split in three), Sᵀq_raw into the
//       scratch;
//    B. the triangular recurrence Vn_i = β_i (v_i − e_i inv_i Sᵀk_raw_i − Σ_{m<i} Ckk[i][m] Vn_m), a
//       pair of value columns' 64 rows in the registers of R = 512 / BW threads (consecutive
//       lanes), each Vn_m shuffled from its row's thread to the others (no barrier inside); Vn
//       into the scratch, then the chunk's flag;
//    D. at a chunk's end, S = e^{gam_last} S + Kᵀ W (mma, W split in three).
//    The next chunk's tiles are copied in (cp.async) while a phase that no longer needs their
//    buffer runs.
// 3. GdnTcOutputKernel, one block a (value head, BW value columns, chunk), every chunk at once as
//    the walk flags it ready: the outputs o_i = e_i fq_i Sᵀq_raw_i + Σ_{m<=i} Cqk[i][m] Vn_m. Kept
//    out of the walk, they leave its critical path (~23% of a chunk's cycles by § gdn-walk's
//    clock) and run on the multiprocessors the walk leaves idle (36 of 132 at Qwen3.5-27B's 96
//    walk blocks).
// Every value is made by gdn_tc.cuh's functions in gdn_tc_tokens.cu's order, so a row's bits do
// not depend on which kernel, block or warp computed it (tested against the token kernel).
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "backend/cuda/gdn.h"
#include "backend/cuda/gdn_kernels.cuh"
#include "backend/cuda/gdn_tc.cuh"
#include "backend/cuda/launched.h"
#include "backend/cuda/pdl.cuh"

namespace graft::cuda {
namespace {

using gdn_kernels::ChunkRows;
using gdn_kernels::MaxChunks;
using namespace gdn_tc;  // NOLINT: the form's helpers
using bf16_t = __nv_bfloat16;

constexpr int kPrepThreads = 128;  // 4 warps: one 16-row tile of the chunk each
constexpr int kStateWarps = 8;
constexpr int kStateThreads = 32 * kStateWarps;
// The scratch of one (chunk, value head): Ckk [64][64], Cqk [64][64], then the rows' gam, inv_k,
// fq and beta [64] each (the state kernel copies those four as one piece).
constexpr int kRowInfo = 4 * kC;
constexpr int64_t kCoefFloats = 2 * kC * kC + kRowInfo;

// The scratch of one (chunk, key head): the chunk's raw keys, then queries, as bf16 [64][dkp].
__host__ __device__ inline int64_t KeyTileFloats(int dkp) { return int64_t{kC} * dkp; }  // two bf16 tiles

// Value columns a chunk's ready flags are kept for: one flag per 32 (dv <= 256); a state block of
// 64 columns uses every second one.
constexpr int kFlagCols = 32;
constexpr int kFlagsPerHead = 256 / kFlagCols;

// A call's scratch (GdnTcChunkScratchFloats): the prep kernel's coefficients and bf16 tiles, then
// what the state kernel leaves for the output kernel — each chunk's Sᵀq_raw and corrected values
// Vn ([64][dv] fp32 a value head, rows as the chunk's) and a flag a (chunk, value head, 32 value
// columns), zeroed by the prep kernel and set once the chunk's pieces of those columns are written.
struct Scratch {
  float* coef;  // [chunks][hv][kCoefFloats]
  bf16_t* keys; // [chunks][hk][2][64][dkp]
  float* sq;    // [chunks][hv][64][dv]
  float* vn;    // [chunks][hv][64][dv]
  int* flags;   // [chunks][hv][kFlagsPerHead]
  int hv, hk, dkp, dv;
  __host__ __device__ Scratch(float* base, int64_t chunks, int hk_, int hv_, int dkp_, int dv_)
      : hv(hv_), hk(hk_), dkp(dkp_), dv(dv_) {
    coef = base;
    keys = reinterpret_cast<bf16_t*>(base + chunks * hv * kCoefFloats);
    sq = base + chunks * hv * kCoefFloats + chunks * hk * KeyTileFloats(dkp);
    vn = sq + chunks * hv * kC * dv;
    flags = reinterpret_cast<int*>(vn + chunks * hv * kC * dv);
  }
  __host__ __device__ static int64_t Floats(int64_t chunks, int hk, int hv, int dkp, int dv) {
    return chunks * hv * kCoefFloats + chunks * hk * KeyTileFloats(dkp) + 2 * chunks * hv * kC * dv +
           chunks * hv * kFlagsPerHead;
  }
  __device__ float* Coefs(int c, int h) const { return coef + (int64_t{c} * hv + h) * kCoefFloats; }
  __device__ bf16_t* Keys(int c, int kh) const { return keys + (int64_t{c} * hk + kh) * 2 * KeyTileFloats(dkp); }
  __device__ float* Sq(int c, int h) const { return sq + (int64_t{c} * hv + h) * kC * dv; }
  __device__ float* Vn(int c, int h) const { return vn + (int64_t{c} * hv + h) * kC * dv; }
  __device__ int* Flag(int c, int h, int j0) const { return flags + (int64_t{c} * hv + h) * kFlagsPerHead + j0 / kFlagCols; }
};

__device__ __forceinline__ int LoadAcquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void StoreRelease(int* p, int v) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

// The prep kernel's shared memory: the bf16 key and query tiles, the rows' inv and fq, and each
// value head's cumulative log-decay.
int PrepSharedBytes(int dk, int group) { return 2 * kC * RowStride(PaddedDk(dk)) * 2 + (2 + group) * kC * 4; }

// 4 blocks a multiprocessor: at most 128 registers (the two 64-row accumulator sets) and ~37 KB of
// shared memory each (three value heads a key head).
// kSeqs: blockIdx.z picks the call's sequence from `seqs` (GdnCoreTcChunkedSeqs); else the one
// sequence of the arguments.
template <bool kSeqs>
__global__ void __launch_bounds__(kPrepThreads, 4)
    GdnTcPrepKernel(GdnCoreArgs a_in, DevGdnState st_in, int pending_in, const GdnChunkSeq* __restrict__ seqs) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  const GdnCoreArgs a = kSeqs ? seqs[blockIdx.z].a : a_in;
  const DevGdnState st = kSeqs ? seqs[blockIdx.z].st : st_in;
  const int pending0 = kSeqs ? seqs[blockIdx.z].pending : pending_in;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int dk = a.dk, hv = a.hv, hk = a.hk, kh = blockIdx.y, c = blockIdx.x, group = hv / hk, h0 = kh * group;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int dkp = PaddedDk(dk), rs = RowStride(dkp), ks_n = dkp / 16;
  bf16_t* kr = reinterpret_cast<bf16_t*>(smem_raw);
  bf16_t* qr = kr + kC * rs;
  float* inv = reinterpret_cast<float*>(qr + kC * rs);
  float* fq = inv + kC;
  float* gams = fq + kC;  // [group][kC]
  const int p0 = a.pending_dev ? *a.pending_dev : pending0;
  int t0, pstart, pend;
  if (!ChunkRows(c, p0, a.n, t0, pstart, pend)) return;
  {  // The chunk's ready flags for the key head's value heads, cleared (the state kernel sets them;
     // it starts only once this grid is complete).
    int* flags = Scratch(a.scratch, MaxChunks(a.n), hk, hv, dkp, a.dv).flags;
    for (int x = tid; x < group * kFlagsPerHead; x += kPrepThreads) flags[(int64_t{c} * hv + h0) * kFlagsPerHead + x] = 0;
  }
  const int64_t conv_dim = 2LL * hk * dk + int64_t{hv} * a.dv;
  // The chunk's keys (the open chunk's earlier ones from the state, where every value head of the
  // key head holds the same copy: h0's is read) and new queries as bf16,
  // zero past dk and past the rows; four columns a thread, their loads side by side (one 16-byte
  // load each where the rows allow it).
  const int quads = dkp / 4;
  const bool vec = dk % 4 == 0 && conv_dim % 4 == 0 && reinterpret_cast<uintptr_t>(a.qkv) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(st.pk) % 16 == 0;
#pragma unroll 4
  for (int x = tid; x < kC * quads; x += kPrepThreads) {
    const int i = x / quads, r0 = 4 * (x % quads);
    float kv[4] = {}, qv[4] = {};
    const float* krow = i < pstart ? st.pk + (int64_t{i} * hv + h0) * dk
                                   : a.qkv + int64_t{t0 + i - pstart} * conv_dim + int64_t{hk} * dk + kh * dk;
    const float* qrow = a.qkv + int64_t{t0 + i - pstart} * conv_dim + kh * dk;
    if (vec) {
      if (r0 < dk && i < pend) {
        const float4 k4 = *reinterpret_cast<const float4*>(krow + r0);
        kv[0] = k4.x, kv[1] = k4.y, kv[2] = k4.z, kv[3] = k4.w;
        if (i >= pstart) {
          const float4 q4 = *reinterpret_cast<const float4*>(qrow + r0);
          qv[0] = q4.x, qv[1] = q4.y, qv[2] = q4.z, qv[3] = q4.w;
        }
      }
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = r0 + e;
        if (r < dk && i < pend) {
          kv[e] = krow[r];
          if (i >= pstart) qv[e] = qrow[r];
        }
      }
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      kr[i * rs + r0 + e] = __float2bfloat16_rn(kv[e]);
      qr[i * rs + r0 + e] = __float2bfloat16_rn(qv[e]);
    }
  }
  // Each value head's log-decays, read side by side, before thread hh sums head hh's in order.
  for (int x = tid; x < group * pend; x += kPrepThreads) {
    const int hh = x / pend, i = x % pend, h = h0 + hh;
    gams[hh * kC + i] = i < pstart ? st.pgam[int64_t{i} * hv + h] : a.g[int64_t{t0 + i - pstart} * hv + h];
  }
  for (int i = tid; i < pstart; i += kPrepThreads) inv[i] = st.pkinv[int64_t{i} * hv + h0];
  __syncthreads();
  for (int hh = tid; hh < group; hh += kPrepThreads) {  // the running sum in a register: only the adds wait
    float* gam = gams + hh * kC;
    float run = pstart == 0 ? 0.0f : gam[pstart - 1];
#pragma unroll 8
    for (int i = pstart; i < pend; ++i) {
      run = __fadd_rn(run, gam[i]);
      gam[i] = run;
    }
  }
  // Two rows a warp, a half warp each (InvNormHalf: InvNorm's bits); with an odd count the last
  // pair's second half repeats a row and stores nothing.
  for (int p = warp; 2 * p < pend - pstart; p += kPrepThreads / 32) {
    const int i = pstart + 2 * p + lane / 16, row = i < pend ? i : pstart;
    const float iq = InvNormHalf(qr + row * rs, dk, lane);
    const float ik = InvNormHalf(kr + row * rs, dk, lane);
    if (lane % 16 == 0 && i < pend) {
      inv[i] = ik;
      fq[i] = QFactor(iq, dk);
    }
  }
  __syncthreads();
  // Kr·Krᵀ and Qr·Krᵀ: warp w the rows [16w, 16w + 16), all 64 key columns.
  float kk[8][4], qk[8][4];
#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) kk[nt][e] = qk[nt][e] = 0.0f;
  for (int ks = 0; ks < ks_n; ++ks) {
    unsigned ak[4], aq[4];
    LdMatrixX4(ak, kr + AOffset(lane, 16 * warp, 16 * ks, rs));
    LdMatrixX4(aq, qr + AOffset(lane, 16 * warp, 16 * ks, rs));
#pragma unroll
    for (int np = 0; np < 4; ++np) {
      unsigned b[4];
      LdMatrixX4(b, kr + BOffset(lane, 16 * np, 16 * ks, rs));
      Mma16816(kk[2 * np], ak, b[0], b[1]);
      Mma16816(kk[2 * np + 1], ak, b[2], b[3]);
      Mma16816(qk[2 * np], aq, b[0], b[1]);
      Mma16816(qk[2 * np + 1], aq, b[2], b[3]);
    }
  }
  const Scratch sc(a.scratch, MaxChunks(a.n), hk, hv, dkp, a.dv);
  const int g = lane / 4, t = lane % 4;
  for (int hh = 0; hh < group; ++hh) {  // each value head's coefficients from the shared products
    const int h = h0 + hh;
    const float* gam = gams + hh * kC;
    float* coef = sc.Coefs(c, h);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int i = 16 * warp + g + 8 * half, m = 8 * nt + 2 * t;
        const bool row = i >= pstart && i < pend;
        float ck[2], cq[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          ck[e] = row && m + e < i ? Coef(kk[nt][2 * half + e], inv[i], inv[m + e], gam[i], gam[m + e]) : 0.0f;
          cq[e] = row && m + e <= i ? Coef(qk[nt][2 * half + e], fq[i], inv[m + e], gam[i], gam[m + e]) : 0.0f;
        }
        *reinterpret_cast<float2*>(coef + i * kC + m) = make_float2(ck[0], ck[1]);
        *reinterpret_cast<float2*>(coef + kC * kC + i * kC + m) = make_float2(cq[0], cq[1]);
      }
    float* info = coef + 2 * kC * kC;  // gam, inv, fq, beta
    for (int i = tid; i < kC; i += kPrepThreads) {
      const bool row = i < pend;
      info[i] = row ? gam[i] : 0.0f;
      info[kC + i] = row ? inv[i] : 0.0f;
      info[2 * kC + i] = i >= pstart && row ? fq[i] : 0.0f;
      info[3 * kC + i] = i >= pstart && row ? a.beta[int64_t{t0 + i - pstart} * hv + h] : 0.0f;
    }
  }
  {  // the key head's tiles
    bf16_t* keys = sc.Keys(c, kh);
    const int per_row = dkp / 8;  // 16-byte pieces (rows of both tiles start 16-byte aligned)
    for (int x = tid; x < kC * per_row; x += kPrepThreads) {
      const int i = x / per_row, q = x % per_row;
      *reinterpret_cast<uint4*>(keys + i * dkp + 8 * q) = *reinterpret_cast<const uint4*>(kr + i * rs + 8 * q);
      *reinterpret_cast<uint4*>(keys + kC * dkp + i * dkp + 8 * q) = *reinterpret_cast<const uint4*>(qr + i * rs + 8 * q);
    }
  }
}

// The state kernel's shared memory (bytes), for BW value columns and padded key width dkp.
template <int BW>
struct StateLayout {
  static constexpr int kSs = BW + 8;   // bf16 stride of the S and W split tiles' rows
  static constexpr int kSks = BW + 4;  // fp32 stride of the Sᵀk rows (the output kernel's Sᵀq rows too)
  // fp32 stride of Ckk's and Cqk's rows: 4 banks past 64, so that threads reading the same keys
  // of consecutive rows (the recurrence's of one column, the outputs' of two row groups) hit
  // distinct banks.
  static constexpr int kCks = kC + 4;
  int dkp, rs, kb[2], qb, ckk, ssplit, v, sk, vn, wsplit, info[2], ee, dd, total;
  __host__ __device__ explicit StateLayout(int dk) {
    dkp = PaddedDk(dk);
    rs = RowStride(dkp);
    int o = 0;
    auto take = [&](int bytes) {
      const int at = o;
      o += (bytes + 127) / 128 * 128;
      return at;
    };
    kb[0] = take(kC * rs * 2);
    kb[1] = take(kC * rs * 2);
    qb = take(kC * rs * 2);
    ckk = take(kC * kCks * 4);
    ssplit = take(3 * dkp * kSs * 2);
    v = take(kC * BW * 4);
    // Sᵀk, then (once B has read it) W's three split tiles in the same space.
    sk = take(kC * kSks * 4 > 3 * kC * kSs * 2 ? kC * kSks * 4 : 3 * kC * kSs * 2);
    vn = take(kC * BW * 4);
    info[0] = take(kRowInfo * 4);
    info[1] = take(kRowInfo * 4);
    ee = take(kC * 4);
    dd = take(kC * 4);
    total = o;
    wsplit = sk;
  }
};

template <int BW, bool kSeqs>
__global__ void __launch_bounds__(kStateThreads, 1)
    GdnTcStateKernel(GdnCoreArgs a_in, DevGdnState st_in, int pending_in, const GdnChunkSeq* __restrict__ seqs) {
  static_assert(BW == 32 || BW == 64, "32 or 64 value columns a block");
  constexpr int kNt = BW / 8, kSs = StateLayout<BW>::kSs, kSks = StateLayout<BW>::kSks, kCks = StateLayout<BW>::kCks;
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  const GdnCoreArgs a = kSeqs ? seqs[blockIdx.z].a : a_in;
  const DevGdnState st = kSeqs ? seqs[blockIdx.z].st : st_in;
  const int pending0 = kSeqs ? seqs[blockIdx.z].pending : pending_in;
  extern __shared__ __align__(128) unsigned char sm[];
  const StateLayout<BW> L(a.dk);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
  const int dk = a.dk, dv = a.dv, hv = a.hv, hk = a.hk, h = blockIdx.x, kh = h / (hv / hk), j0 = blockIdx.y * BW;
  const int dkp = L.dkp, rs = L.rs, ks_n = dkp / 16;
  const int64_t conv_dim = 2LL * hk * dk + int64_t{hv} * dv;
  // The double-buffered pieces, chosen by selects (an array indexed at run time would live in
  // local memory).
  auto kb = [&](int b) { return reinterpret_cast<bf16_t*>(sm + (b == 0 ? L.kb[0] : L.kb[1])); };
  auto info = [&](int b) { return reinterpret_cast<float*>(sm + (b == 0 ? L.info[0] : L.info[1])); };
  bf16_t* qb = reinterpret_cast<bf16_t*>(sm + L.qb);
  float* ckk = reinterpret_cast<float*>(sm + L.ckk);
  bf16_t* ssplit = reinterpret_cast<bf16_t*>(sm + L.ssplit);
  float* vv = reinterpret_cast<float*>(sm + L.v);
  float* skv = reinterpret_cast<float*>(sm + L.sk);
  float* vn = reinterpret_cast<float*>(sm + L.vn);
  bf16_t* wsplit = reinterpret_cast<bf16_t*>(sm + L.wsplit);
  float* ee = reinterpret_cast<float*>(sm + L.ee);
  float* dd = reinterpret_cast<float*>(sm + L.dd);
  const int p0 = a.pending_dev ? *a.pending_dev : pending0;
  const Scratch sc(a.scratch, MaxChunks(a.n), hk, hv, dkp, dv);
  float* S = st.S + int64_t{h} * dk * dv;

  // The state: warp w < ks_n holds rows [16w, 16w + 16) of the block's columns as mma outputs.
  const bool owns_s = warp < ks_n;
  float sacc[kNt][4];
#pragma unroll
  for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = 16 * warp + g + 8 * (e / 2), col = j0 + 8 * nt + 2 * t + e % 2;
      sacc[nt][e] = owns_s && r < dk && col < dv ? S[int64_t{r} * dv + col] : 0.0f;
    }
  // S's three bf16 terms into the B tiles of phase A.
  auto store_split = [&] {
    if (!owns_s) return;
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {  // columns 2t and 2t + 1 of one row: one 4-byte store a term
        const int r = 16 * warp + g + 8 * half, col = 8 * nt + 2 * t;
        unsigned p[3];
        SplitPack3(sacc[nt][2 * half], sacc[nt][2 * half + 1], p);
#pragma unroll
        for (int s = 0; s < 3; ++s) *reinterpret_cast<unsigned*>(ssplit + (s * dkp + r) * kSs + col) = p[s];
      }
  };
  store_split();
  for (int x = tid; x < p0 * BW; x += kStateThreads) {  // the open chunk's earlier corrected values
    const int m = x / BW, cc = x % BW;
    vn[x] = j0 + cc < dv ? st.pvn[(int64_t{m} * hv + h) * dv + j0 + cc] : 0.0f;
  }

  // Copies of chunk c's pieces (cp.async; each waited for at the top of the chunk loop).
  const bool v_fast = dv % 4 == 0 && conv_dim % 4 == 0 && (2 * hk * dk + h * dv + j0) % 4 == 0 &&
                      reinterpret_cast<uintptr_t>(a.qkv) % 16 == 0;
  auto copy_keys = [&](int c, bf16_t* dst, int which) {  // which 0: keys, 1: queries
    const bf16_t* tile = sc.Keys(c, kh) + which * kC * dkp;
    const int per_row = dkp / 8;  // 16-byte pieces
    for (int x = tid; x < kC * per_row; x += kStateThreads) {
      const int i = x / per_row, q = x % per_row;
      CpAsync16(dst + i * rs + 8 * q, tile + i * dkp + 8 * q);
    }
  };
  auto copy_ckk = [&](int c) {  // Ckk's rows kCks apart
    const float* src = sc.Coefs(c, h);
    for (int x = tid; x < kC * kC / 4; x += kStateThreads) CpAsync16(ckk + (x / (kC / 4)) * kCks + 4 * (x % (kC / 4)), src + 4 * x);
  };
  auto copy_info = [&](int c, float* dst) {
    const float* src = sc.Coefs(c, h) + 2 * kC * kC;
    for (int x = tid; x < kRowInfo / 4; x += kStateThreads) CpAsync16(dst + 4 * x, src + 4 * x);
  };
  auto copy_values = [&](int t0c, int pstart_c, int pend_c) {
    const float* base = a.qkv + 2LL * hk * dk + int64_t{h} * dv + j0;
    if (v_fast) {
      for (int x = tid; x < (pend_c - pstart_c) * (BW / 4); x += kStateThreads) {
        const int i = pstart_c + x / (BW / 4), q = x % (BW / 4);
        const bool ok = j0 + 4 * q < dv;
        CpAsync16(vv + i * BW + 4 * q, ok ? base + int64_t{t0c + i - pstart_c} * conv_dim + 4 * q : base, ok);
      }
    } else {
      for (int x = tid; x < (pend_c - pstart_c) * BW; x += kStateThreads) {
        const int i = pstart_c + x / BW, cc = x % BW;
        if (j0 + cc < dv) {
          CpAsync4(vv + i * BW + cc, base + int64_t{t0c + i - pstart_c} * conv_dim + cc);
        } else {
          vv[i * BW + cc] = 0.0f;
        }
      }
    }
  };
  auto chunk_rows = [&](int c, int& t0c, int& ps, int& pe) { return ChunkRows(c, p0, a.n, t0c, ps, pe); };

  {
    int t0c, ps, pe;
    chunk_rows(0, t0c, ps, pe);
    copy_keys(0, kb(0), 0);
    copy_keys(0, qb, 1);
    copy_ckk(0);
    copy_info(0, info(0));
    copy_values(t0c, ps, pe);
    CpAsyncCommit();
  }

  int t0 = 0, pstart = p0, pend = 0;
  for (int c = 0; chunk_rows(c, t0, pstart, pend); ++c) {
    const int buf = c % 2;
    int t0n, psn, pen;
    const bool more = chunk_rows(c + 1, t0n, psn, pen);
    const float* in = info(buf);
    const float *gam = in, *inv = in + kC, *beta = in + 3 * kC;  // fq (in + 2 kC): the output kernel's
    CpAsyncWait<0>();
    __syncthreads();
    if (more) {
      copy_keys(c + 1, kb(buf ^ 1), 0);
      copy_info(c + 1, info(buf ^ 1));
      CpAsyncCommit();
    }
    if (tid < kC) {
      ee[tid] = expf(gam[tid]);
      if (pend == kC) dd[tid] = expf(__fsub_rn(gam[kC - 1], gam[tid]));
    }
    // A. Sᵀk_raw and Sᵀq_raw of the chunk's 64 rows: eight 16-row tiles (0-3 keys, 4-7 queries)
    // by BW / 32 column groups of 32; a warp takes kMt = BW / 32 tiles of one kind in one column
    // group, so that it reads each of S's B fragments once for all its tiles.
    {
      constexpr int kCg = BW / 32, kMt = kCg;
      const int cg = warp % kCg, tile0 = (warp / kCg) * kMt;
      const bf16_t* at = tile0 < 4 ? kb(buf) : qb;
      float acc[kMt][4][4];
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;
      for (int ks = 0; ks < ks_n; ++ks) {
        unsigned af[kMt][4];
#pragma unroll
        for (int mt = 0; mt < kMt; ++mt) LdMatrixX4(af[mt], at + AOffset(lane, 16 * ((tile0 + mt) % 4), 16 * ks, rs));
#pragma unroll
        for (int np = 0; np < 2; ++np) {
          unsigned b[3][4];
#pragma unroll
          for (int s = 0; s < 3; ++s) {
            LdMatrixX4Trans(b[s], ssplit + s * dkp * kSs + BTransOffset(lane, 32 * cg + 16 * np, 16 * ks, kSs));
          }
          const unsigned b00[3] = {b[0][0], b[1][0], b[2][0]}, b01[3] = {b[0][1], b[1][1], b[2][1]};
          const unsigned b10[3] = {b[0][2], b[1][2], b[2][2]}, b11[3] = {b[0][3], b[1][3], b[2][3]};
#pragma unroll
          for (int mt = 0; mt < kMt; ++mt) {
            MmaSplit3(acc[mt][2 * np], af[mt], b00, b01);
            MmaSplit3(acc[mt][2 * np + 1], af[mt], b10, b11);
          }
        }
      }
      // Sᵀk into shared memory for B; Sᵀq for the output kernel, into the chunk's scratch.
      float* sq_out = sc.Sq(c, h) + j0;
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt) {
        const int r0 = 16 * ((tile0 + mt) % 4);
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
          const int col = 32 * cg + 8 * nt + 2 * t;
          if (tile0 < 4) {
            *reinterpret_cast<float2*>(skv + (r0 + g) * kSks + col) = make_float2(acc[mt][nt][0], acc[mt][nt][1]);
            *reinterpret_cast<float2*>(skv + (r0 + g + 8) * kSks + col) = make_float2(acc[mt][nt][2], acc[mt][nt][3]);
          } else {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int r = r0 + g + 8 * (e / 2), cc = col + e % 2;
              if (j0 + cc < dv) sq_out[int64_t{r} * dv + cc] = acc[mt][nt][e];
            }
          }
        }
      }
    }
    __syncthreads();
    if (more) {
      copy_keys(c + 1, qb, 1);
      CpAsyncCommit();
    }
    // B. The recurrence, gdn_tc_tokens.cu's chain: row i's w starts at WStart and takes key m's
    // term for every m < i in ascending m. Thread (jp, r) holds columns 2 jp and 2 jp + 1 of rows
    // r, r + R, ... in registers (each coefficient it loads serves two columns); key m's corrected
    // values Vn_m = beta_m w_m are made by the thread holding row m and shuffled to the other
    // R - 1 threads of the column pair (consecutive lanes), so that a column's chain runs on R
    // threads at once, each term still entering its row in ascending m. A finished Vn_m replaces
    // its w_m in the same registers; all of them go to shared memory after the loop.
    {
      constexpr int kR = kStateThreads / (BW / 2), kU = kC / kR;
      const int jp = tid / kR, r = tid % kR, j = 2 * jp;
      float w0[kU], w1[kU];
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int i = r + kR * u;
        const float2 v2 = *reinterpret_cast<const float2*>(vv + i * BW + j);
        const float2 sk2 = *reinterpret_cast<const float2*>(skv + i * kSks + j);
        w0[u] = WStart(v2.x, ee[i], inv[i], sk2.x);
        w1[u] = WStart(v2.y, ee[i], inv[i], sk2.y);
      }
#pragma unroll
      for (int m4 = 0; m4 < kC / 4; ++m4) {
        if (4 * m4 >= pend) break;
        // Keys m = 4 m4 + e enter row r + R u when r > m - R u: slots with m - R u >= R - 1 for all
        // four keys take none (known at compile time), the others load the four coefficients.
        float4 cf[kU];
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          if (4 * m4 - kR * u <= kR - 2) cf[u] = *reinterpret_cast<const float4*>(ckk + (r + kR * u) * kCks + 4 * m4);
        }
        const float4 b4 = *reinterpret_cast<const float4*>(beta + 4 * m4);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int m = 4 * m4 + e, um = m / kR, rm = m % kR;
          const float bm = e == 0 ? b4.x : e == 1 ? b4.y : e == 2 ? b4.z : b4.w;
          // Row m's thread's values for every lane (the shuffles outside any branch); the open
          // chunk's earlier rows: stored.
          float vm0 = __shfl_sync(0xffffffffu, __fmul_rn(bm, w0[um]), rm, kR);
          float vm1 = __shfl_sync(0xffffffffu, __fmul_rn(bm, w1[um]), rm, kR);
          if (m < pstart) {
            const float2 st2 = *reinterpret_cast<const float2*>(vn + m * BW + j);
            vm0 = st2.x;
            vm1 = st2.y;
          }
          if (r == rm) {
            w0[um] = vm0;
            w1[um] = vm1;
          }
#pragma unroll
          for (int u = 0; u < kU; ++u) {
            const int d = m - kR * u;
            if (d >= kR - 1) continue;
            const float c = e == 0 ? cf[u].x : e == 1 ? cf[u].y : e == 2 ? cf[u].z : cf[u].w;
            if (d < 0 || r > d) {
              w0[u] = __fmaf_rn(-c, vm0, w0[u]);
              w1[u] = __fmaf_rn(-c, vm1, w1[u]);
            }
          }
        }
      }
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int i = r + kR * u;
        if (i >= pstart && i < pend) *reinterpret_cast<float2*>(vn + i * BW + j) = make_float2(w0[u], w1[u]);
      }
    }
    __syncthreads();
    if (more) {
      copy_ckk(c + 1);
      copy_values(t0n, psn, pen);
      CpAsyncCommit();
    }
    {  // The chunk's corrected values (the open chunk's earlier ones too) for the output kernel,
       // then its flag: each thread's stores fenced, the flag set after the barrier.
      float* vn_out = sc.Vn(c, h) + j0;
      for (int x = tid; x < pend * BW; x += kStateThreads) {
        const int i = x / BW, cc = x % BW;
        if (j0 + cc < dv) vn_out[int64_t{i} * dv + cc] = vn[x];
      }
      __threadfence();
      __syncthreads();
      if (tid == 0) StoreRelease(sc.Flag(c, h, j0), 1);
    }
    if (pend == kC) {
      // D. S = e^{gam_last} S + Kᵀ W, W_m = (inv_m d_m) Vn_m split in three.
      for (int x = tid; x < kC * BW / 2; x += kStateThreads) {  // two adjacent columns a thread: 4-byte stores
        const int m = 2 * x / BW, cc = 2 * x % BW;
        const float2 v2 = *reinterpret_cast<const float2*>(vn + 2 * x);
        unsigned p[3];
        SplitPack3(WUpdate(inv[m], dd[m], v2.x), WUpdate(inv[m], dd[m], v2.y), p);
#pragma unroll
        for (int s = 0; s < 3; ++s) *reinterpret_cast<unsigned*>(wsplit + (s * kC + m) * kSs + cc) = p[s];
      }
      __syncthreads();
      if (owns_s) {
        const float el = expf(gam[kC - 1]);
#pragma unroll
        for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) sacc[nt][e] = __fmul_rn(sacc[nt][e], el);
#pragma unroll
        for (int ks = 0; ks < kC / 16; ++ks) {
          unsigned af[4];
          LdMatrixX4Trans(af, kb(buf) + ATransOffset(lane, 16 * warp, 16 * ks, rs));
#pragma unroll
          for (int np = 0; np < kNt / 2; ++np) {
            unsigned b[3][4];
#pragma unroll
            for (int s = 0; s < 3; ++s) LdMatrixX4Trans(b[s], wsplit + s * kC * kSs + BTransOffset(lane, 16 * np, 16 * ks, kSs));
            const unsigned b00[3] = {b[0][0], b[1][0], b[2][0]}, b01[3] = {b[0][1], b[1][1], b[2][1]};
            const unsigned b10[3] = {b[0][2], b[1][2], b[2][2]}, b11[3] = {b[0][3], b[1][3], b[2][3]};
            MmaSplit3(sacc[2 * np], af, b00, b01);
            MmaSplit3(sacc[2 * np + 1], af, b10, b11);
          }
        }
        store_split();
      }
    } else {
      // The call ends inside this chunk: its new rows go to the open chunk's state.
      const bool first = blockIdx.y == 0;
      for (int x = tid; x < (pend - pstart) * dk; x += kStateThreads) {
        const int i = pstart + x / dk, r = x % dk;
        if (first) st.pk[(int64_t{i} * hv + h) * dk + r] = __bfloat162float(kb(buf)[i * rs + r]);
      }
      for (int i = pstart + tid; i < pend; i += kStateThreads) {
        if (first) {
          st.pgam[int64_t{i} * hv + h] = gam[i];
          st.pkinv[int64_t{i} * hv + h] = inv[i];
        }
      }
      for (int x = tid; x < (pend - pstart) * BW; x += kStateThreads) {
        const int i = pstart + x / BW, cc = x % BW;
        if (j0 + cc < dv) st.pvn[(int64_t{i} * hv + h) * dv + j0 + cc] = vn[i * BW + cc];
      }
    }
  }
  if (owns_s) {
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = 16 * warp + g + 8 * (e / 2), col = j0 + 8 * nt + 2 * t + e % 2;
        if (r < dk && col < dv) S[int64_t{r} * dv + col] = sacc[nt][e];
      }
  }
}

// The output kernel's shared memory (bytes): Cqk, Sᵀq_raw and Vn of the block's chunk, value head
// and columns, and the rows' e^gam and fq.
template <int BW>
constexpr int OutputSharedBytes() {
  return (kC * StateLayout<BW>::kCks + kC * StateLayout<BW>::kSks + kC * BW + 2 * kC) * 4;
}

// The outputs o_i = e_i fq_i Sᵀq_raw_i + Σ_{m<=i} Cqk[i][m] Vn_m of the chunks the state kernel
// walks, one block a (value head and BW value columns, chunk; grid x, y), each chain as the walk
// computed it before (gdn_tc_tokens.cu's order). Launched behind the state kernel, whose blocks
// release it as they start (pdl.cuh), so that its blocks run on the multiprocessors the walk
// leaves free while it walks: a block reads what the prep kernel wrote (complete before the walk
// started), waits for its chunk's flag, then reads the chunk's Sᵀq and Vn from the scratch. The
// blocks of a sequence's last chunk wait for the state kernel itself before they end, so that this
// grid never completes before it (pdl.cuh's chain).
template <int BW, bool kSeqs>
__global__ void __launch_bounds__(kStateThreads)
    GdnTcOutputKernel(GdnCoreArgs a_in, int pending_in, const GdnChunkSeq* __restrict__ seqs) {
  constexpr int kSks = StateLayout<BW>::kSks, kCks = StateLayout<BW>::kCks;
  const GdnCoreArgs a = kSeqs ? seqs[blockIdx.z].a : a_in;
  const int pending0 = kSeqs ? seqs[blockIdx.z].pending : pending_in;
  extern __shared__ __align__(16) float osm[];
  float* cqk = osm;
  float* sqv = cqk + kC * kCks;
  float* vn = sqv + kC * kSks;
  float* ee = vn + kC * BW;
  float* fq = ee + kC;
  const int tid = threadIdx.x;
  const int dv = a.dv, hv = a.hv, blocks = (dv + BW - 1) / BW, h = blockIdx.x / blocks, j0 = (blockIdx.x % blocks) * BW;
  const int c = blockIdx.y;
  const int p0 = a.pending_dev ? *a.pending_dev : pending0;
  int t0, pstart, pend;
  // A chunk past a sequence's end (the grid's last row, or a shorter sequence's in a
  // GdnCoreTcChunkedSeqs launch): nothing to compute; it waits for the walk as pdl.cuh's kernels
  // do before they return. The grid's last row is dispatched last, so it holds its slots only
  // near the walk's end; a shorter sequence's rows hold theirs from their turn on.
  if (!ChunkRows(c, p0, a.n, t0, pstart, pend)) {
    PdlBegin();
    return;
  }
  int t0n, psn, pen;
  const bool last = !ChunkRows(c + 1, p0, a.n, t0n, psn, pen);
  const Scratch sc(a.scratch, MaxChunks(a.n), a.hk, hv, PaddedDk(a.dk), dv);
  {  // the prep kernel's pieces (through L2, as every read of the scratch here)
    const float4* src = reinterpret_cast<const float4*>(sc.Coefs(c, h) + kC * kC);
    for (int x = tid; x < kC * kC / 4; x += kStateThreads) {
      *reinterpret_cast<float4*>(cqk + (x / (kC / 4)) * kCks + 4 * (x % (kC / 4))) = __ldcg(src + x);
    }
    const float* info = sc.Coefs(c, h) + 2 * kC * kC;  // gam, inv, fq, beta
    for (int i = tid; i < kC; i += kStateThreads) {
      ee[i] = expf(__ldcg(info + i));  // the walk's e_i, the same expf of the same gam
      fq[i] = __ldcg(info + 2 * kC + i);
    }
  }
  if (tid == 0) {  // the walk's pieces of this chunk: ready once the flag is set
    const int* flag = sc.Flag(c, h, j0);
    const long long since = clock64();
    while (LoadAcquire(flag) == 0) {
      __nanosleep(256);
      if (clock64() - since > (1LL << 34)) __trap();  // seconds: the walk cannot be that slow
    }
  }
  __syncthreads();
  {  // through L2 (__ldcg): this multiprocessor's L1 holds nothing of them from before the flag
    const float* sq_src = sc.Sq(c, h) + j0;
    const float* vn_src = sc.Vn(c, h) + j0;
    if (dv % 4 == 0) {  // four columns a load (j0 and the rows' starts are multiples of 4)
      for (int x = tid; x < kC * BW / 4; x += kStateThreads) {
        const int i = x / (BW / 4), cc = 4 * (x % (BW / 4));
        const bool in = j0 + cc < dv;
        const float4 z = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        *reinterpret_cast<float4*>(sqv + i * kSks + cc) =
            in ? __ldcg(reinterpret_cast<const float4*>(sq_src + int64_t{i} * dv + cc)) : z;
        *reinterpret_cast<float4*>(vn + i * BW + cc) =
            in && i < pend ? __ldcg(reinterpret_cast<const float4*>(vn_src + int64_t{i} * dv + cc)) : z;
      }
    } else {
      for (int x = tid; x < kC * BW; x += kStateThreads) {
        const int i = x / BW, cc = x % BW;
        const bool in = j0 + cc < dv;
        sqv[i * kSks + cc] = in ? __ldcg(sq_src + int64_t{i} * dv + cc) : 0.0f;
        vn[x] = in && i < pend ? __ldcg(vn_src + int64_t{i} * dv + cc) : 0.0f;
      }
    }
  }
  __syncthreads();
  // Thread (rg, jp) the rows rg, rg + R, ... of columns 2 jp and 2 jp + 1, each chain in
  // ascending m.
  {
    constexpr int kG = BW / 2, kR = kStateThreads / kG, kU = kC / kR;
    const int jp = tid % kG, rg = tid / kG, j = 2 * jp;
    float o0[kU], o1[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int i = rg + kR * u;
      const float2 sq2 = *reinterpret_cast<const float2*>(sqv + i * kSks + j);
      o0[u] = OStart(ee[i], fq[i], sq2.x);
      o1[u] = OStart(ee[i], fq[i], sq2.y);
    }
    // Key m = 4 m4 + e enters row i = rg + R u when m <= i, i.e. d + e <= rg with d = 4 m4 - R u
    // known at compile time: d >= R, no row of the group takes the key group; d <= -3, every
    // row takes all four; in between a test of rg. The same FMAs in the same order as a loop
    // over the triangle at run time, without its tests and branches.
#pragma unroll
    for (int m4 = 0; m4 < kC / 4; ++m4) {
      if (4 * m4 >= pend) break;
      float2 vm[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) vm[e] = *reinterpret_cast<const float2*>(vn + (4 * m4 + e) * BW + j);
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int d = 4 * m4 - kR * u;
        if (d >= kR) continue;
        const float4 cf = *reinterpret_cast<const float4*>(cqk + (rg + kR * u) * kCks + 4 * m4);
        const float c4[4] = {cf.x, cf.y, cf.z, cf.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (d + e <= 0 || (d + e < kR && d + e <= rg)) {
            o0[u] = __fmaf_rn(c4[e], vm[e].x, o0[u]);
            o1[u] = __fmaf_rn(c4[e], vm[e].y, o1[u]);
          }
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int i = rg + kR * u;
      if (i >= pstart && i < pend) {
        float* orow = a.out + (int64_t{t0 + i - pstart} * hv + h) * dv + j0 + j;
        if (j0 + j < dv) orow[0] = RoundAct(o0[u], true);
        if (j0 + j + 1 < dv) orow[1] = RoundAct(o1[u], true);
      }
    }
  }

  if (last) AwaitPredecessors();
  ReleaseDependents();
}

// 64 value columns a block when 32 would need more blocks than the device has multiprocessors
// (every block walks all of the call's chunks: a second wave doubles the critical path).
int TcColumns(int hv, int dv) {
  static const int sms = [] {
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
      return 0;
    }
    return n;
  }();
  return sms > 0 && int64_t{hv} * ((dv + 31) / 32) > sms && dv > 32 ? 64 : 32;
}

// The state kernel over `count` sequences: one (seqs null, the arguments') or seqs' (device).
template <int BW, bool kSeqs>
Status LaunchState(const GdnCoreArgs& a, const GdnChunkSeq* seqs, int count, int max_n, cudaStream_t s) {
  const int smem = StateLayout<BW>(a.dk).total;
  const cudaError_t err =
      cudaFuncSetAttribute(GdnTcStateKernel<BW, kSeqs>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (err != cudaSuccess) return Internal(std::string("cuda GdnCore (tensor-core chunks): shared memory: ") + cudaGetErrorString(err));
  const dim3 grid(a.hv, (a.dv + BW - 1) / BW, static_cast<unsigned>(count));
  const DevGdnState st = kSeqs ? DevGdnState{} : *a.state;
  LaunchPdl(GdnTcStateKernel<BW, kSeqs>, grid, kStateThreads, smem, s, a, st, st.pending, seqs);
  GRAFT_RETURN_IF_ERROR(Launched("GdnCore (tensor-core chunks)"));
  constexpr int out_smem = OutputSharedBytes<BW>();
  const cudaError_t oerr =
      cudaFuncSetAttribute(GdnTcOutputKernel<BW, kSeqs>, cudaFuncAttributeMaxDynamicSharedMemorySize, out_smem);
  if (oerr != cudaSuccess) return Internal(std::string("cuda GdnCore (tensor-core outputs): shared memory: ") + cudaGetErrorString(oerr));
  const dim3 out_grid(a.hv * ((a.dv + BW - 1) / BW), static_cast<unsigned>(MaxChunks(max_n)), static_cast<unsigned>(count));
  LaunchPdl(GdnTcOutputKernel<BW, kSeqs>, out_grid, kStateThreads, out_smem, s, a, st.pending, seqs);
  return Launched("GdnCore (tensor-core outputs)");
}

// Both kernels for one sequence (a, seqs null) or `count` of a's shape (seqs on the device, the
// longest of max_n tokens).
template <bool kSeqs>
Status LaunchChunked(const GdnCoreArgs& a, const GdnChunkSeq* seqs, int count, int max_n, cudaStream_t s) {
  const int prep_smem = PrepSharedBytes(a.dk, a.hv / a.hk);
  const cudaError_t err =
      cudaFuncSetAttribute(GdnTcPrepKernel<kSeqs>, cudaFuncAttributeMaxDynamicSharedMemorySize, prep_smem);
  if (err != cudaSuccess) return Internal(std::string("cuda GdnCore (tensor-core prep): shared memory: ") + cudaGetErrorString(err));
  const DevGdnState st = kSeqs ? DevGdnState{} : *a.state;
  LaunchPdl(GdnTcPrepKernel<kSeqs>, dim3(static_cast<unsigned>(MaxChunks(max_n)), a.hk, static_cast<unsigned>(count)),
            kPrepThreads, prep_smem, s, a, st, st.pending, seqs);
  GRAFT_RETURN_IF_ERROR(Launched("GdnCore (tensor-core prep)"));
  return TcColumns(a.hv, a.dv) == 64 ? LaunchState<64, kSeqs>(a, seqs, count, max_n, s)
                                     : LaunchState<32, kSeqs>(a, seqs, count, max_n, s);
}

}  // namespace

int64_t GdnTcChunkScratchFloats(int64_t n, int hk, int hv, int dk, int dv) {
  return Scratch::Floats(MaxChunks(n), hk, hv, PaddedDk(dk), dv);
}

Status GdnCoreTcChunked(const GdnCoreArgs& a, void* stream) {
  static_assert(kGdnChunk == 64, "the chunk kernels' layouts assume 64-row chunks");
  if (a.scratch == nullptr) return InvalidArgument("cuda GdnCore (tensor-core chunks): no scratch");
  if (a.dk > kGdnTcMaxDk) return InvalidArgument("cuda GdnCore (tensor-core chunks): keys wider than 128");
  return LaunchChunked<false>(a, nullptr, 1, a.n, static_cast<cudaStream_t>(stream));
}

Status GdnCoreTcChunkedSeqs(const GdnChunkSeq* seqs, const GdnChunkSeq* host, int count, void* stream) {
  if (count < 1 || count > 65535 || seqs == nullptr || host == nullptr) {
    return InvalidArgument("cuda GdnCoreTcChunkedSeqs: 1 to 65535 sequences, on the device and the host");
  }
  const GdnCoreArgs& a0 = host[0].a;
  if (a0.dk > kGdnTcMaxDk) return InvalidArgument("cuda GdnCoreTcChunkedSeqs: keys wider than 128");
  int max_n = 0;
  for (int i = 0; i < count; ++i) {
    const GdnCoreArgs& a = host[i].a;
    if (a.hk != a0.hk || a.hv != a0.hv || a.dk != a0.dk || a.dv != a0.dv || a.scratch == nullptr ||
        a.pending_dev != nullptr || a.n < 1 || host[i].pending < 0 || host[i].pending >= kGdnChunk) {
      return InvalidArgument("cuda GdnCoreTcChunkedSeqs: sequence " + std::to_string(i) +
                             " differs in heads, lacks its scratch, has no rows or a bad open-chunk count");
    }
    max_n = std::max(max_n, a.n);
  }
  return LaunchChunked<true>(a0, seqs, count, max_n, static_cast<cudaStream_t>(stream));
}

}  // namespace graft::cuda

// The chunk-parallel form of GdnCore (gdn.h): the same arithmetic as the token-by-token kernel,
// output for output and in the same order, but with the work of a 64-token chunk spread over
// the block instead of walked one token at a time.
//
// Inside a chunk the state S is fixed (the chunk-consistent form), so for every row of the
// chunk the products with S (Sᵀk, Sᵀq), the coefficient matrices (k_i·k_m, q_i·k_m, each times
// e^{gam_i − gam_m}) and the outputs are independent of one another; only the corrected values
// Vn_i depend on the earlier rows, a 64-step triangular recurrence per value column. Each of
// these quantities is computed here by one thread with exactly the operations, and in exactly
// the order, that the token kernel uses for it, so the two kernels agree bit for bit and a
// row's output still does not depend on how its sequence is split into calls.
//
// Grid: (value head, slice of 32 · groups value columns); a block is `groups` (1 or 2) column
// groups of 8 warps, lane = column: two groups share a block's staged rows (q, k, coefficients)
// where blocks of one group would need a second wave on the multiprocessors — one block fits a
// multiprocessor (its shared memory), and every block walks all of the call's chunks in order,
// so a second wave doubles the kernel's critical path. Which group, block or warp computes an
// output never changes its operations, so the bits are the same for either.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/gdn.h"
#include "backend/cuda/gdn_kernels.cuh"
#include "backend/cuda/launched.h"
#include "backend/cuda/pdl.cuh"

namespace graft::cuda {
namespace {

using gdn_kernels::ChunkRows;
using gdn_kernels::MaxChunks;

constexpr int kGroupCols = 32;  // value columns of a column group (one per lane)
constexpr int kWarps = 8;       // warps of a column group
constexpr int kThreads = kWarps * 32;
constexpr int kMaxGroups = 2;
constexpr int kC = kGdnChunk;  // 64

// A q / k row's stride in shared memory: dk rounded up to whole float4s.
__host__ __device__ constexpr int RowFloats(int dk) { return (dk + 3) / 4 * 4; }

// Dot16Fma(a, b, n) (device_math.cuh: the CPU reference's 16 partial sums, each term fused in,
// then its pairwise tree) with both rows read as float4: a and b 16-byte aligned. The same terms
// into the same partial sums in the same order, so the same bits; a quarter of the loads.
__device__ __forceinline__ float Dot16Aligned(const float* a, const float* b, int n) {
  float acc[16];
#pragma unroll
  for (int l = 0; l < 16; ++l) acc[l] = 0.0f;
  int i = 0;
  for (; i + 16 <= n; i += 16) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float4 x = *reinterpret_cast<const float4*>(a + i + 4 * q);
      const float4 y = *reinterpret_cast<const float4*>(b + i + 4 * q);
      acc[4 * q] = __fmaf_rn(x.x, y.x, acc[4 * q]);
      acc[4 * q + 1] = __fmaf_rn(x.y, y.y, acc[4 * q + 1]);
      acc[4 * q + 2] = __fmaf_rn(x.z, y.z, acc[4 * q + 2]);
      acc[4 * q + 3] = __fmaf_rn(x.w, y.w, acc[4 * q + 3]);
    }
  }
  for (int l = 0; i < n; ++i, ++l) acc[l] = __fmaf_rn(a[i], b[i], acc[l]);
#pragma unroll
  for (int sh = 8; sh > 0; sh >>= 1)
#pragma unroll
    for (int l = 0; l < sh; ++l) acc[l] = __fadd_rn(acc[l], acc[l + sh]);
  return acc[0];
}

// Shared memory carve-up (floats) of a block of `groups` column groups (w = 32 · groups columns).
// Every read of a q / k row here is the same address across a warp (a broadcast), so rows are
// only rounded up to 4 floats: 16-byte aligned for float4 reads. The coefficient and state
// arrays are 16-byte aligned too (offsets of multiples of 4 floats).
struct Layout {
  int kst, w, off_k, off_q, off_s, off_vn, off_sk, off_sq, off_v, off_ckk, off_cqk, off_gam, off_e, off_beta, off_d,
      off_inv, total;
  __host__ __device__ Layout(int dk, int groups) {
    kst = RowFloats(dk);
    w = kGroupCols * groups;
    off_k = 0;
    off_q = off_k + kC * kst;
    off_s = off_q + kC * kst;
    off_vn = off_s + dk * w;
    off_sk = off_vn + kC * w;
    off_sq = off_sk + kC * w;
    off_v = off_sq + kC * w;
    off_ckk = off_v + kC * w;
    off_cqk = off_ckk + kC * kC;
    off_gam = off_cqk + kC * kC;
    off_e = off_gam + kC;
    off_beta = off_e + kC;
    off_d = off_beta + kC;
    off_inv = off_d + kC;
    total = off_inv + 2 * kC;
  }
};

// Normalised q and k of chunk rows [pstart, pend) into qc, kc (row stride kst), as the token
// kernel computes them; inv [2 * kC] is scratch.
__device__ void NormRows(const GdnCoreArgs& a, int kh, int t0, int pstart, int pend, int kst, float* qc, float* kc,
                         float* inv) {
  const int dk = a.dk, tid = threadIdx.x, rows = pend - pstart;
  const int64_t conv_dim = 2LL * a.hk * dk + int64_t{a.hv} * a.dv;
  const float q_scale = 1.0f / sqrtf(static_cast<float>(dk));
  // Σ x² by a half-warp per vector: lane l runs Dot16's partial sum l (elements l, l + 16, ...,
  // then its tail element), shuffles join them in Dot16's tree — Dot16's bits, loads coalesced.
  const int lane16 = tid % 16, threads = static_cast<int>(blockDim.x);
  const unsigned mask = 0xffffu << (16 * ((tid / 16) % 2));
  for (int x = tid / 16; x < 2 * rows; x += threads / 16) {
    const int i = x / 2, which = x % 2;
    const float* row = a.qkv + int64_t{t0 + i} * conv_dim;
    const float* raw = which == 0 ? row + kh * dk : row + int64_t{a.hk} * dk + kh * dk;
    const int full = dk / 16 * 16;
    float acc = 0.0f;
#pragma unroll 8
    for (int e = lane16; e < full; e += 16) acc = __fadd_rn(acc, __fmul_rn(raw[e], raw[e]));
    if (full + lane16 < dk) acc = __fadd_rn(acc, __fmul_rn(raw[full + lane16], raw[full + lane16]));
    for (int sh = 8; sh > 0; sh >>= 1) acc = __fadd_rn(acc, __shfl_down_sync(mask, acc, sh, 16));
    if (lane16 == 0) inv[2 * (pstart + i) + which] = 1.0f / sqrtf(__fadd_rn(acc, 1e-6f));
  }
  __syncthreads();
#pragma unroll 4
  for (int x = tid; x < rows * dk; x += threads) {
    const int i = pstart + x / dk, r = x % dk;
    const float* row = a.qkv + int64_t{t0 + i - pstart} * conv_dim;
    qc[i * kst + r] = __fmul_rn(__fmul_rn(row[kh * dk + r], inv[2 * i]), q_scale);
    kc[i * kst + r] = __fmul_rn(__fmul_rn(row[int64_t{a.hk} * dk + kh * dk + r], inv[2 * i + 1]), 1.0f);
  }
}

// The coefficient kernel's q / k row stride: whole float4s plus one, so that the rows m of a
// warp's 32 threads (one each) start in distinct bank quads.
__host__ __device__ constexpr int CoefRowFloats(int dk) { return RowFloats(dk) + 4; }

// The parts of a chunk that do not depend on the state S, for every chunk of the call at once
// (block = (chunk, value head)): the cumulative log-decay gam and the coefficient matrices
//   Ckk[i][m] = (k_i·k_m) e^{gam_i − gam_m} (m < i),  Cqk[i][m] = (q_i·k_m) e^{gam_i − gam_m} (m <= i)
// for the chunk's new rows i, into a.scratch (GdnChunkScratchFloats).
__global__ void __launch_bounds__(kThreads) GdnCoefKernel(GdnCoreArgs a, DevGdnState st, int pending0) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  extern __shared__ float sm[];
  const int dk = a.dk, hv = a.hv, h = blockIdx.y, c = blockIdx.x, kh = h / (a.hv / a.hk), tid = threadIdx.x;
  const int kst = CoefRowFloats(dk);
  float *kc = sm, *qc = kc + kC * kst, *gam = qc + kC * kst, *inv = gam + kC;
  const int p0 = a.pending_dev ? *a.pending_dev : pending0;
  int t0, pstart, pend;
  if (!ChunkRows(c, p0, a.n, t0, pstart, pend)) return;
  for (int x = tid; x < pstart * dk; x += kThreads) {  // the open chunk's earlier rows (c == 0)
    const int m = x / dk, r = x % dk;
    kc[m * kst + r] = st.pk[(int64_t{m} * hv + h) * dk + r];
  }
  NormRows(a, kh, t0, pstart, pend, kst, qc, kc, inv);
  if (tid == 0) {
    for (int m = 0; m < pstart; ++m) gam[m] = st.pgam[m * hv + h];
    for (int i = pstart; i < pend; ++i) {
      gam[i] = __fadd_rn(i == 0 ? 0.0f : gam[i - 1], a.g[int64_t{t0 + i - pstart} * hv + h]);
    }
  }
  __syncthreads();
  float* out = a.scratch + (int64_t{c} * hv + h) * (2 * kC * kC + kC);
  for (int m = tid; m < pend; m += kThreads) out[2 * kC * kC + m] = gam[m];
  for (int x = tid; x < (pend - pstart) * kC; x += kThreads) {
    const int i = pstart + x / kC, m = x % kC;
    if (m > i) continue;
    const float d = expf(gam[i] - gam[m]);
    if (m < i) out[i * kC + m] = __fmul_rn(Dot16Aligned(kc + i * kst, kc + m * kst, dk), d);
    out[kC * kC + i * kC + m] = __fmul_rn(Dot16Aligned(qc + i * kst, kc + m * kst, dk), d);
  }
}

__global__ void __launch_bounds__(kThreads* kMaxGroups) GdnChunkKernel(GdnCoreArgs a, DevGdnState st, int pending0) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  extern __shared__ float sm[];
  const int dk = a.dk, dv = a.dv, hv = a.hv, h = blockIdx.x, kh = h / (a.hv / a.hk);
  const int groups = static_cast<int>(blockDim.x) / kThreads, threads = static_cast<int>(blockDim.x);
  const Layout L(dk, groups);
  const int W = L.w;  // the block's value columns
  // Thread tid: column cl = 32 · group + lane of the block's slice; warp w8 of its group.
  const int tid = threadIdx.x, lane = tid % 32, w8 = (tid / 32) % kWarps, cl = (tid / kThreads) * kGroupCols + lane;
  const int j0 = blockIdx.y * W, j = j0 + cl;
  const bool col = j < dv;
  float *kc = sm + L.off_k, *qc = sm + L.off_q, *Ss = sm + L.off_s, *Vn = sm + L.off_vn, *skv = sm + L.off_sk,
        *sqv = sm + L.off_sq, *vv = sm + L.off_v, *Ckk = sm + L.off_ckk, *Cqk = sm + L.off_cqk, *gam = sm + L.off_gam,
        *ee = sm + L.off_e, *bet = sm + L.off_beta, *dl = sm + L.off_d, *inv = sm + L.off_inv;
  const int64_t conv_dim = 2LL * a.hk * dk + int64_t{hv} * dv;
  float* S = st.S + int64_t{h} * dk * dv;

  // The state's columns of this slice, and the open chunk's earlier rows.
#pragma unroll 4
  for (int x = tid; x < dk * W; x += threads) {
    const int r = x / W, c = x % W;
    Ss[x] = j0 + c < dv ? S[int64_t{r} * dv + j0 + c] : 0.0f;
  }
  const int p0 = a.pending_dev ? *a.pending_dev : pending0;
  for (int x = tid; x < p0 * dk; x += threads) {
    const int m = x / dk, r = x % dk;
    kc[m * L.kst + r] = st.pk[(int64_t{m} * hv + h) * dk + r];
  }
  for (int x = tid; x < p0 * W; x += threads) {
    const int m = x / W, c = x % W;
    Vn[x] = j0 + c < dv ? st.pvn[(int64_t{m} * hv + h) * dv + j0 + c] : 0.0f;
  }
  for (int m = tid; m < p0; m += threads) gam[m] = st.pgam[m * hv + h];
  __syncthreads();

  int t0 = 0, pstart = p0;  // first token of this chunk's new rows, and its chunk row
  while (t0 < a.n) {
    const int pend = min(kC, pstart + (a.n - t0));
    const int rows = pend - pstart;
    // 1. The rows' q and k normalised, their gates, values and coefficients (GdnCoefKernel).
    const int c = t0 == 0 ? 0 : 1 + (t0 - (kC - p0)) / kC;
    const float* coef = a.scratch + (int64_t{c} * hv + h) * (2 * kC * kC + kC);
    NormRows(a, kh, t0, pstart, pend, L.kst, qc, kc, inv);
    for (int i = pstart + tid; i < pend; i += threads) {
      bet[i] = a.beta[int64_t{t0 + i - pstart} * hv + h];
      gam[i] = coef[2 * kC * kC + i];
      ee[i] = expf(gam[i]);
    }
#pragma unroll 4
    for (int x = tid; x < rows * W; x += threads) {
      const int i = pstart + x / W, cc = x % W;
      vv[i * W + cc] = j0 + cc < dv ? a.qkv[int64_t{t0 + i - pstart} * conv_dim + 2LL * a.hk * dk + int64_t{h} * dv + j0 + cc]
                                    : 0.0f;
    }
#pragma unroll 4
    for (int x = tid; x < rows * kC; x += threads) {
      const int i = pstart + x / kC, m = x % kC;
      if (m <= i) {
        if (m < i) Ckk[i * kC + m] = coef[i * kC + m];
        Cqk[i * kC + m] = coef[kC * kC + i * kC + m];
      }
    }
    __syncthreads();
    // 3. Sᵀk_i and Sᵀq_i for the new rows, eight rows per pass for independent chains; the rows'
    // elements read four at a time (each chain still adds its terms r = 0, 1, ... in order).
    // Rows past pend are computed too, from whatever the rows after them hold (inside the shared
    // memory: q / k are followed by the state), and never stored — no predicate in the loop.
    constexpr int kR3 = 8;
    const int dk4 = dk / 4 * 4;
    for (int i = pstart + w8 * kR3; i < pend; i += kWarps * kR3) {
      float sk[kR3], sq[kR3];
#pragma unroll
      for (int u = 0; u < kR3; ++u) sk[u] = sq[u] = 0.0f;
      const int nr = min(kR3, pend - i);
      const float* krow = kc + i * L.kst;
      const float* qrow = qc + i * L.kst;
      for (int r = 0; r < dk4; r += 4) {
        const float s0 = Ss[r * W + cl], s1 = Ss[(r + 1) * W + cl], s2 = Ss[(r + 2) * W + cl], s3 = Ss[(r + 3) * W + cl];
#pragma unroll
        for (int u = 0; u < kR3; ++u) {
          const float4 k4 = *reinterpret_cast<const float4*>(krow + u * L.kst + r);
          const float4 q4 = *reinterpret_cast<const float4*>(qrow + u * L.kst + r);
          sk[u] = __fmaf_rn(s0, k4.x, sk[u]);
          sq[u] = __fmaf_rn(s0, q4.x, sq[u]);
          sk[u] = __fmaf_rn(s1, k4.y, sk[u]);
          sq[u] = __fmaf_rn(s1, q4.y, sq[u]);
          sk[u] = __fmaf_rn(s2, k4.z, sk[u]);
          sq[u] = __fmaf_rn(s2, q4.z, sq[u]);
          sk[u] = __fmaf_rn(s3, k4.w, sk[u]);
          sq[u] = __fmaf_rn(s3, q4.w, sq[u]);
        }
      }
      for (int r = dk4; r < dk; ++r) {
        const float s = Ss[r * W + cl];
#pragma unroll
        for (int u = 0; u < kR3; ++u) {
          sk[u] = __fmaf_rn(s, krow[u * L.kst + r], sk[u]);
          sq[u] = __fmaf_rn(s, qrow[u * L.kst + r], sq[u]);
        }
      }
#pragma unroll
      for (int u = 0; u < kR3; ++u) {
        if (u < nr) {
          skv[(i + u) * W + cl] = sk[u];
          sqv[(i + u) * W + cl] = sq[u];
        }
      }
    }
    __syncthreads();
    // 4. The triangular recurrence: Vn_i = β (v − e Sᵀk − Σ_{m<i} Ckk[i][m] Vn_m), as a
    // wavefront: warp w keeps the running w_i of rows i = w, w + 8, ... in registers; at step m
    // row m is complete (its owner writes Vn_m), then every later row subtracts its term m.
    // Each row still subtracts its terms one by one in ascending m, as the token kernel does.
    float wr[kC / kWarps];
#pragma unroll
    for (int u = 0; u < kC / kWarps; ++u) {
      const int i = w8 + kWarps * u;
      wr[u] = i >= pstart && i < pend ? __fsub_rn(vv[i * W + cl], __fmul_rn(ee[i], skv[i * W + cl])) : 0.0f;
    }
    // Ckk[i][m .. m + 3] read as one float4 a row every fourth step (Ckk is not written here).
    for (int m4 = 0; m4 < pend; m4 += 4) {
      float4 ck[kC / kWarps];
#pragma unroll
      for (int u = 0; u < kC / kWarps; ++u) {
        const int i = w8 + kWarps * u;
        if (i > m4 && i >= pstart && i < pend) ck[u] = *reinterpret_cast<const float4*>(Ckk + i * kC + m4);
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int m = m4 + e;
        if (m >= pend) break;  // uniform over the block
        if (m >= pstart) {     // uniform over the block
          if (m % kWarps == w8) {
#pragma unroll
            for (int u = 0; u < kC / kWarps; ++u)
              if (w8 + kWarps * u == m) Vn[m * W + cl] = __fmul_rn(bet[m], wr[u]);
          }
          __syncthreads();
        }
        const float vm = Vn[m * W + cl];
#pragma unroll
        for (int u = 0; u < kC / kWarps; ++u) {
          const int i = w8 + kWarps * u;
          const float c = e == 0 ? ck[u].x : e == 1 ? ck[u].y : e == 2 ? ck[u].z : ck[u].w;
          if (i > m && i >= pstart && i < pend) wr[u] = __fmaf_rn(-c, vm, wr[u]);
        }
      }
    }
    __syncthreads();
    // 5. Outputs: O_i = e Sᵀq + Σ_{m<=i} Cqk[i][m] Vn_m, the warp's rows i = w, w + 8, ... side
    // by side (each its own chain in ascending m).
    {
      constexpr int kR5 = kC / kWarps;
      float o[kR5];
      int last = -1;
#pragma unroll
      for (int u = 0; u < kR5; ++u) {
        const int i = w8 + kWarps * u;
        o[u] = i >= pstart && i < pend ? __fmul_rn(ee[i], sqv[i * W + cl]) : 0.0f;
        if (i < pend) last = i;
      }
      for (int m4 = 0; m4 <= last; m4 += 4) {  // Cqk[i][m4 .. m4 + 3] as one float4
        float vm[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) vm[e] = m4 + e <= last ? Vn[(m4 + e) * W + cl] : 0.0f;
#pragma unroll
        for (int u = 0; u < kR5; ++u) {
          const int i = w8 + kWarps * u;
          if (m4 <= i && i >= pstart && i < pend) {
            const float4 c = *reinterpret_cast<const float4*>(Cqk + i * kC + m4);
            o[u] = __fmaf_rn(c.x, vm[0], o[u]);
            if (m4 + 1 <= i) o[u] = __fmaf_rn(c.y, vm[1], o[u]);
            if (m4 + 2 <= i) o[u] = __fmaf_rn(c.z, vm[2], o[u]);
            if (m4 + 3 <= i) o[u] = __fmaf_rn(c.w, vm[3], o[u]);
          }
        }
      }
#pragma unroll
      for (int u = 0; u < kR5; ++u) {
        const int i = w8 + kWarps * u;
        if (col && i >= pstart && i < pend) a.out[(int64_t{t0 + i - pstart} * hv + h) * dv + j] = RoundAct(o[u], a.bf16);
      }
    }
    if (pend == kC) {
      // 6. The chunk is complete: S = e^{gam_last} S + Σ_m e^{gam_last − gam_m} k_m Vn_mᵀ. The
      // rounded products kd_m = k_m · e^{gam_last − gam_m} are the same for every column: made
      // once into qc's rows (step 3 is done with q), then four state rows of a warp side by side.
      for (int m = tid; m < kC; m += threads) dl[m] = expf(gam[kC - 1] - gam[m]);
      __syncthreads();
      float* kd = qc;
      const int row4 = L.kst / 4;
      for (int x = tid; x < kC * row4; x += threads) {  // padding columns too (never read back)
        const int m = x / row4, r = 4 * (x % row4);
        const float4 k4 = *reinterpret_cast<const float4*>(kc + m * L.kst + r);
        const float d = dl[m];
        *reinterpret_cast<float4*>(kd + m * L.kst + r) =
            make_float4(__fmul_rn(k4.x, d), __fmul_rn(k4.y, d), __fmul_rn(k4.z, d), __fmul_rn(k4.w, d));
      }
      __syncthreads();
      const float e_last = expf(gam[kC - 1]);
      constexpr int kR6 = 4;
      for (int r = w8 * kR6; r < dk; r += kWarps * kR6) {
        // State rows past dk (dk % 4 != 0) read the shared memory after the state and are not stored.
        float sacc[kR6];
#pragma unroll
        for (int u = 0; u < kR6; ++u) sacc[u] = __fmul_rn(Ss[(r + u) * W + cl], e_last);
        for (int m = 0; m < kC; ++m) {  // kd_m[r .. r + 3] as one float4 (the row's padding past dk unused)
          const float vm = Vn[m * W + cl];
          const float4 k4 = *reinterpret_cast<const float4*>(kd + m * L.kst + r);
          sacc[0] = __fmaf_rn(k4.x, vm, sacc[0]);
          sacc[1] = __fmaf_rn(k4.y, vm, sacc[1]);
          sacc[2] = __fmaf_rn(k4.z, vm, sacc[2]);
          sacc[3] = __fmaf_rn(k4.w, vm, sacc[3]);
        }
#pragma unroll
        for (int u = 0; u < kR6; ++u)
          if (r + u < dk) Ss[(r + u) * W + cl] = sacc[u];
      }
    } else {
      // The sequence ends inside this chunk: its rows so far go back to the state.
      for (int x = tid; x < pend * dk; x += threads) {
        const int m = x / dk, r = x % dk;
        if (blockIdx.y == 0) st.pk[(int64_t{m} * hv + h) * dk + r] = kc[m * L.kst + r];
      }
      for (int x = tid; x < pend * W; x += threads) {
        const int m = x / W, c = x % W;
        if (j0 + c < dv) st.pvn[(int64_t{m} * hv + h) * dv + j0 + c] = Vn[x];
      }
      if (blockIdx.y == 0)
        for (int m = tid; m < pend; m += threads) st.pgam[m * hv + h] = gam[m];
    }
    __syncthreads();
    t0 += rows;
    pstart = 0;
  }
  for (int x = tid; x < dk * W; x += threads) {
    const int r = x / W, c = x % W;
    if (j0 + c < dv) S[int64_t{r} * dv + j0 + c] = Ss[x];
  }
}

}  // namespace

int64_t GdnChunkSharedBytes(int dk) { return int64_t{Layout(dk, 1).total} * 4; }

int GdnChunkGroups(int hv, int dk, int dv) {
  static const int sms = [] {
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
      return 0;
    }
    return n;
  }();
  const int64_t blocks = int64_t{hv} * ((dv + kGroupCols - 1) / kGroupCols);
  const bool fits = int64_t{Layout(dk, kMaxGroups).total} * 4 <= kGdnMaxSharedBytes;
  return sms > 0 && blocks > sms && dv > kGroupCols && fits ? kMaxGroups : 1;
}


int64_t GdnChunkScratchFloats(int64_t n, int hk, int hv, int dk, int dv) {
  const int64_t simt = MaxChunks(n) * hv * (2 * kC * kC + kC);
  return dk <= kGdnTcMaxDk ? std::max(simt, GdnTcChunkScratchFloats(n, hk, hv, dk, dv)) : simt;
}

Status GdnCoreChunked(const GdnCoreArgs& a, void* stream) {
  static_assert(kGdnChunk == 64, "the chunk kernels' layouts assume 64-row chunks");
  if (a.scratch == nullptr) return InvalidArgument("cuda GdnCore (chunked): no scratch for the coefficients");
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const int groups = GdnChunkGroups(a.hv, a.dk, a.dv);
  const int64_t coef_smem = int64_t{2 * kC * CoefRowFloats(a.dk) + 3 * kC} * 4, smem = int64_t{Layout(a.dk, groups).total} * 4;
  cudaError_t err = cudaFuncSetAttribute(GdnCoefKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(coef_smem));
  if (err == cudaSuccess) {
    err = cudaFuncSetAttribute(GdnChunkKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  }
  if (err != cudaSuccess) return Internal(std::string("cuda GdnCore (chunked): shared memory: ") + cudaGetErrorString(err));
  LaunchPdl(GdnCoefKernel, dim3(static_cast<unsigned>(MaxChunks(a.n)), a.hv), kThreads, coef_smem, s, a, *a.state,
            a.state->pending);
  const int cols = kGroupCols * groups;
  const dim3 grid(a.hv, (a.dv + cols - 1) / cols);
  LaunchPdl(GdnChunkKernel, grid, kThreads * groups, smem, s, a, *a.state, a.state->pending);
  return Launched("GdnCore (chunked)");
}

}  // namespace graft::cuda

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
// Grid: (value head, slice of kSlice value columns); 256 threads = 8 warps, lane = column.
#include <cuda_runtime.h>

#include <string>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/gdn.h"

namespace graft::cuda {
namespace {

constexpr int kSlice = 32;     // value columns per block (one per lane)
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kC = kGdnChunk;  // 64

// Shared memory carve-up (floats). Row strides of q/k are padded by one so that lanes reading
// different rows at the same element hit different banks.
struct Layout {
  int kst, off_k, off_q, off_s, off_vn, off_sk, off_sq, off_v, off_ckk, off_cqk, off_gam, off_e, off_beta, off_d,
      off_inv, total;
  __host__ __device__ explicit Layout(int dk) {
    kst = dk + 1;
    off_k = 0;
    off_q = off_k + kC * kst;
    off_s = off_q + kC * kst;
    off_vn = off_s + dk * kSlice;
    off_sk = off_vn + kC * kSlice;
    off_sq = off_sk + kC * kSlice;
    off_v = off_sq + kC * kSlice;
    off_ckk = off_v + kC * kSlice;
    off_cqk = off_ckk + kC * kC;
    off_gam = off_cqk + kC * kC;
    off_e = off_gam + kC;
    off_beta = off_e + kC;
    off_d = off_beta + kC;
    off_inv = off_d + kC;
    total = off_inv + 2 * kC;
  }
};

// Chunk c's rows: the first chunk continues the open one (rows p0.. of it), the others start
// at row 0; tokens [t0, t0 + pend - pstart) of the call. False when the call has no chunk c.
__device__ __forceinline__ bool ChunkRows(int c, int p0, int n, int& t0, int& pstart, int& pend) {
  t0 = c == 0 ? 0 : (kC - p0) + (c - 1) * kC;
  pstart = c == 0 ? p0 : 0;
  if (t0 >= n) return false;
  pend = min(kC, pstart + (n - t0));
  return true;
}

// Normalised q and k of chunk rows [pstart, pend) into qc, kc (row stride kst), as the token
// kernel computes them; inv [2 * kC] is scratch.
__device__ void NormRows(const GdnCoreArgs& a, int kh, int t0, int pstart, int pend, int kst, float* qc, float* kc,
                         float* inv) {
  const int dk = a.dk, tid = threadIdx.x, rows = pend - pstart;
  const int64_t conv_dim = 2LL * a.hk * dk + int64_t{a.hv} * a.dv;
  const float q_scale = 1.0f / sqrtf(static_cast<float>(dk));
  // Σ x² by a half-warp per vector: lane l runs Dot16's partial sum l (elements l, l + 16, ...,
  // then its tail element), shuffles join them in Dot16's tree — Dot16's bits, loads coalesced.
  const int lane16 = tid % 16;
  const unsigned mask = 0xffffu << (16 * ((tid / 16) % 2));
  for (int x = tid / 16; x < 2 * rows; x += kThreads / 16) {
    const int i = x / 2, which = x % 2;
    const float* row = a.qkv + int64_t{t0 + i} * conv_dim;
    const float* raw = which == 0 ? row + kh * dk : row + int64_t{a.hk} * dk + kh * dk;
    const int full = dk / 16 * 16;
    float acc = 0.0f;
    for (int e = lane16; e < full; e += 16) acc = __fadd_rn(acc, __fmul_rn(raw[e], raw[e]));
    if (full + lane16 < dk) acc = __fadd_rn(acc, __fmul_rn(raw[full + lane16], raw[full + lane16]));
    for (int sh = 8; sh > 0; sh >>= 1) acc = __fadd_rn(acc, __shfl_down_sync(mask, acc, sh, 16));
    if (lane16 == 0) inv[2 * (pstart + i) + which] = 1.0f / sqrtf(__fadd_rn(acc, 1e-6f));
  }
  __syncthreads();
  for (int x = tid; x < rows * dk; x += kThreads) {
    const int i = pstart + x / dk, r = x % dk;
    const float* row = a.qkv + int64_t{t0 + i - pstart} * conv_dim;
    qc[i * kst + r] = __fmul_rn(__fmul_rn(row[kh * dk + r], inv[2 * i]), q_scale);
    kc[i * kst + r] = __fmul_rn(__fmul_rn(row[int64_t{a.hk} * dk + kh * dk + r], inv[2 * i + 1]), 1.0f);
  }
}

// The parts of a chunk that do not depend on the state S, for every chunk of the call at once
// (block = (chunk, value head)): the cumulative log-decay gam and the coefficient matrices
//   Ckk[i][m] = (k_i·k_m) e^{gam_i − gam_m} (m < i),  Cqk[i][m] = (q_i·k_m) e^{gam_i − gam_m} (m <= i)
// for the chunk's new rows i, into a.scratch (GdnChunkScratchFloats).
__global__ void __launch_bounds__(kThreads) GdnCoefKernel(GdnCoreArgs a, DevGdnState st, int pending0) {
  extern __shared__ float sm[];
  const int dk = a.dk, hv = a.hv, h = blockIdx.y, c = blockIdx.x, kh = h / (a.hv / a.hk), tid = threadIdx.x;
  const int kst = dk + 1;
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
    if (m < i) out[i * kC + m] = __fmul_rn(Dot16(kc + i * kst, kc + m * kst, dk), d);
    out[kC * kC + i * kC + m] = __fmul_rn(Dot16(qc + i * kst, kc + m * kst, dk), d);
  }
}

__global__ void __launch_bounds__(kThreads) GdnChunkKernel(GdnCoreArgs a, DevGdnState st, int pending0) {
  extern __shared__ float sm[];
  const int dk = a.dk, dv = a.dv, hv = a.hv, h = blockIdx.x, kh = h / (a.hv / a.hk);
  const int j0 = blockIdx.y * kSlice, lane = threadIdx.x % 32, warp = threadIdx.x / 32, tid = threadIdx.x;
  const int j = j0 + lane;
  const bool col = j < dv;
  const Layout L(dk);
  float *kc = sm + L.off_k, *qc = sm + L.off_q, *Ss = sm + L.off_s, *Vn = sm + L.off_vn, *skv = sm + L.off_sk,
        *sqv = sm + L.off_sq, *vv = sm + L.off_v, *Ckk = sm + L.off_ckk, *Cqk = sm + L.off_cqk, *gam = sm + L.off_gam,
        *ee = sm + L.off_e, *bet = sm + L.off_beta, *dl = sm + L.off_d, *inv = sm + L.off_inv;
  const int64_t conv_dim = 2LL * a.hk * dk + int64_t{hv} * dv;
  float* S = st.S + int64_t{h} * dk * dv;

  // The state's columns of this slice, and the open chunk's earlier rows.
  for (int x = tid; x < dk * kSlice; x += kThreads) {
    const int r = x / kSlice, c = x % kSlice;
    Ss[x] = j0 + c < dv ? S[int64_t{r} * dv + j0 + c] : 0.0f;
  }
  const int p0 = a.pending_dev ? *a.pending_dev : pending0;
  for (int x = tid; x < p0 * dk; x += kThreads) {
    const int m = x / dk, r = x % dk;
    kc[m * L.kst + r] = st.pk[(int64_t{m} * hv + h) * dk + r];
  }
  for (int x = tid; x < p0 * kSlice; x += kThreads) {
    const int m = x / kSlice, c = x % kSlice;
    Vn[x] = j0 + c < dv ? st.pvn[(int64_t{m} * hv + h) * dv + j0 + c] : 0.0f;
  }
  for (int m = tid; m < p0; m += kThreads) gam[m] = st.pgam[m * hv + h];
  __syncthreads();

  int t0 = 0, pstart = p0;  // first token of this chunk's new rows, and its chunk row
  while (t0 < a.n) {
    const int pend = min(kC, pstart + (a.n - t0));
    const int rows = pend - pstart;
    // 1. The rows' q and k normalised, their gates, values and coefficients (GdnCoefKernel).
    const int c = t0 == 0 ? 0 : 1 + (t0 - (kC - p0)) / kC;
    const float* coef = a.scratch + (int64_t{c} * hv + h) * (2 * kC * kC + kC);
    NormRows(a, kh, t0, pstart, pend, L.kst, qc, kc, inv);
    for (int i = pstart + tid; i < pend; i += kThreads) {
      bet[i] = a.beta[int64_t{t0 + i - pstart} * hv + h];
      gam[i] = coef[2 * kC * kC + i];
      ee[i] = expf(gam[i]);
    }
    for (int x = tid; x < rows * kSlice; x += kThreads) {
      const int i = pstart + x / kSlice, cc = x % kSlice;
      vv[i * kSlice + cc] = j0 + cc < dv ? a.qkv[int64_t{t0 + i - pstart} * conv_dim + 2LL * a.hk * dk + int64_t{h} * dv + j0 + cc]
                                         : 0.0f;
    }
    for (int x = tid; x < rows * kC; x += kThreads) {
      const int i = pstart + x / kC, m = x % kC;
      if (m > i) continue;
      if (m < i) Ckk[i * kC + m] = coef[i * kC + m];
      Cqk[i * kC + m] = coef[kC * kC + i * kC + m];
    }
    __syncthreads();
    // 3. Sᵀk_i and Sᵀq_i for the new rows, four rows per pass for independent chains.
    for (int i = pstart + warp * 4; i < pend; i += kWarps * 4) {
      float sk[4] = {0.0f, 0.0f, 0.0f, 0.0f}, sq[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      const int nr = min(4, pend - i);
      for (int r = 0; r < dk; ++r) {
        const float s = Ss[r * kSlice + lane];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          if (u < nr) {
            sk[u] = __fadd_rn(sk[u], __fmul_rn(s, kc[(i + u) * L.kst + r]));
            sq[u] = __fadd_rn(sq[u], __fmul_rn(s, qc[(i + u) * L.kst + r]));
          }
        }
      }
      for (int u = 0; u < nr; ++u) {
        skv[(i + u) * kSlice + lane] = sk[u];
        sqv[(i + u) * kSlice + lane] = sq[u];
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
      const int i = warp + kWarps * u;
      wr[u] = i >= pstart && i < pend ? __fsub_rn(vv[i * kSlice + lane], __fmul_rn(ee[i], skv[i * kSlice + lane])) : 0.0f;
    }
    for (int m = 0; m < pend; ++m) {
      if (m >= pstart) {  // uniform over the block
        if (m % kWarps == warp) {
#pragma unroll
          for (int u = 0; u < kC / kWarps; ++u)
            if (warp + kWarps * u == m) Vn[m * kSlice + lane] = __fmul_rn(bet[m], wr[u]);
        }
        __syncthreads();
      }
      const float vm = Vn[m * kSlice + lane];
#pragma unroll
      for (int u = 0; u < kC / kWarps; ++u) {
        const int i = warp + kWarps * u;
        if (i > m && i >= pstart && i < pend) wr[u] = __fsub_rn(wr[u], __fmul_rn(Ckk[i * kC + m], vm));
      }
    }
    __syncthreads();
    // 5. Outputs: O_i = e Sᵀq + Σ_{m<=i} Cqk[i][m] Vn_m.
    for (int i = pstart + warp; i < pend; i += kWarps) {
      float o = __fmul_rn(ee[i], sqv[i * kSlice + lane]);
      for (int m = 0; m <= i; ++m) o = __fadd_rn(o, __fmul_rn(Cqk[i * kC + m], Vn[m * kSlice + lane]));
      if (col) a.out[(int64_t{t0 + i - pstart} * hv + h) * dv + j] = RoundAct(o, a.bf16);
    }
    if (pend == kC) {
      // 6. The chunk is complete: S = e^{gam_last} S + Σ_m e^{gam_last − gam_m} k_m Vn_mᵀ.
      for (int m = tid; m < kC; m += kThreads) dl[m] = expf(gam[kC - 1] - gam[m]);
      __syncthreads();
      const float e_last = expf(gam[kC - 1]);
      for (int r = warp; r < dk; r += kWarps) {
        float s = __fmul_rn(Ss[r * kSlice + lane], e_last);
        for (int m = 0; m < kC; ++m) s = __fadd_rn(s, __fmul_rn(__fmul_rn(kc[m * L.kst + r], dl[m]), Vn[m * kSlice + lane]));
        Ss[r * kSlice + lane] = s;
      }
    } else {
      // The sequence ends inside this chunk: its rows so far go back to the state.
      for (int x = tid; x < pend * dk; x += kThreads) {
        const int m = x / dk, r = x % dk;
        if (blockIdx.y == 0) st.pk[(int64_t{m} * hv + h) * dk + r] = kc[m * L.kst + r];
      }
      for (int x = tid; x < pend * kSlice; x += kThreads) {
        const int m = x / kSlice, c = x % kSlice;
        if (j0 + c < dv) st.pvn[(int64_t{m} * hv + h) * dv + j0 + c] = Vn[x];
      }
      if (blockIdx.y == 0)
        for (int m = tid; m < pend; m += kThreads) st.pgam[m * hv + h] = gam[m];
    }
    __syncthreads();
    t0 += rows;
    pstart = 0;
  }
  for (int x = tid; x < dk * kSlice; x += kThreads) {
    const int r = x / kSlice, c = x % kSlice;
    if (j0 + c < dv) S[int64_t{r} * dv + j0 + c] = Ss[x];
  }
}

}  // namespace

int64_t GdnChunkSharedBytes(int dk) { return int64_t{Layout(dk).total} * 4; }

// Chunks a call of n tokens can touch, whatever the open chunk's row count.
static int64_t MaxChunks(int64_t n) { return (n + kC - 1) / kC + 1; }

int64_t GdnChunkScratchFloats(int64_t n, int hv) { return MaxChunks(n) * hv * (2 * kC * kC + kC); }

Status GdnCoreChunked(const GdnCoreArgs& a, void* stream) {
  static_assert(kGdnChunk == 64, "the chunk kernels' layouts assume 64-row chunks");
  if (a.scratch == nullptr) return InvalidArgument("cuda GdnCore (chunked): no scratch for the coefficients");
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const int64_t coef_smem = int64_t{2 * kC * (a.dk + 1) + 3 * kC} * 4, smem = GdnChunkSharedBytes(a.dk);
  cudaError_t err = cudaFuncSetAttribute(GdnCoefKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(coef_smem));
  if (err == cudaSuccess) {
    err = cudaFuncSetAttribute(GdnChunkKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  }
  if (err != cudaSuccess) return Internal(std::string("cuda GdnCore (chunked): shared memory: ") + cudaGetErrorString(err));
  GdnCoefKernel<<<dim3(static_cast<unsigned>(MaxChunks(a.n)), a.hv), kThreads, coef_smem, s>>>(a, *a.state,
                                                                                               a.state->pending);
  const dim3 grid(a.hv, (a.dv + kSlice - 1) / kSlice);
  GdnChunkKernel<<<grid, kThreads, smem, s>>>(a, *a.state, a.state->pending);
  err = cudaGetLastError();
  if (err != cudaSuccess) return Internal(std::string("cuda GdnCore (chunked) launch: ") + cudaGetErrorString(err));
  return Status::Ok();
}

}  // namespace graft::cuda

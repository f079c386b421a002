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
  int kst, off_k, off_q, off_s, off_vn, off_sk, off_sq, off_v, off_ckk, off_cqk, off_gam, off_g, off_e, off_beta, off_d,
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
    off_g = off_gam + kC;
    off_e = off_g + kC;
    off_beta = off_e + kC;
    off_d = off_beta + kC;
    off_inv = off_d + kC;
    total = off_inv + 2 * kC;
  }
};

__global__ void __launch_bounds__(kThreads) GdnChunkKernel(GdnCoreArgs a, DevGdnState st, int pending0) {
  extern __shared__ float sm[];
  const int dk = a.dk, dv = a.dv, hv = a.hv, h = blockIdx.x, kh = h / (a.hv / a.hk);
  const int j0 = blockIdx.y * kSlice, lane = threadIdx.x % 32, warp = threadIdx.x / 32, tid = threadIdx.x;
  const int j = j0 + lane;
  const bool col = j < dv;
  const Layout L(dk);
  float *kc = sm + L.off_k, *qc = sm + L.off_q, *Ss = sm + L.off_s, *Vn = sm + L.off_vn, *skv = sm + L.off_sk,
        *sqv = sm + L.off_sq, *vv = sm + L.off_v, *Ckk = sm + L.off_ckk, *Cqk = sm + L.off_cqk, *gam = sm + L.off_gam,
        *gg = sm + L.off_g, *ee = sm + L.off_e, *bet = sm + L.off_beta, *dl = sm + L.off_d, *inv = sm + L.off_inv;
  const int64_t conv_dim = 2LL * a.hk * dk + int64_t{hv} * dv;
  const float q_scale = 1.0f / sqrtf(static_cast<float>(dk));
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
    // 1. Norms of the new rows' q and k (one thread each, as the token kernel's thread 0); the
    // rows' gates and values fetched in parallel, so the in-order steps below read shared memory.
    for (int x = tid; x < 2 * rows; x += kThreads) {
      const int i = x / 2, which = x % 2;
      const float* row = a.qkv + int64_t{t0 + i} * conv_dim;
      const float* raw = which == 0 ? row + kh * dk : row + int64_t{a.hk} * dk + kh * dk;
      inv[2 * (pstart + i) + which] = 1.0f / sqrtf(__fadd_rn(Dot16(raw, raw, dk), 1e-6f));
    }
    for (int i = pstart + tid; i < pend; i += kThreads) {
      const int64_t t = t0 + i - pstart;
      gg[i] = a.g[t * hv + h];
      bet[i] = a.beta[t * hv + h];
    }
    for (int x = tid; x < rows * kSlice; x += kThreads) {
      const int i = pstart + x / kSlice, c = x % kSlice;
      vv[i * kSlice + c] = j0 + c < dv ? a.qkv[int64_t{t0 + i - pstart} * conv_dim + 2LL * a.hk * dk + int64_t{h} * dv + j0 + c]
                                       : 0.0f;
    }
    __syncthreads();
    if (tid == 0) {
      for (int i = pstart; i < pend; ++i) gam[i] = __fadd_rn(i == 0 ? 0.0f : gam[i - 1], gg[i]);
    }
    __syncthreads();
    for (int x = tid; x < rows * dk; x += kThreads) {
      const int i = pstart + x / dk, r = x % dk;
      const float* row = a.qkv + int64_t{t0 + i - pstart} * conv_dim;
      qc[i * L.kst + r] = __fmul_rn(__fmul_rn(row[kh * dk + r], inv[2 * i]), q_scale);
      kc[i * L.kst + r] = __fmul_rn(__fmul_rn(row[int64_t{a.hk} * dk + kh * dk + r], inv[2 * i + 1]), 1.0f);
    }
    for (int i = pstart + tid; i < pend; i += kThreads) ee[i] = expf(gam[i]);
    __syncthreads();
    // 2. Coefficients: Ckk[i][m] = (k_i·k_m) e^{gam_i − gam_m} (m < i), Cqk likewise with q_i (m <= i).
    for (int x = tid; x < rows * kC; x += kThreads) {
      const int i = pstart + x / kC, m = x % kC;
      if (m > i) continue;
      const float d = expf(gam[i] - gam[m]);
      if (m < i) Ckk[i * kC + m] = __fmul_rn(Dot16(kc + i * L.kst, kc + m * L.kst, dk), d);
      Cqk[i * kC + m] = __fmul_rn(Dot16(qc + i * L.kst, kc + m * L.kst, dk), d);
    }
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
    // 4. The triangular recurrence: Vn_i = β (v − e Sᵀk − Σ_{m<i} Ckk[i][m] Vn_m), rows in order.
    if (warp == 0) {
      for (int i = pstart; i < pend; ++i) {
        float w = __fsub_rn(vv[i * kSlice + lane], __fmul_rn(ee[i], skv[i * kSlice + lane]));
        for (int m = 0; m < i; ++m) w = __fsub_rn(w, __fmul_rn(Ckk[i * kC + m], Vn[m * kSlice + lane]));
        Vn[i * kSlice + lane] = __fmul_rn(bet[i], w);
        __syncwarp();
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

Status GdnCoreChunked(const GdnCoreArgs& a, void* stream) {
  const int64_t smem = GdnChunkSharedBytes(a.dk);
  static_assert(kGdnChunk == 64, "the chunk kernel's layout assumes 64-row chunks");
  cudaError_t err = cudaFuncSetAttribute(GdnChunkKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem));
  if (err != cudaSuccess) return Internal(std::string("cuda GdnCore (chunked): shared memory: ") + cudaGetErrorString(err));
  const dim3 grid(a.hv, (a.dv + kSlice - 1) / kSlice);
  GdnChunkKernel<<<grid, kThreads, smem, static_cast<cudaStream_t>(stream)>>>(a, *a.state, a.state->pending);
  err = cudaGetLastError();
  if (err != cudaSuccess) return Internal(std::string("cuda GdnCore (chunked) launch: ") + cudaGetErrorString(err));
  return Status::Ok();
}

}  // namespace graft::cuda

#include <cuda_runtime.h>

#include <algorithm>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/gdn.h"
#include "backend/cuda/gdn_kernels.cuh"
#include "backend/cuda/launched.h"
#include "backend/cuda/pdl.cuh"

namespace graft::cuda {
namespace {

using gdn_kernels::GatedNormed;
using gdn_kernels::GatedNormInv;
using gdn_kernels::PrefetchHeadState;
using gdn_kernels::SeqArgs;
using gdn_kernels::WarpSumSquares16;

constexpr int kMaxConvK = 8;
constexpr int kMaxDim = 256;

// One thread per channel walks the n tokens in order.
__device__ void ConvTokens(const float* x, int64_t x_stride, int n, int channels, const DevWeight& w, float* conv_state,
                           bool bf16, float* out) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  const int K = static_cast<int>(w.cols), hist = K - 1;
  float win[kMaxConvK];
  for (int j = 0; j < hist; ++j) win[j] = conv_state[int64_t{c} * hist + j];
  for (int t = 0; t < n; ++t) {
    win[hist] = x[int64_t{t} * x_stride + c];
    float acc = 0.0f;
    for (int j = 0; j < K; ++j) acc = __fadd_rn(acc, __fmul_rn(WeightAt(w, int64_t{c} * K + j), win[j]));
    out[int64_t{t} * channels + c] = RoundAct(SiluF(RoundAct(acc, bf16)), bf16);
    for (int j = 0; j < hist; ++j) win[j] = win[j + 1];
  }
  for (int j = 0; j < hist; ++j) conv_state[int64_t{c} * hist + j] = win[j];
}

__global__ void ConvKernel(const float* x, int64_t x_stride, int n, int channels, DevWeight w, float* conv_state,
                           bool bf16, float* out) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  ConvTokens(x, x_stride, n, channels, w, conv_state, bf16, out);
}

// Block column y: sequence y's rows, as ConvKernel.
__global__ void ConvSeqsKernel(const float* x, int64_t x_stride, const ConvSeq* seqs, int channels, DevWeight w,
                               bool bf16, float* out) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  const ConvSeq s = seqs[blockIdx.y];
  ConvTokens(x + int64_t{s.row0} * x_stride, x_stride, s.n, channels, w, s.conv_state, bf16,
             out + int64_t{s.row0} * channels);
}

// The same window sums as ConvKernel, all tokens at once: block (x, y) has channels
// [256 x, 256 x + 256) of the kConvRun tokens from kConvRun y, a thread a channel sliding its
// window along them (each input read once; the first window's older inputs from the previous
// run's rows or, before token 0, the old conv_state — ConvStateKernel, launched after, advances
// it).
constexpr int kConvRun = 32;
__device__ void ConvTokensRun(const float* x, int64_t x_stride, int n, int channels, const DevWeight& w,
                              const float* conv_state, bool bf16, float* out) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  const int t0 = blockIdx.y * kConvRun;
  if (c >= channels || t0 >= n) return;
  const int K = static_cast<int>(w.cols), hist = K - 1;
  // Every array index below is a compile-time one (unrolled to kMaxConvK with tests of K):
  // registers, not local memory.
  float wc[kMaxConvK], win[kMaxConvK];
  const float w_last = WeightAt(w, int64_t{c} * K + hist);  // the current input's weight
#pragma unroll
  for (int j = 0; j < kMaxConvK; ++j) {
    wc[j] = j < hist ? WeightAt(w, int64_t{c} * K + j) : 0.0f;
    const int s = t0 - hist + j;  // input position of window slot j; negative ones from the state
    win[j] = j >= hist ? 0.0f : s < 0 ? conv_state[int64_t{c} * hist + hist + s] : x[int64_t{s} * x_stride + c];
  }
  const int run = min(kConvRun, n - t0);
  float in[kConvRun];
#pragma unroll
  for (int u = 0; u < kConvRun; ++u) in[u] = u < run ? x[int64_t{t0 + u} * x_stride + c] : 0.0f;
#pragma unroll
  for (int u = 0; u < kConvRun; ++u) {
    if (u >= run) break;
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < kMaxConvK; ++j) {
      if (j < hist) acc = __fadd_rn(acc, __fmul_rn(wc[j], win[j]));
    }
    acc = __fadd_rn(acc, __fmul_rn(w_last, in[u]));
    out[int64_t{t0 + u} * channels + c] = RoundAct(SiluF(RoundAct(acc, bf16)), bf16);
#pragma unroll
    for (int j = 0; j < kMaxConvK; ++j) {
      if (j + 1 < hist) {
        win[j] = win[j + 1];
      } else if (j + 1 == hist) {
        win[j] = in[u];
      }
    }
  }
}

__global__ void ConvTokensKernel(const float* x, int64_t x_stride, int n, int channels, DevWeight w,
                                 const float* conv_state, bool bf16, float* out) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  ConvTokensRun(x, x_stride, n, channels, w, conv_state, bf16, out);
}

// conv_state [c, K-1] = the last K-1 inputs after n more tokens (one thread per channel).
__device__ void ConvStateAdvance(const float* x, int64_t x_stride, int n, int channels, int hist, float* conv_state) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  float win[kMaxConvK];
  for (int j = 0; j < hist; ++j) {
    const int s = n - hist + j;
    win[j] = s < 0 ? conv_state[int64_t{c} * hist + hist + s] : x[int64_t{s} * x_stride + c];
  }
  for (int j = 0; j < hist; ++j) conv_state[int64_t{c} * hist + j] = win[j];
}

__global__ void ConvStateKernel(const float* x, int64_t x_stride, int n, int channels, int hist, float* conv_state) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  ConvStateAdvance(x, x_stride, n, channels, hist, conv_state);
}

// The two kernels above for several pieces at once: block layer z is piece z (its rows from
// row0), its token runs past its own length idle.
__global__ void ConvTokensPiecesKernel(const float* x, int64_t x_stride, const ConvSeq* seqs, int channels, DevWeight w,
                                       bool bf16, float* out) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  const ConvSeq s = seqs[blockIdx.z];
  ConvTokensRun(x + int64_t{s.row0} * x_stride, x_stride, s.n, channels, w, s.conv_state, bf16,
                out + int64_t{s.row0} * channels);
}

__global__ void ConvStatePiecesKernel(const float* x, int64_t x_stride, const ConvSeq* seqs, int channels, int hist) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  const ConvSeq s = seqs[blockIdx.y];
  ConvStateAdvance(x + int64_t{s.row0} * x_stride, x_stride, s.n, channels, hist, s.conv_state);
}

// The token kernel's work for value head h of one sequence (its rows and state in `a` and st,
// `pending` the open chunk's rows before the call): thread j < dv owns value column j; threads
// r < dk help with keys. One block, all its threads. A token is three passes between barriers —
// the q / k norms; both sets of coefficients (thread m reads key row m once for its k and q
// dots); then each column's Sᵀk and Sᵀq chains over one read of the state and the corrections
// over one read of the open chunk's values — where it was five, four of them waiting on memory.
// Every chain is the one it was (the same terms in the same order), so the same bits.
// With fused (GdnGateNorm; rows: the sequence's) the block also computes its head's gates
// before each token (stored as GdnGates stores them) and the gated norm of the head's output row
// after it.
__device__ void GdnCoreTokens(const GdnCoreArgs& a, const DevGdnState& st, int pending, int h,
                              const GdnGateNorm* fused = nullptr, const GdnSeq* rows = nullptr) {
  __shared__ float q[kMaxDim], k[kMaxDim], coef_k[kGdnChunk], coef_q[kGdnChunk], decay[kGdnChunk], inv[2];
  __shared__ float orow[kMaxDim], gates[2], norm_inv;  // fused: the output row, beta and g, its norm
  const int tid = threadIdx.x;
  const int dk = a.dk, dv = a.dv, hv = a.hv, kh = h / (a.hv / a.hk);
  const int64_t conv_dim = 2LL * a.hk * dk + int64_t{hv} * dv;
  const float q_scale = 1.0f / sqrtf(static_cast<float>(dk));
  float* S = st.S + int64_t{h} * dk * dv;
  for (int t = 0; t < a.n; ++t) {
    const float* row = a.qkv + t * conv_dim;
    const float* qraw = row + kh * dk;
    const float* kraw = row + int64_t{a.hk} * dk + kh * dk;
    // The q and k norms: warp 0 and warp 1 (warp 0 both when the block is one warp).
    if (tid < 32) {
      const float ss = WarpSumSquares16(qraw, dk, tid);
      if (tid == 0) inv[0] = 1.0f / sqrtf(__fadd_rn(ss, 1e-6f));
    }
    if (tid / 32 == (blockDim.x >= 64 ? 1 : 0)) {
      const float ss = WarpSumSquares16(kraw, dk, tid % 32);
      if (tid % 32 == 0) inv[1] = 1.0f / sqrtf(__fadd_rn(ss, 1e-6f));
    }
    if (fused != nullptr && tid == blockDim.x - 1) {  // GdnGates' arithmetic (elementwise.cu)
      const float* ir = rows->in + t * fused->stride;
      const float bb = ir[fused->b_col + h], aa = ir[fused->a_col + h];
      gates[0] = GdnBeta(bb, a.bf16);
      gates[1] = GdnDecay(aa, fused->a_log, fused->dt_bias, h);
      rows->beta_out[t * hv + h] = gates[0];
      rows->g_out[t * hv + h] = gates[1];
    }
    __syncthreads();
    for (int r = tid; r < dk; r += blockDim.x) {
      q[r] = __fmul_rn(__fmul_rn(qraw[r], inv[0]), q_scale);
      k[r] = __fmul_rn(__fmul_rn(kraw[r], inv[1]), 1.0f);
    }
    const int i = pending;
    const float beta = fused != nullptr ? gates[0] : a.beta[t * hv + h];
    const float gam = __fadd_rn(i == 0 ? 0.0f : st.pgam[(i - 1) * hv + h], fused != nullptr ? gates[1] : a.g[t * hv + h]);
    const float e = expf(gam);
    __syncthreads();
    // coef_k[m] = (k·k_m) e^{gam - gam_m} for m < i; coef_q[m] = (q·k_m) e^{gam - gam_m} for
    // m <= i, where k_i is this token's k (what the key store below writes) and gam_i = gam.
    for (int m = tid; m <= i; m += blockDim.x) {
      if (m < i) {
        float dk_dot, dq_dot;
        Dot16Fma2(k, q, st.pk + (int64_t{m} * hv + h) * dk, dk, dk_dot, dq_dot);
        const float d = expf(gam - st.pgam[m * hv + h]);
        coef_k[m] = __fmul_rn(dk_dot, d);
        coef_q[m] = __fmul_rn(dq_dot, d);
      } else {
        coef_q[m] = __fmul_rn(Dot16Fma(q, k, dk), expf(gam - gam));
      }
    }
    __syncthreads();
    const int j = tid;
    if (j < dv) {
      float sk = 0.0f, sq = 0.0f;
      for (int r = 0; r < dk; ++r) {
        const float s_rj = S[int64_t{r} * dv + j];
        sk = __fmaf_rn(s_rj, k[r], sk);
        sq = __fmaf_rn(s_rj, q[r], sq);
      }
      float w = a.qkv[t * conv_dim + 2LL * a.hk * dk + int64_t{h} * dv + j] - __fmul_rn(e, sk);
      float o = __fmul_rn(e, sq);
      for (int m = 0; m < i; ++m) {
        const float vn_m = st.pvn[(int64_t{m} * hv + h) * dv + j];
        w = __fmaf_rn(-coef_k[m], vn_m, w);
        o = __fmaf_rn(coef_q[m], vn_m, o);
      }
      const float vn = __fmul_rn(beta, w);
      st.pvn[(int64_t{i} * hv + h) * dv + j] = vn;
      o = __fmaf_rn(coef_q[i], vn, o);
      a.out[(int64_t{t} * hv + h) * dv + j] = RoundAct(o, a.bf16);
      orow[j] = RoundAct(o, a.bf16);
    }
    for (int r = tid; r < dk; r += blockDim.x) st.pk[(int64_t{i} * hv + h) * dk + r] = k[r];
    if (tid == 0) st.pgam[i * hv + h] = gam;
    pending = i + 1;
    __syncthreads();
    if (fused != nullptr) {  // GatedNormKernel's arithmetic on the row just stored
      if (tid < 32) {
        const float ss = WarpSumSquares16(orow, dv, tid);
        if (tid == 0) norm_inv = GatedNormInv(ss, dv, fused->eps);
      }
      __syncthreads();
      if (j < dv) {
        const float z = rows->in[t * fused->stride + fused->z_col + int64_t{h} * dv + j];
        const float v = GatedNormed(orow[j], norm_inv, WeightAt(fused->norm, j), z, a.bf16);
        rows->normed[(int64_t{t} * hv + h) * dv + j] = v;
        if (rows->normed_b != nullptr) {
          reinterpret_cast<__nv_bfloat16*>(rows->normed_b)[(int64_t{t} * hv + h) * dv + j] = __float2bfloat16_rn(v);
        }
      }
    }
    if (pending == kGdnChunk) {
      // S = e^{gam_last} S + Σ_m e^{gam_last − gam_m} k_m Vn_mᵀ (each thread its column; the
      // decays once a chunk — the same values — where each key row recomputed all 64).
      const float e_last = expf(gam);
      for (int m = tid; m < kGdnChunk; m += blockDim.x) decay[m] = expf(gam - st.pgam[m * hv + h]);
      __syncthreads();
      if (j < dv) {
        for (int r = 0; r < dk; ++r) {
          float s = __fmul_rn(S[int64_t{r} * dv + j], e_last);
          for (int m = 0; m < kGdnChunk; ++m) {
            const float kr = __fmul_rn(st.pk[(int64_t{m} * hv + h) * dk + r], decay[m]);
            s = __fmaf_rn(kr, st.pvn[(int64_t{m} * hv + h) * dv + j], s);
          }
          S[int64_t{r} * dv + j] = s;
        }
      }
      pending = 0;
      __syncthreads();
    }
  }
}

// One block per value head. The open chunk's row count comes from a staged counter (copied in
// before the step's first kernel) or the argument.
__global__ void GdnCoreKernel(GdnCoreArgs a, DevGdnState st, int pending0) {
  const int pending = a.pending_dev ? *a.pending_dev : pending0;
  PrefetchHeadState(st, a.dk, a.dv, a.hv, pending, blockIdx.x);
  PdlBegin();  // pdl.cuh: only prefetches before the predecessor completes
  GdnCoreTokens(a, st, pending, blockIdx.x);
}

// One block per value head (x) and sequence (y): each block exactly GdnCoreKernel's for its
// sequence.
__global__ void GdnCoreSeqsKernel(const GdnSeq* seqs, int hk, int hv, int dk, int dv, bool bf16, GdnGateNorm fused,
                                  bool with_fused) {
  const GdnSeq& s = seqs[blockIdx.y];  // staged by a copy before the step's first kernel
  PrefetchHeadState(s.state, dk, dv, hv, s.state.pending, blockIdx.x);
  PdlBegin();  // pdl.cuh: only prefetches before the predecessor completes
  const GdnCoreArgs a = SeqArgs(s, hk, hv, dk, dv, bf16);
  GdnCoreTokens(a, s.state, s.state.pending, blockIdx.x, with_fused ? &fused : nullptr, &s);
}

// One warp per (row, head).
__global__ void GatedNormKernel(const float* x, const float* z, int64_t z_stride, int64_t z_col, int n, int hv, int dv,
                                DevWeight w, float eps, bool bf16, float* out, __nv_bfloat16* out_b) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  const int64_t rh = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (rh >= int64_t{n} * hv) return;
  const int64_t t = rh / hv, h = rh % hv;
  const float* xr = x + rh * dv;
  const float* zr = z + t * z_stride + z_col + h * dv;
  float* o = out + rh * dv;
  const float inv = GatedNormInv(WarpSumSquares16(xr, dv, lane), dv, eps);
  for (int jj = lane; jj < dv; jj += 32) {
    const float v = GatedNormed(xr[jj], inv, WeightAt(w, jj), zr[jj], bf16);
    o[jj] = v;
    if (out_b != nullptr) out_b[rh * dv + jj] = __float2bfloat16_rn(v);
  }
}

}  // namespace

Status CausalConvSilu(const float* x, int64_t x_stride, int n, int channels, const DevWeight& w, float* conv_state,
                      bool bf16, float* out, void* stream) {
  if (n < 0 || channels <= 0 || w.cols < 1 || w.cols > kMaxConvK || w.rows != channels) {
    return InvalidArgument("cuda CausalConvSilu: bad shape (kernel width 1..8, one row per channel)");
  }
  if (n == 0) return Status::Ok();
  if (n >= kGdnParallelMinTokens) {
    if ((n + kConvRun - 1) / kConvRun > 65535) return InvalidArgument("cuda CausalConvSilu: over 2,097,120 tokens in one call");
    const dim3 grid(static_cast<unsigned>((channels + 255) / 256), static_cast<unsigned>((n + kConvRun - 1) / kConvRun));
    LaunchPdl(ConvTokensKernel, grid, 256, 0, static_cast<cudaStream_t>(stream), x, x_stride, n, channels, w,
              conv_state, bf16, out);
    LaunchPdl(ConvStateKernel, (channels + 127) / 128, 128, 0, static_cast<cudaStream_t>(stream), x, x_stride, n,
              channels, static_cast<int>(w.cols) - 1, conv_state);
    return Launched("CausalConvSilu");
  }
  LaunchPdl(ConvKernel, (channels + 127) / 128, 128, 0, static_cast<cudaStream_t>(stream), x, x_stride, n, channels, w,
            conv_state, bf16, out);
  return Launched("CausalConvSilu");
}

Status CausalConvSiluSeqs(const float* x, int64_t x_stride, const ConvSeq* seqs, int count, int channels,
                          const DevWeight& w, bool bf16, float* out, void* stream) {
  if (count < 0 || count > 65535 || channels <= 0 || w.cols < 1 || w.cols > kMaxConvK || w.rows != channels ||
      (count > 0 && seqs == nullptr)) {
    return InvalidArgument("cuda CausalConvSiluSeqs: bad shape or count (kernel width 1..8, one row per channel, up to "
                           "65535 sequences)");
  }
  if (count == 0) return Status::Ok();
  LaunchPdl(ConvSeqsKernel, dim3(static_cast<unsigned>((channels + 127) / 128), static_cast<unsigned>(count)), 128, 0,
            static_cast<cudaStream_t>(stream), x, x_stride, seqs, channels, w, bf16, out);
  return Launched("CausalConvSiluSeqs");
}

Status CausalConvSiluPieces(const float* x, int64_t x_stride, const ConvSeq* seqs, int count, int max_n, int channels,
                            const DevWeight& w, bool bf16, float* out, void* stream) {
  if (count < 0 || count > 65535 || channels <= 0 || w.cols < 1 || w.cols > kMaxConvK || w.rows != channels ||
      (count > 0 && seqs == nullptr) || max_n < 0 || (max_n + kConvRun - 1) / kConvRun > 65535) {
    return InvalidArgument("cuda CausalConvSiluPieces: bad shape or count (kernel width 1..8, one row per channel, up "
                           "to 65535 pieces of up to 2,097,120 tokens)");
  }
  if (count == 0 || max_n == 0) return Status::Ok();
  const auto st = static_cast<cudaStream_t>(stream);
  const dim3 grid(static_cast<unsigned>((channels + 255) / 256), static_cast<unsigned>((max_n + kConvRun - 1) / kConvRun),
                  static_cast<unsigned>(count));
  LaunchPdl(ConvTokensPiecesKernel, grid, 256, 0, st, x, x_stride, seqs, channels, w, bf16, out);
  LaunchPdl(ConvStatePiecesKernel, dim3(static_cast<unsigned>((channels + 127) / 128), static_cast<unsigned>(count)), 128,
            0, st, x, x_stride, seqs, channels, static_cast<int>(w.cols) - 1);
  return Launched("CausalConvSiluPieces");
}

Status GdnCoreSeqs(const GdnSeq* seqs, int count, int hk, int hv, int dk, int dv, bool bf16, void* stream,
                   const GdnGateNorm* fused) {
  if (count < 0 || count > 65535 || hk <= 0 || hv <= 0 || hv % hk != 0 || dk <= 0 || dv <= 0 || dk > kMaxDim ||
      dv > kMaxDim || (count > 0 && seqs == nullptr)) {
    return InvalidArgument("cuda GdnCoreSeqs: bad shape or count (dk, dv 1..256, value heads a multiple of key heads, "
                           "up to 65535 sequences)");
  }
  if (fused != nullptr && (fused->a_log.rows * fused->a_log.cols < hv || fused->dt_bias.rows * fused->dt_bias.cols < hv ||
                          fused->norm.rows * fused->norm.cols < dv)) {
    return InvalidArgument("cuda GdnCoreSeqs: the fused gates need hv values of A_log and dt_bias, the norm dv weights");
  }
  if (count == 0) return Status::Ok();
  if (GdnTensorCoreForm(bf16, dk)) return GdnCoreTcSeqs(seqs, count, hk, hv, dk, dv, stream, fused);
  const int threads = ((dk > dv ? dk : dv) + 31) / 32 * 32;
  LaunchPdl(GdnCoreSeqsKernel, dim3(static_cast<unsigned>(hv), static_cast<unsigned>(count)), threads, 0,
            static_cast<cudaStream_t>(stream), seqs, hk, hv, dk, dv, bf16, fused != nullptr ? *fused : GdnGateNorm{},
            fused != nullptr);
  return Launched("GdnCoreSeqs");
}

Status GdnCore(const GdnCoreArgs& a, void* stream) {
  if (a.n < 0 || a.hk <= 0 || a.hv <= 0 || a.hv % a.hk != 0 || a.dk <= 0 || a.dv <= 0 || a.dk > kMaxDim ||
      a.dv > kMaxDim || a.state == nullptr || a.state->pending < 0 || a.state->pending >= kGdnChunk) {
    return InvalidArgument("cuda GdnCore: bad shape or state (dk, dv 1..256, value heads a multiple of key heads)");
  }
  if (a.n == 0) return Status::Ok();
  if (GdnTensorCoreForm(a.bf16, a.dk)) {
    const Status s = a.n >= kGdnParallelMinTokens && a.scratch != nullptr ? GdnCoreTcChunked(a, stream)
                                                                          : GdnCoreTcTokens(a, stream);
    a.state->pending = (a.state->pending + a.n) % kGdnChunk;
    return s;
  }
  if (a.n >= kGdnParallelMinTokens && a.scratch != nullptr && GdnChunkSharedBytes(a.dk) <= kGdnMaxSharedBytes) {
    const Status s = GdnCoreChunked(a, stream);
    a.state->pending = (a.state->pending + a.n) % kGdnChunk;
    return s;
  }
  const int threads = ((a.dk > a.dv ? a.dk : a.dv) + 31) / 32 * 32;
  // The state descriptor travels by value (its pointers are device memory); `pending` is kept
  // on the host and advanced here.
  LaunchPdl(GdnCoreKernel, a.hv, threads, 0, static_cast<cudaStream_t>(stream), a, *a.state, a.state->pending);
  a.state->pending = (a.state->pending + a.n) % kGdnChunk;
  return Launched("GdnCore");
}

Status GatedRmsNorm(const float* x, const float* z, int64_t z_stride, int64_t z_col, int n, int hv, int dv,
                    const DevWeight& w, float eps, bool bf16, float* out, void* stream, uint16_t* out_bf16) {
  if (n < 0 || hv <= 0 || dv <= 0 || w.rows * w.cols < dv) return InvalidArgument("cuda GatedRmsNorm: bad shape");
  if (n == 0) return Status::Ok();
  const int64_t warps = int64_t{n} * hv;
  LaunchPdl(GatedNormKernel, static_cast<unsigned>((warps + 7) / 8), 256, 0, static_cast<cudaStream_t>(stream), x, z,
            z_stride, z_col, n, hv, dv, w, eps, bf16, out, reinterpret_cast<__nv_bfloat16*>(out_bf16));
  return Launched("GatedRmsNorm");
}

}  // namespace graft::cuda

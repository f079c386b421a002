// The tensor-core form's token kernel (gdn.h, gdn_tc.cuh): GdnCore for decode steps and pieces
// under 16 tokens, one block a (value head, sequence), a token at a time. Each token is the
// chunk kernels' arithmetic for one row (gdn_tc_chunk.cu), the row at the top of mma tiles
// whose other rows are zero:
//   the row's key and query into the A tile and the open chunk's key tile; their norms;
//   the coefficient dots with the chunk's keys (one mma product, as GdnTcPrepKernel's);
//   Sᵀk_raw and Sᵀq_raw (mma, S read from the state and split in three, as phase A's);
//   each value column's recurrence and output chains in ascending chunk row (phases B and C);
//   at the chunk's end the state update (mma, as phase D's).
// With fused (GdnGateNorm) the block also computes its head's gates before each token and the
// gated norm of the head's output row after it (GdnGates' and GatedRmsNorm's arithmetic).
#include <cuda_runtime.h>

#include "backend/cuda/gdn.h"
#include "backend/cuda/gdn_kernels.cuh"
#include "backend/cuda/gdn_tc.cuh"
#include "backend/cuda/launched.h"
#include "backend/cuda/pdl.cuh"

namespace graft::cuda {
namespace {

using gdn_kernels::GatedNormed;
using gdn_kernels::GatedNormInv;
using gdn_kernels::PrefetchHeadState;
using gdn_kernels::SeqArgs;
using gdn_kernels::WarpSumSquares16;
using namespace gdn_tc;  // NOLINT: the form's helpers
using bf16_t = __nv_bfloat16;

constexpr int kMaxDim = 256;
constexpr int kMaxRs = RowStride(kGdnTcMaxDk);
// Eight warps whatever dv: the Sᵀk / Sᵀq passes read the state a value n-tile a warp, so more
// warps keep more of its reads in flight (a decode step has one block a head, most SMs idle).
constexpr int kTcThreads = 256;

__device__ void TcTokens(const GdnCoreArgs& a, const DevGdnState& st, int pending, int h,
                         const GdnGateNorm* fused = nullptr, const GdnSeq* rows = nullptr) {
  __shared__ __align__(16) bf16_t kc[kC * kMaxRs];  // the open chunk's raw keys
  __shared__ __align__(16) bf16_t arow[16 * kMaxRs]; // row 0: this token's key, row 1: its query, the rest 0
  __shared__ float inv_s[kC], gam_s[kC], coef_k[kC], coef_q[kC], dd[kC];
  __shared__ float skv[kMaxDim], sqv[kMaxDim], orow[kMaxDim];
  __shared__ float facts[4], norm_inv;  // inv_q, inv_k, beta, g of the token; the fused norm's
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, warps = static_cast<int>(blockDim.x) / 32;
  const int g = lane / 4, t = lane % 4;
  const int dk = a.dk, dv = a.dv, hv = a.hv, hk = a.hk, kh = h / (hv / hk);
  const int dkp = PaddedDk(dk), rs = RowStride(dkp), ks_n = dkp / 16, ntn = (dv + 7) / 8;
  const int64_t conv_dim = 2LL * hk * dk + int64_t{hv} * dv;
  float* S = st.S + int64_t{h} * dk * dv;
  for (int x = tid; x < 16 * rs; x += blockDim.x) arow[x] = __float2bfloat16_rn(0.0f);
  for (int x = tid; x < pending * dkp; x += blockDim.x) {
    const int m = x / dkp, r = x % dkp;
    kc[m * rs + r] = __float2bfloat16_rn(r < dk ? st.pk[(int64_t{m} * hv + h) * dk + r] : 0.0f);
  }
  for (int m = tid; m < pending; m += blockDim.x) {
    inv_s[m] = st.pkinv[int64_t{m} * hv + h];
    gam_s[m] = st.pgam[int64_t{m} * hv + h];
  }
  for (int tk = 0; tk < a.n; ++tk) {
    const float* row = a.qkv + tk * conv_dim;
    const float* qraw = row + kh * dk;
    const float* kraw = row + int64_t{hk} * dk + kh * dk;
    const int i = pending;
    __syncthreads();  // the last token's reads of arow, kc and the factors are done
    for (int r = tid; r < dkp; r += blockDim.x) {
      const bf16_t kv = __float2bfloat16_rn(r < dk ? kraw[r] : 0.0f);
      arow[r] = kv;
      arow[rs + r] = __float2bfloat16_rn(r < dk ? qraw[r] : 0.0f);
      kc[i * rs + r] = kv;
    }
    if (tid == blockDim.x - 1) {
      if (fused != nullptr) {  // GdnGates' arithmetic (elementwise.cu)
        const float* ir = rows->in + tk * fused->stride;
        facts[2] = GdnBeta(ir[fused->b_col + h], true);
        facts[3] = GdnDecay(ir[fused->a_col + h], fused->a_log, fused->dt_bias, h);
        rows->beta_out[tk * hv + h] = facts[2];
        rows->g_out[tk * hv + h] = facts[3];
      } else {
        facts[2] = a.beta[tk * hv + h];
        facts[3] = a.g[tk * hv + h];
      }
    }
    __syncthreads();
    if (warp == 0) {  // the norms from the bf16 rows, as GdnTcPrepKernel takes them
      const float v = InvNorm(arow + rs, dk, lane);
      if (lane == 0) facts[0] = v;
    }
    if (warp == 1) {
      const float v = InvNorm(arow, dk, lane);
      if (lane == 0) facts[1] = v;
    }
    __syncthreads();
    const float inv_q = facts[0], inv_i = facts[1], beta = facts[2];
    const float fq = QFactor(inv_q, dk);
    const float gam = __fadd_rn(i == 0 ? 0.0f : gam_s[i - 1], facts[3]);
    const float e = expf(gam);
    unsigned af[kMaxKs][4];
#pragma unroll
    for (int ks = 0; ks < kMaxKs; ++ks)
      if (ks < ks_n) LdMatrixX4(af[ks], arow + AOffset(lane, 0, 16 * ks, rs));
    // The coefficients with keys m <= i, two n-tiles (16 keys) a pass.
    for (int np = warp; 16 * np <= i; np += warps) {
      float d[2][4] = {};
#pragma unroll
      for (int ks = 0; ks < kMaxKs; ++ks) {
        if (ks >= ks_n) break;
        unsigned b[4];
        LdMatrixX4(b, kc + BOffset(lane, 16 * np, 16 * ks, rs));
        Mma16816(d[0], af[ks], b[0], b[1]);
        Mma16816(d[1], af[ks], b[2], b[3]);
      }
      if (g < 2) {  // output row 0: k·k_m (g 0); row 1: q·k_m (g 1)
#pragma unroll
        for (int half = 0; half < 2; ++half)
#pragma unroll
          for (int x = 0; x < 2; ++x) {
            const int m = 16 * np + 8 * half + 2 * t + x;
            if (m > i) continue;
            const float gm = m == i ? gam : gam_s[m], im = m == i ? inv_i : inv_s[m];
            if (g == 0) {
              if (m < i) coef_k[m] = Coef(d[half][x], inv_i, im, gam, gm);
            } else {
              coef_q[m] = Coef(d[half][x], fq, im, gam, gm);
            }
          }
      }
    }
    // Sᵀk_raw and Sᵀq_raw: S's fragments read from the state and split, a value n-tile a pass.
    for (int nt = warp; nt < ntn; nt += warps) {
      const int col = 8 * nt + g;
      auto s_at = [&](int r) { return r < dk && col < dv ? S[int64_t{r} * dv + col] : 0.0f; };
      float d[4] = {};
#pragma unroll
      for (int ks = 0; ks < kMaxKs; ++ks) {
        if (ks >= ks_n) break;
        const int r0 = 16 * ks + 2 * t;
        unsigned b0[3], b1[3];
        SplitPack3(s_at(r0), s_at(r0 + 1), b0);
        SplitPack3(s_at(r0 + 8), s_at(r0 + 9), b1);
        MmaSplit3(d, af[ks], b0, b1);
      }
      if (g == 0) {
        skv[8 * nt + 2 * t] = d[0];
        skv[8 * nt + 2 * t + 1] = d[1];
      } else if (g == 1) {
        sqv[8 * nt + 2 * t] = d[0];
        sqv[8 * nt + 2 * t + 1] = d[1];
      }
    }
    __syncthreads();
    // The chains of value column j: w over the earlier rows, then o over them and this one.
    const int j = tid;
    if (j < dv) {
      float w = WStart(row[2LL * hk * dk + int64_t{h} * dv + j], e, inv_i, skv[j]);
      float o = OStart(e, fq, sqv[j]);
      // Eight rows' values loaded before their terms (the loads overlap instead of each waiting
      // on the last FMA), the terms in ascending m as before.
      int m = 0;
      for (; m + 8 <= i; m += 8) {
        float v8[8];
#pragma unroll
        for (int x = 0; x < 8; ++x) v8[x] = st.pvn[(int64_t{m + x} * hv + h) * dv + j];
#pragma unroll
        for (int x = 0; x < 8; ++x) {
          w = __fmaf_rn(-coef_k[m + x], v8[x], w);
          o = __fmaf_rn(coef_q[m + x], v8[x], o);
        }
      }
      for (; m < i; ++m) {
        const float vn_m = st.pvn[(int64_t{m} * hv + h) * dv + j];
        w = __fmaf_rn(-coef_k[m], vn_m, w);
        o = __fmaf_rn(coef_q[m], vn_m, o);
      }
      const float vn = __fmul_rn(beta, w);
      st.pvn[(int64_t{i} * hv + h) * dv + j] = vn;
      o = __fmaf_rn(coef_q[i], vn, o);
      const float out = RoundAct(o, true);
      a.out[(int64_t{tk} * hv + h) * dv + j] = out;
      orow[j] = out;
    }
    for (int r = tid; r < dk; r += blockDim.x) st.pk[(int64_t{i} * hv + h) * dk + r] = Bf16Round(kraw[r]);
    if (tid == 0) {
      st.pgam[int64_t{i} * hv + h] = gam;
      st.pkinv[int64_t{i} * hv + h] = inv_i;
      gam_s[i] = gam;
      inv_s[i] = inv_i;
    }
    pending = i + 1;
    __syncthreads();
    if (fused != nullptr) {  // GatedNormKernel's arithmetic on the row just stored
      if (warp == 0) {
        const float ss = WarpSumSquares16(orow, dv, lane);
        if (lane == 0) norm_inv = GatedNormInv(ss, dv, fused->eps);
      }
      __syncthreads();
      if (j < dv) {
        const float z = rows->in[tk * fused->stride + fused->z_col + int64_t{h} * dv + j];
        const float v = GatedNormed(orow[j], norm_inv, WeightAt(fused->norm, j), z, true);
        rows->normed[(int64_t{tk} * hv + h) * dv + j] = v;
        if (rows->normed_b != nullptr) {
          reinterpret_cast<__nv_bfloat16*>(rows->normed_b)[(int64_t{tk} * hv + h) * dv + j] = __float2bfloat16_rn(v);
        }
      }
    }
    if (pending == kC) {
      // S = e^{gam_last} S + Kᵀ W (phase D's arithmetic), a value n-tile a pass: W's fragments
      // from the chunk's corrected values, S's from the state.
      for (int m = tid; m < kC; m += blockDim.x) dd[m] = expf(__fsub_rn(gam_s[kC - 1], gam_s[m]));
      __syncthreads();
      const float el = expf(gam_s[kC - 1]);
      for (int nt = warp; nt < ntn; nt += warps) {
        const int col = 8 * nt + g;
        auto w_at = [&](int m) {
          return col < dv ? WUpdate(inv_s[m], dd[m], st.pvn[(int64_t{m} * hv + h) * dv + col]) : 0.0f;
        };
        unsigned b0[kC / 16][3], b1[kC / 16][3];
#pragma unroll
        for (int ks = 0; ks < kC / 16; ++ks) {
          const int m0 = 16 * ks + 2 * t;
          SplitPack3(w_at(m0), w_at(m0 + 1), b0[ks]);
          SplitPack3(w_at(m0 + 8), w_at(m0 + 9), b1[ks]);
        }
        for (int mt = 0; mt < ks_n; ++mt) {
          float d[4];
#pragma unroll
          for (int x = 0; x < 4; ++x) {
            const int r = 16 * mt + g + 8 * (x / 2), c = 8 * nt + 2 * t + x % 2;
            d[x] = __fmul_rn(r < dk && c < dv ? S[int64_t{r} * dv + c] : 0.0f, el);
          }
#pragma unroll
          for (int ks = 0; ks < kC / 16; ++ks) {
            unsigned am[4];
            LdMatrixX4Trans(am, kc + ATransOffset(lane, 16 * mt, 16 * ks, rs));
            MmaSplit3(d, am, b0[ks], b1[ks]);
          }
#pragma unroll
          for (int x = 0; x < 4; ++x) {
            const int r = 16 * mt + g + 8 * (x / 2), c = 8 * nt + 2 * t + x % 2;
            if (r < dk && c < dv) S[int64_t{r} * dv + c] = d[x];
          }
        }
      }
      pending = 0;
    }
  }
}

// One block per value head; the open chunk's row count from a staged counter (a captured graph
// stays valid from one step to the next) or the argument.
__global__ void __launch_bounds__(kTcThreads) GdnTcTokensKernel(GdnCoreArgs a, DevGdnState st, int pending0) {
  const int pending = a.pending_dev ? *a.pending_dev : pending0;
  PrefetchHeadState(st, a.dk, a.dv, a.hv, pending, blockIdx.x);
  PdlBegin();  // pdl.cuh: only prefetches before the predecessor completes
  TcTokens(a, st, pending, blockIdx.x);
}

// One block per value head (x) and sequence (y).
__global__ void __launch_bounds__(kTcThreads) GdnTcSeqsKernel(const GdnSeq* seqs, int hk, int hv, int dk, int dv,
                                                       GdnGateNorm fused, bool with_fused) {
  const GdnSeq& s = seqs[blockIdx.y];  // staged by a copy before the step's first kernel
  PrefetchHeadState(s.state, dk, dv, hv, s.state.pending, blockIdx.x);
  PdlBegin();  // pdl.cuh: only prefetches before the predecessor completes
  const GdnCoreArgs a = SeqArgs(s, hk, hv, dk, dv, true);
  TcTokens(a, s.state, s.state.pending, blockIdx.x, with_fused ? &fused : nullptr, &s);
}

}  // namespace

Status GdnCoreTcTokens(const GdnCoreArgs& a, void* stream) {
  if (a.dk > kGdnTcMaxDk || a.dv > kMaxDim) return InvalidArgument("cuda GdnCore (tensor-core tokens): dk <= 128, dv <= 256");
  LaunchPdl(GdnTcTokensKernel, a.hv, kTcThreads, 0, static_cast<cudaStream_t>(stream), a, *a.state,
            a.state->pending);
  return Launched("GdnCore (tensor-core tokens)");
}

Status GdnCoreTcSeqs(const GdnSeq* seqs, int count, int hk, int hv, int dk, int dv, void* stream,
                     const GdnGateNorm* fused) {
  if (dk > kGdnTcMaxDk || dv > kMaxDim) return InvalidArgument("cuda GdnCoreSeqs (tensor-core tokens): dk <= 128, dv <= 256");
  if (count == 0) return Status::Ok();
  LaunchPdl(GdnTcSeqsKernel, dim3(static_cast<unsigned>(hv), static_cast<unsigned>(count)), kTcThreads, 0,
            static_cast<cudaStream_t>(stream), seqs, hk, hv, dk, dv, fused != nullptr ? *fused : GdnGateNorm{},
            fused != nullptr);
  return Launched("GdnCoreSeqs (tensor-core tokens)");
}

}  // namespace graft::cuda

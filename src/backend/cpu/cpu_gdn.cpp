// CPU reference of the Gated DeltaNet ops (docs/architectures.md §6.2-6.5), chunk-consistent
// form (see GdnState in backend/ops.h): in fp32 mode with L2-normalised q and k, in bf16 mode the
// tensor-core form's arithmetic (GdnCoreRaw).
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_math.h"
#include "backend/cpu/cpu_ops.h"
#include "util/bf16.h"
#include "util/parallel.h"

namespace graft {

void CpuOps::CausalConvSilu(const float* x, int64_t x_stride, int n, int channels, const Weight& w,
                            float* conv_state, float* out) {
  const int K = static_cast<int>(w.cols);
  const int hist = K - 1;
  ParallelFor(channels, threads_, [&](int64_t b, int64_t e) {
    std::vector<float> win(static_cast<size_t>(hist + n));
    for (int64_t c = b; c < e; ++c) {
      float* st = conv_state + c * hist;
      for (int j = 0; j < hist; ++j) win[j] = st[j];
      for (int t = 0; t < n; ++t) win[hist + t] = x[t * x_stride + c];
      for (int t = 0; t < n; ++t) {
        float acc = 0;
        for (int j = 0; j < K; ++j) acc += w.at(c * K + j) * win[t + j];
        out[static_cast<int64_t>(t) * channels + c] = R(cpu::Silu(R(acc)));
      }
      for (int j = 0; j < hist; ++j) st[j] = win[n + j];
    }
  });
}

void CpuOps::GdnGates(const float* in, int64_t stride, int64_t b_col, int64_t a_col, int n, int hv,
                      const Weight& a_log, const Weight& dt_bias, float* beta, float* g) {
  for (int t = 0; t < n; ++t) {
    for (int h = 0; h < hv; ++h) {
      const float b = in[t * stride + b_col + h];
      const float a = in[t * stride + a_col + h];
      beta[t * hv + h] = R(cpu::Sigmoid(b));
      g[t * hv + h] = -std::exp(a_log.at(h)) * cpu::Softplus(a + dt_bias.at(h));
    }
  }
}

namespace {

// x * rsqrt(Σx² + 1e-6) * scale, into out (fp32).
void L2Normalize(const float* x, int d, float scale, float* out) {
  const float inv = 1.0f / std::sqrt(cpu::SumSquares(x, d) + 1e-6f);
  for (int i = 0; i < d; ++i) out[i] = x[i] * inv * scale;
}

}  // namespace

// bf16 mode: the tensor-core form (backend/cuda/gdn.h, gdn_tc.cuh) in plain fp32 loops. The same
// chunk-consistent rule as the fp32 form below, with the L2 norms applied as factors after the
// dots over q and k's raw (bf16) values, and the open chunk keeping raw keys and their inverse
// norms (GdnState::pkinv):
//   sk = inv_k (S^T k_raw), sq = fq (S^T q_raw), fq = inv_q dk^-1/2,
//   Ckk[m] = (k_raw.k_raw_m) inv_k inv_k_m e^{gam - gam_m}, Cqk[m] = (q_raw.k_raw_m) fq inv_k_m e^{...},
//   Vn_i = beta (v - e sk - sum_{m<i} Ckk[m] Vn_m), o = e sq + sum_{m<=i} Cqk[m] Vn_m,
//   at a chunk's end S = e^{gam_last} S + sum_m k_raw_m (inv_k_m e^{gam_last - gam_m} Vn_m)^T.
// The GPU sums in other orders (mma), so the two agree within rounding, not bit for bit.
void CpuOps::GdnCoreRaw(const GdnCoreArgs& a) {
  const int dk = a.dk, dv = a.dv, hv = a.hv, group = a.hv / a.hk;
  const int64_t conv_dim = 2LL * a.hk * dk + static_cast<int64_t>(hv) * dv;
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(dk));
  GdnState& st = *a.state;
  ParallelFor(hv, threads_, [&](int64_t hb, int64_t he) {
    std::vector<float> q(dk), k(dk), sk(dv), sq(dv), coef_k(kGdnChunk), coef_q(kGdnChunk), w(dv), o(dv);
    for (int64_t h = hb; h < he; ++h) {
      const int kh = static_cast<int>(h) / group;
      float* S = st.S + h * dk * dv;
      int pending = st.pending;
      for (int t = 0; t < a.n; ++t) {
        const float* row = a.qkv + t * conv_dim;
        for (int r = 0; r < dk; ++r) {
          q[r] = RoundBf16(row[kh * dk + r]);
          k[r] = RoundBf16(row[static_cast<int64_t>(a.hk) * dk + kh * dk + r]);
        }
        const float inv_q = 1.0f / std::sqrt(cpu::SumSquares(q.data(), dk) + 1e-6f);
        const float inv_k = 1.0f / std::sqrt(cpu::SumSquares(k.data(), dk) + 1e-6f);
        const float fq = inv_q * q_scale;
        const float* v = row + 2LL * a.hk * dk + h * dv;
        const float beta = a.beta[t * hv + h];
        const int i = pending;
        const float gam = (i == 0 ? 0.0f : st.pgam[(i - 1) * hv + h]) + a.g[t * hv + h];
        const float e = std::exp(gam);
        for (int m = 0; m < i; ++m) {
          const float* km = st.pk + (static_cast<int64_t>(m) * hv + h) * dk;
          const float inv_m = st.pkinv[m * hv + h], d = std::exp(gam - st.pgam[m * hv + h]);
          coef_k[m] = DotF32(k.data(), km, dk) * inv_k * inv_m * d;
          coef_q[m] = DotF32(q.data(), km, dk) * fq * inv_m * d;
        }
        coef_q[i] = DotF32(q.data(), k.data(), dk) * fq * inv_k;
        for (int j = 0; j < dv; ++j) sk[j] = sq[j] = 0.0f;
        for (int r = 0; r < dk; ++r) {
          const float* s = S + r * dv;
          for (int j = 0; j < dv; ++j) {
            sk[j] += s[j] * k[r];
            sq[j] += s[j] * q[r];
          }
        }
        for (int j = 0; j < dv; ++j) {
          w[j] = v[j] - e * (inv_k * sk[j]);
          o[j] = e * (fq * sq[j]);
        }
        for (int m = 0; m < i; ++m) {
          const float* vm = st.pvn + (static_cast<int64_t>(m) * hv + h) * dv;
          for (int j = 0; j < dv; ++j) {
            w[j] -= coef_k[m] * vm[j];
            o[j] += coef_q[m] * vm[j];
          }
        }
        float* vn = st.pvn + (static_cast<int64_t>(i) * hv + h) * dv;
        float* out = a.out + (static_cast<int64_t>(t) * hv + h) * dv;
        for (int j = 0; j < dv; ++j) {
          vn[j] = beta * w[j];
          out[j] = R(o[j] + coef_q[i] * vn[j]);
        }
        std::copy(k.begin(), k.end(), st.pk + (static_cast<int64_t>(i) * hv + h) * dk);
        st.pkinv[i * hv + h] = inv_k;
        st.pgam[i * hv + h] = gam;
        pending = i + 1;
        if (pending == kGdnChunk) {
          const float e_last = std::exp(gam);
          for (int64_t x = 0; x < static_cast<int64_t>(dk) * dv; ++x) S[x] *= e_last;
          for (int m = 0; m < kGdnChunk; ++m) {
            const float* km = st.pk + (static_cast<int64_t>(m) * hv + h) * dk;
            const float* vm = st.pvn + (static_cast<int64_t>(m) * hv + h) * dv;
            const float f = st.pkinv[m * hv + h] * std::exp(gam - st.pgam[m * hv + h]);
            for (int j = 0; j < dv; ++j) w[j] = f * vm[j];
            for (int r = 0; r < dk; ++r) {
              float* s = S + r * dv;
              for (int j = 0; j < dv; ++j) s[j] += km[r] * w[j];
            }
          }
          pending = 0;
        }
      }
    }
  });
  st.pending = (st.pending + a.n) % kGdnChunk;
}

void CpuOps::GdnCore(const GdnCoreArgs& a) {
  if (act_ == ActDtype::kBF16) {
    GdnCoreRaw(a);
    return;
  }
  const int dk = a.dk, dv = a.dv, hv = a.hv, group = a.hv / a.hk;
  const int64_t conv_dim = 2LL * a.hk * dk + static_cast<int64_t>(hv) * dv;
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(dk));
  GdnState& st = *a.state;
  // Heads are independent; each task walks all n tokens of its head in order.
  ParallelFor(hv, threads_, [&](int64_t hb, int64_t he) {
    std::vector<float> q(dk), k(dk), sk(dv), sq(dv), w(dv), o(dv);
    for (int64_t h = hb; h < he; ++h) {
      const int kh = static_cast<int>(h) / group;
      float* S = st.S + h * dk * dv;
      int pending = st.pending;
      for (int t = 0; t < a.n; ++t) {
        const float* row = a.qkv + t * conv_dim;
        L2Normalize(row + kh * dk, dk, q_scale, q.data());
        L2Normalize(row + static_cast<int64_t>(a.hk) * dk + kh * dk, dk, 1.0f, k.data());
        const float* v = row + 2LL * a.hk * dk + h * dv;
        const float beta = a.beta[t * hv + h];
        const int i = pending;
        const float gam = (i == 0 ? 0.0f : st.pgam[(i - 1) * hv + h]) + a.g[t * hv + h];
        const float e = std::exp(gam);
        // Sᵀk and Sᵀq with the chunk-start state.
        for (int j = 0; j < dv; ++j) sk[j] = sq[j] = 0.0f;
        for (int r = 0; r < dk; ++r) {
          const float* s = S + r * dv;
          for (int j = 0; j < dv; ++j) {
            sk[j] += s[j] * k[r];
            sq[j] += s[j] * q[r];
          }
        }
        // Vn_i = β (v − e Sᵀk − Σ_{m<i} (k·k_m) e^{gam − gam_m} Vn_m)
        for (int j = 0; j < dv; ++j) w[j] = v[j] - e * sk[j];
        for (int m = 0; m < i; ++m) {
          const float* km = st.pk + (static_cast<int64_t>(m) * hv + h) * dk;
          const float* vm = st.pvn + (static_cast<int64_t>(m) * hv + h) * dv;
          const float c = DotF32(k.data(), km, dk) * std::exp(gam - st.pgam[m * hv + h]);
          for (int j = 0; j < dv; ++j) w[j] -= c * vm[j];
        }
        float* vn = st.pvn + (static_cast<int64_t>(i) * hv + h) * dv;
        for (int j = 0; j < dv; ++j) vn[j] = beta * w[j];
        std::copy(k.begin(), k.end(), st.pk + (static_cast<int64_t>(i) * hv + h) * dk);
        st.pgam[i * hv + h] = gam;
        // O_i = e Sᵀq + Σ_{m<=i} (q·k_m) e^{gam − gam_m} Vn_m
        for (int j = 0; j < dv; ++j) o[j] = e * sq[j];
        for (int m = 0; m <= i; ++m) {
          const float* km = st.pk + (static_cast<int64_t>(m) * hv + h) * dk;
          const float* vm = st.pvn + (static_cast<int64_t>(m) * hv + h) * dv;
          const float c = DotF32(q.data(), km, dk) * std::exp(gam - st.pgam[m * hv + h]);
          for (int j = 0; j < dv; ++j) o[j] += c * vm[j];
        }
        float* out = a.out + (static_cast<int64_t>(t) * hv + h) * dv;
        for (int j = 0; j < dv; ++j) out[j] = R(o[j]);
        pending = i + 1;
        if (pending == kGdnChunk) {
          // S = e^{gam_last} S + Σ_m e^{gam_last − gam_m} k_m Vn_mᵀ
          const float e_last = std::exp(gam);
          for (int64_t x = 0; x < static_cast<int64_t>(dk) * dv; ++x) S[x] *= e_last;
          for (int m = 0; m < kGdnChunk; ++m) {
            const float* km = st.pk + (static_cast<int64_t>(m) * hv + h) * dk;
            const float* vm = st.pvn + (static_cast<int64_t>(m) * hv + h) * dv;
            const float d = std::exp(gam - st.pgam[m * hv + h]);
            for (int r = 0; r < dk; ++r) {
              const float kr = km[r] * d;
              float* s = S + r * dv;
              for (int j = 0; j < dv; ++j) s[j] += kr * vm[j];
            }
          }
          pending = 0;
        }
      }
    }
  });
  st.pending = (st.pending + a.n) % kGdnChunk;
}

void CpuOps::GatedRmsNorm(const float* x, const float* z, int64_t z_stride, int64_t z_col, int n, int hv, int dv,
                          const Weight& w, float eps, float* out, uint16_t* out_bf16) {
  for (int t = 0; t < n; ++t) {
    for (int h = 0; h < hv; ++h) {
      const float* xr = x + (static_cast<int64_t>(t) * hv + h) * dv;
      const float* zr = z + t * z_stride + z_col + static_cast<int64_t>(h) * dv;
      float* o = out + (static_cast<int64_t>(t) * hv + h) * dv;
      const float inv = 1.0f / std::sqrt(cpu::SumSquares(xr, dv) / static_cast<float>(dv) + eps);
      for (int j = 0; j < dv; ++j) o[j] = R(R(w.at(j) * R(xr[j] * inv)) * cpu::Silu(zr[j]));
    }
  }
  cpu::WriteTwin(out, int64_t{n} * hv * dv, out_bf16);
}

}  // namespace graft

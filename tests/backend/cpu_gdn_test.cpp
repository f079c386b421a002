// The chunk-consistent Gated DeltaNet core against the plain recurrent delta rule
// (docs/architectures.md §6.3) evaluated in double precision, across chunk boundaries, in both
// activation modes' forms.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <tuple>

#include "backend/cpu/cpu_ops.h"
#include "util/bf16.h"

namespace graft {
namespace {

struct Shape {
  int hk, hv, dk, dv, n;
};

// One sequence's state arrays (zero S, as a fresh slot).
struct StateArrays {
  std::vector<float> S, pk, pvn, pgam, pkinv;
  GdnState st;
  explicit StateArrays(const Shape& s)
      : S(static_cast<size_t>(s.hv) * s.dk * s.dv), pk(static_cast<size_t>(kGdnChunk) * s.hv * s.dk),
        pvn(static_cast<size_t>(kGdnChunk) * s.hv * s.dv), pgam(static_cast<size_t>(kGdnChunk) * s.hv), pkinv(pgam.size()) {
    st.S = S.data();
    st.pk = pk.data();
    st.pvn = pvn.data();
    st.pgam = pgam.data();
    st.pkinv = pkinv.data();
  }
};

// Both activation modes: fp32 (normalised q and k) and bf16 (the tensor-core form: raw bf16 q
// and k, the norms as factors), each against the recurrent rule in double on the same inputs.
class GdnCore : public ::testing::TestWithParam<std::tuple<Shape, bool>> {};

TEST_P(GdnCore, MatchesRecurrentRuleInDouble) {
  const Shape s = std::get<0>(GetParam());
  const bool bf16 = std::get<1>(GetParam());
  const int conv_dim = 2 * s.hk * s.dk + s.hv * s.dv;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0, 1);
  std::uniform_real_distribution<float> ud(0, 1);
  std::vector<float> qkv(static_cast<size_t>(s.n) * conv_dim), beta(static_cast<size_t>(s.n) * s.hv), g(beta.size());
  for (auto& x : qkv) x = bf16 ? RoundBf16(nd(rng)) : nd(rng);
  for (auto& x : beta) x = ud(rng);
  for (auto& x : g) x = -0.5f * ud(rng);

  StateArrays arrays(s);
  GdnState& st = arrays.st;
  std::vector<float> out(static_cast<size_t>(s.n) * s.hv * s.dv);
  GdnCoreArgs a{qkv.data(), beta.data(), g.data(), s.n, s.hk, s.hv, s.dk, s.dv, &st, out.data()};
  CpuOps(bf16 ? ActDtype::kBF16 : ActDtype::kF32, 2).GdnCore(a);
  EXPECT_EQ(st.pending, s.n % kGdnChunk);
  if (bf16) {
    // The same rows token by token (every call's state carried in the open chunk): equal bits.
    StateArrays again(s);
    std::vector<float> tokens(out.size());
    CpuOps cpu(ActDtype::kBF16, 2);
    for (int t = 0; t < s.n; ++t) {
      GdnCoreArgs one{qkv.data() + static_cast<size_t>(t) * conv_dim, beta.data() + t * s.hv, g.data() + t * s.hv, 1,
                      s.hk, s.hv, s.dk, s.dv, &again.st, tokens.data() + static_cast<size_t>(t) * s.hv * s.dv};
      cpu.GdnCore(one);
    }
    EXPECT_EQ(tokens, out) << "token by token";
    EXPECT_EQ(again.S, arrays.S) << "state";
  }

  double num = 0, den = 0;
  const int group = s.hv / s.hk;
  for (int h = 0; h < s.hv; ++h) {
    const int kh = h / group;
    std::vector<double> S(static_cast<size_t>(s.dk) * s.dv, 0.0);
    for (int t = 0; t < s.n; ++t) {
      const float* row = qkv.data() + static_cast<size_t>(t) * conv_dim;
      std::vector<double> q(s.dk), k(s.dk);
      double qs = 0, ks = 0;
      for (int i = 0; i < s.dk; ++i) {
        q[i] = row[kh * s.dk + i];
        k[i] = row[s.hk * s.dk + kh * s.dk + i];
        qs += q[i] * q[i];
        ks += k[i] * k[i];
      }
      for (int i = 0; i < s.dk; ++i) {
        q[i] /= std::sqrt(qs + 1e-6) * std::sqrt(static_cast<double>(s.dk));
        k[i] /= std::sqrt(ks + 1e-6);
      }
      const double decay = std::exp(static_cast<double>(g[t * s.hv + h])), b = beta[t * s.hv + h];
      for (auto& x : S) x *= decay;
      for (int j = 0; j < s.dv; ++j) {
        double mem = 0;
        for (int i = 0; i < s.dk; ++i) mem += S[i * s.dv + j] * k[i];
        const double d = b * (row[2 * s.hk * s.dk + h * s.dv + j] - mem);
        for (int i = 0; i < s.dk; ++i) S[i * s.dv + j] += k[i] * d;
      }
      for (int j = 0; j < s.dv; ++j) {
        double o = 0;
        for (int i = 0; i < s.dk; ++i) o += S[i * s.dv + j] * q[i];
        const double got = out[(static_cast<size_t>(t) * s.hv + h) * s.dv + j];
        num += (got - o) * (got - o);
        den += o * o;
      }
    }
  }
  // bf16 mode rounds each output to bf16 (relative 2^-9 at most, about 2e-3 over a sum of squares).
  EXPECT_LT(std::sqrt(num / den), bf16 ? 4e-3 : 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Shapes, GdnCore,
                         ::testing::Combine(::testing::Values(Shape{1, 1, 4, 4, 1}, Shape{2, 4, 8, 12, 63},
                                                              Shape{2, 4, 8, 8, 64}, Shape{1, 3, 16, 8, 150},
                                                              Shape{3, 6, 8, 12, 200}),
                                            ::testing::Bool()));

TEST(GdnGates, BetaAndDecay) {
  Weight a_log, dt_bias;
  a_log.rows = dt_bias.rows = 1;
  a_log.cols = dt_bias.cols = 1;
  a_log.f32 = {std::log(2.0f)};
  dt_bias.f32 = {0.5f};
  const float in[2] = {0.3f, -1.0f};  // b, a
  float beta, g;
  CpuOps(ActDtype::kF32, 1).GdnGates(in, 2, 0, 1, 1, 1, a_log, dt_bias, &beta, &g);
  EXPECT_NEAR(beta, 1.0 / (1.0 + std::exp(-0.3)), 1e-6);
  EXPECT_NEAR(g, -2.0 * std::log1p(std::exp(-0.5)), 1e-6);
}

TEST(CausalConv, UsesStateThenCarriesTheLastInputs) {
  Weight w;
  w.rows = 1;
  w.cols = 3;
  w.f32 = {0.5f, -1.0f, 2.0f};
  std::vector<float> state = {10.0f, 20.0f};  // two earlier inputs, oldest first
  const float x[2] = {1.0f, 3.0f};
  float out[2];
  CpuOps(ActDtype::kF32, 1).CausalConvSilu(x, 1, 2, 1, w, state.data(), out);
  auto silu = [](double u) { return u / (1 + std::exp(-u)); };
  EXPECT_NEAR(out[0], silu(0.5 * 10 - 20 + 2 * 1), 1e-5);
  EXPECT_NEAR(out[1], silu(0.5 * 20 - 1 + 2 * 3), 1e-5);
  EXPECT_EQ(state, (std::vector<float>{1.0f, 3.0f}));
}

}  // namespace
}  // namespace graft

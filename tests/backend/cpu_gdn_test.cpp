// The chunk-consistent Gated DeltaNet core against the plain recurrent delta rule
// (docs/architectures.md §6.3) evaluated in double precision, across chunk boundaries.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backend/cpu/cpu_ops.h"

namespace graft {
namespace {

struct Shape {
  int hk, hv, dk, dv, n;
};

class GdnCore : public ::testing::TestWithParam<Shape> {};

TEST_P(GdnCore, MatchesRecurrentRuleInDouble) {
  const Shape s = GetParam();
  const int conv_dim = 2 * s.hk * s.dk + s.hv * s.dv;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0, 1);
  std::uniform_real_distribution<float> ud(0, 1);
  std::vector<float> qkv(static_cast<size_t>(s.n) * conv_dim), beta(static_cast<size_t>(s.n) * s.hv), g(beta.size());
  for (auto& x : qkv) x = nd(rng);
  for (auto& x : beta) x = ud(rng);
  for (auto& x : g) x = -0.5f * ud(rng);

  std::vector<float> S(static_cast<size_t>(s.hv) * s.dk * s.dv), pk(static_cast<size_t>(kGdnChunk) * s.hv * s.dk),
      pvn(static_cast<size_t>(kGdnChunk) * s.hv * s.dv), pgam(static_cast<size_t>(kGdnChunk) * s.hv);
  GdnState st;
  st.S = S.data();
  st.pk = pk.data();
  st.pvn = pvn.data();
  st.pgam = pgam.data();
  std::vector<float> out(static_cast<size_t>(s.n) * s.hv * s.dv);
  GdnCoreArgs a{qkv.data(), beta.data(), g.data(), s.n, s.hk, s.hv, s.dk, s.dv, &st, out.data()};
  CpuOps(ActDtype::kF32, 2).GdnCore(a);
  EXPECT_EQ(st.pending, s.n % kGdnChunk);

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
  EXPECT_LT(std::sqrt(num / den), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Shapes, GdnCore,
                         ::testing::Values(Shape{1, 1, 4, 4, 1}, Shape{2, 4, 8, 12, 63}, Shape{2, 4, 8, 8, 64},
                                           Shape{1, 3, 16, 8, 150}, Shape{3, 6, 8, 12, 200}));

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

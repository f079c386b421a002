// Activation-aware truncated SVD (adapters/weighted_svd.h): on inputs whose energy sits in a
// few directions, it fits the delta's action on them better than the weight-space SVD at the
// same rank; with an identity Gram matrix it is the weight-space fit; bad Gram matrices are refused.
#include "adapters/weighted_svd.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace graft {
namespace {

// Σ_x ‖(D − B A) x‖² over the rows of x [t, k].
double OutputError(const std::vector<float>& d, const LowRank& lr, const std::vector<double>& x, int64_t n, int64_t k,
                   int64_t t) {
  double err = 0;
  for (int64_t s = 0; s < t; ++s) {
    std::vector<double> ax(static_cast<size_t>(lr.rank), 0.0);
    for (int i = 0; i < lr.rank; ++i)
      for (int64_t j = 0; j < k; ++j) ax[i] += lr.a[static_cast<size_t>(i * k + j)] * x[static_cast<size_t>(s * k + j)];
    for (int64_t o = 0; o < n; ++o) {
      double dx = 0, bax = 0;
      for (int64_t j = 0; j < k; ++j) dx += d[static_cast<size_t>(o * k + j)] * x[static_cast<size_t>(s * k + j)];
      for (int i = 0; i < lr.rank; ++i) bax += lr.b[static_cast<size_t>(o * lr.rank + i)] * ax[i];
      err += (dx - bax) * (dx - bax);
    }
  }
  return err;
}

TEST(WeightedSvd, FitsTheInputsItSeesBetterThanTheWeightSpaceFit) {
  const int64_t n = 48, k = 40, t = 400;
  std::mt19937 rng(3);
  std::normal_distribution<double> g(0.0, 1.0);
  std::vector<float> d(static_cast<size_t>(n * k));
  for (auto& v : d) v = static_cast<float>(g(rng));
  // Inputs: column j has scale 10 for the first 5 columns, 0.1 elsewhere (activation outliers).
  std::vector<double> x(static_cast<size_t>(t * k)), gram(static_cast<size_t>(k * k), 0.0);
  for (int64_t s = 0; s < t; ++s)
    for (int64_t j = 0; j < k; ++j) x[static_cast<size_t>(s * k + j)] = g(rng) * (j < 5 ? 10.0 : 0.1);
  for (int64_t s = 0; s < t; ++s)
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < k; ++j) gram[static_cast<size_t>(i * k + j)] += x[static_cast<size_t>(s * k + i)] * x[static_cast<size_t>(s * k + j)];
  const RankChoice r8{8, 0.0};
  auto plain = TruncatedSvd(d.data(), n, k, r8, 1);
  auto aware = WeightedTruncatedSvd(d.data(), n, k, gram, 1e-6, r8, 1);
  ASSERT_TRUE(plain.ok() && aware.ok());
  ASSERT_EQ(aware->rank, 8);
  const double e_plain = OutputError(d, *plain, x, n, k, t), e_aware = OutputError(d, *aware, x, n, k, t);
  EXPECT_LT(e_aware, 0.05 * e_plain) << "plain " << e_plain << " aware " << e_aware;
  // Balanced factors: each component's B column and A row have the same norm.
  for (int i = 0; i < aware->rank; ++i) {
    double na = 0, nb = 0;
    for (int64_t j = 0; j < k; ++j) na += std::pow(aware->a[static_cast<size_t>(i * k + j)], 2);
    for (int64_t o = 0; o < n; ++o) nb += std::pow(aware->b[static_cast<size_t>(o * aware->rank + i)], 2);
    EXPECT_NEAR(std::sqrt(na), std::sqrt(nb), 1e-3 * std::sqrt(na));
  }
}

TEST(WeightedSvd, IdentityGramIsTheWeightSpaceFit) {
  const int64_t n = 30, k = 20;
  std::mt19937 rng(4);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> d(static_cast<size_t>(n * k));
  for (auto& v : d) v = g(rng);
  std::vector<double> eye(static_cast<size_t>(k * k), 0.0);
  for (int64_t i = 0; i < k; ++i) eye[static_cast<size_t>(i * k + i)] = 1.0;
  auto plain = TruncatedSvd(d.data(), n, k, RankChoice{6, 0.0}, 1);
  auto aware = WeightedTruncatedSvd(d.data(), n, k, eye, 1e-9, RankChoice{6, 0.0}, 1);
  ASSERT_TRUE(plain.ok() && aware.ok());
  for (int64_t o = 0; o < n; ++o) {
    for (int64_t j = 0; j < k; ++j) {
      double p = 0, a = 0;
      for (int i = 0; i < 6; ++i) {
        p += plain->b[static_cast<size_t>(o * 6 + i)] * plain->a[static_cast<size_t>(i * k + j)];
        a += aware->b[static_cast<size_t>(o * 6 + i)] * aware->a[static_cast<size_t>(i * k + j)];
      }
      ASSERT_NEAR(a, p, 1e-4) << o << "," << j;
    }
  }
}

TEST(WeightedSvd, RefusesBadGramMatrices) {
  std::vector<float> d(12, 1.0f);
  EXPECT_FALSE(WeightedTruncatedSvd(d.data(), 3, 4, std::vector<double>(15, 0.0), 0.01, RankChoice{1, 0.0}, 1).ok())
      << "wrong size";
  EXPECT_FALSE(WeightedTruncatedSvd(d.data(), 3, 4, std::vector<double>(16, 0.0), 0.01, RankChoice{1, 0.0}, 1).ok())
      << "all-zero inputs";
  std::vector<double> eye(16, 0.0);
  for (int i = 0; i < 4; ++i) eye[static_cast<size_t>(i * 4 + i)] = 1.0;
  EXPECT_FALSE(WeightedTruncatedSvd(d.data(), 3, 4, eye, 0.0, RankChoice{1, 0.0}, 1).ok()) << "no damping";
  eye[5] = NAN;
  EXPECT_FALSE(WeightedTruncatedSvd(d.data(), 3, 4, eye, 0.01, RankChoice{1, 0.0}, 1).ok()) << "NaN";
}

}  // namespace
}  // namespace graft

#include "adapters/weighted_svd.h"

#include <cblas.h>
#include <fmt/core.h>
#include <lapacke.h>

#include <cmath>

namespace graft {

Result<LowRank> WeightedTruncatedSvd(const float* d, int64_t n, int64_t k, const std::vector<double>& gram, double damp,
                                     const RankChoice& choice, uint64_t seed) {
  if (n <= 0 || k <= 0 || gram.size() != static_cast<size_t>(k * k)) {
    return InvalidArgument(fmt::format("weighted SVD: the Gram matrix has {} values for K = {}", gram.size(), k));
  }
  if (!(damp > 0.0) || !std::isfinite(damp)) return InvalidArgument("weighted SVD: damping must be positive");
  double trace = 0;
  for (int64_t i = 0; i < k; ++i) trace += gram[static_cast<size_t>(i * k + i)];
  if (!(trace > 0.0) || !std::isfinite(trace)) {
    return InvalidArgument("weighted SVD: the calibration inputs of this projection are all zero or not finite");
  }
  std::vector<double> l = gram;
  const double delta = damp * trace / static_cast<double>(k);
  for (int64_t i = 0; i < k; ++i) l[static_cast<size_t>(i * k + i)] += delta;
  const lapack_int info = LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'L', static_cast<lapack_int>(k), l.data(), static_cast<lapack_int>(k));
  if (info != 0) return Internal(fmt::format("weighted SVD: Cholesky of the damped Gram matrix failed (info {})", info));
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = i + 1; j < k; ++j) l[static_cast<size_t>(i * k + j)] = 0.0;  // dpotrf leaves the upper part

  // M = D · L in double, then the fp32 truncated SVD of it.
  std::vector<double> dd(d, d + n * k), m(static_cast<size_t>(n * k));
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(n), static_cast<int>(k), static_cast<int>(k), 1.0,
              dd.data(), static_cast<int>(k), l.data(), static_cast<int>(k), 0.0, m.data(), static_cast<int>(k));
  std::vector<float> mf(m.begin(), m.end());
  GRAFT_ASSIGN_OR_RETURN(LowRank lr, TruncatedSvd(mf.data(), n, k, choice, seed));
  const int r = lr.rank;
  // A = (S^½ Vᵀ) · L⁻¹: solve X · L = A_w for X.
  std::vector<double> a(lr.a.begin(), lr.a.end());
  cblas_dtrsm(CblasRowMajor, CblasRight, CblasLower, CblasNoTrans, CblasNonUnit, r, static_cast<int>(k), 1.0, l.data(),
              static_cast<int>(k), a.data(), static_cast<int>(k));
  for (int i = 0; i < r; ++i) {
    double na = 0, nb = 0;
    for (int64_t j = 0; j < k; ++j) na += a[static_cast<size_t>(i * k + j)] * a[static_cast<size_t>(i * k + j)];
    for (int64_t j = 0; j < n; ++j) nb += static_cast<double>(lr.b[static_cast<size_t>(j * r + i)]) * lr.b[static_cast<size_t>(j * r + i)];
    const double c = na > 0 && nb > 0 ? std::sqrt(std::sqrt(nb / na)) : 1.0;
    for (int64_t j = 0; j < k; ++j) lr.a[static_cast<size_t>(i * k + j)] = static_cast<float>(a[static_cast<size_t>(i * k + j)] * c);
    for (int64_t j = 0; j < n; ++j) lr.b[static_cast<size_t>(j * r + i)] = static_cast<float>(lr.b[static_cast<size_t>(j * r + i)] / c);
  }
  return lr;
}

}  // namespace graft

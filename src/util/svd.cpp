#include "util/svd.h"

#include <cblas.h>
#include <fmt/core.h>
#include <lapacke.h>

#include <algorithm>
#include <cmath>
#include <random>

namespace graft {
namespace {

constexpr int kOversample = 10;
constexpr int kPowerIterations = 2;

// Full thin SVD: d [n, k] -> u [n, m], s [m], vt [m, k], m = min(n, k).
Status FullSvd(std::vector<float> d, int64_t n, int64_t k, std::vector<float>& u, std::vector<float>& s,
               std::vector<float>& vt) {
  const int64_t m = std::min(n, k);
  u.assign(static_cast<size_t>(n * m), 0.0f);
  s.assign(static_cast<size_t>(m), 0.0f);
  vt.assign(static_cast<size_t>(m * k), 0.0f);
  const lapack_int info = LAPACKE_sgesdd(LAPACK_ROW_MAJOR, 'S', static_cast<lapack_int>(n), static_cast<lapack_int>(k),
                                         d.data(), static_cast<lapack_int>(k), s.data(), u.data(),
                                         static_cast<lapack_int>(m), vt.data(), static_cast<lapack_int>(k));
  if (info != 0) return Internal(fmt::format("LAPACK sgesdd failed on a {}x{} matrix (info {})", n, k, info));
  return Status::Ok();
}

// Orthonormalises the columns of y [n, l] in place (QR).
Status Orthonormalize(std::vector<float>& y, int64_t n, int64_t l) {
  std::vector<float> tau(static_cast<size_t>(l));
  lapack_int info = LAPACKE_sgeqrf(LAPACK_ROW_MAJOR, static_cast<lapack_int>(n), static_cast<lapack_int>(l), y.data(),
                                   static_cast<lapack_int>(l), tau.data());
  if (info == 0) {
    info = LAPACKE_sorgqr(LAPACK_ROW_MAJOR, static_cast<lapack_int>(n), static_cast<lapack_int>(l),
                          static_cast<lapack_int>(l), y.data(), static_cast<lapack_int>(l), tau.data());
  }
  if (info != 0) return Internal(fmt::format("LAPACK QR failed on a {}x{} matrix (info {})", n, l, info));
  return Status::Ok();
}

// Randomized: u [n, l], s [l], vt [l, k] approximating the top l singular triplets.
Status RandomizedSvd(const float* d, int64_t n, int64_t k, int64_t l, uint64_t seed, std::vector<float>& u,
                     std::vector<float>& s, std::vector<float>& vt) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> omega(static_cast<size_t>(k * l));
  for (auto& x : omega) x = nd(rng);
  std::vector<float> y(static_cast<size_t>(n * l)), z(static_cast<size_t>(k * l));
  // y = D·Ω
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, l, k, 1.0f, d, k, omega.data(), l, 0.0f, y.data(), l);
  GRAFT_RETURN_IF_ERROR(Orthonormalize(y, n, l));
  for (int it = 0; it < kPowerIterations; ++it) {
    // z = Dᵀ·y, y = D·z (re-orthonormalised each time)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, k, l, n, 1.0f, d, k, y.data(), l, 0.0f, z.data(), l);
    GRAFT_RETURN_IF_ERROR(Orthonormalize(z, k, l));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, l, k, 1.0f, d, k, z.data(), l, 0.0f, y.data(), l);
    GRAFT_RETURN_IF_ERROR(Orthonormalize(y, n, l));
  }
  // small = Qᵀ·D [l, k]; its SVD gives the factors.
  std::vector<float> small(static_cast<size_t>(l * k));
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, l, k, n, 1.0f, y.data(), l, d, k, 0.0f, small.data(), k);
  std::vector<float> us, vts;
  GRAFT_RETURN_IF_ERROR(FullSvd(std::move(small), l, k, us, s, vts));
  vt = std::move(vts);
  u.assign(static_cast<size_t>(n * l), 0.0f);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, l, l, 1.0f, y.data(), l, us.data(), l, 0.0f, u.data(), l);
  return Status::Ok();
}

}  // namespace

Result<LowRank> TruncatedSvd(const float* d, int64_t n, int64_t k, const RankChoice& choice, uint64_t seed) {
  if (n <= 0 || k <= 0) return InvalidArgument("svd: empty matrix");
  if ((choice.rank > 0) == (choice.energy > 0)) return InvalidArgument("svd: give exactly one of a rank or an energy");
  if (choice.energy > 1.0) return InvalidArgument(fmt::format("svd: energy {} must be in (0, 1]", choice.energy));
  const int64_t m = std::min(n, k);
  std::vector<float> u, s, vt;
  int64_t cols;  // columns of u / rows of vt
  if (choice.rank > 0 && choice.rank + kOversample < m / 2) {
    cols = choice.rank + kOversample;
    GRAFT_RETURN_IF_ERROR(RandomizedSvd(d, n, k, cols, seed, u, s, vt));
  } else {
    cols = m;
    GRAFT_RETURN_IF_ERROR(FullSvd(std::vector<float>(d, d + n * k), n, k, u, s, vt));
  }
  double total = 0;
  for (float x : s) total += static_cast<double>(x) * x;
  int r;
  if (choice.rank > 0) {
    r = static_cast<int>(std::min<int64_t>(choice.rank, cols));
  } else {
    r = 0;
    double kept = 0;
    while (r < cols && (total == 0 || kept < choice.energy * total)) kept += static_cast<double>(s[r]) * s[r], ++r;
    r = std::max(r, 1);
  }
  LowRank out;
  out.rank = r;
  out.singular = s;
  double kept = 0;
  for (int i = 0; i < r; ++i) kept += static_cast<double>(s[i]) * s[i];
  out.kept_energy = total > 0 ? kept / total : 1.0;
  out.a.resize(static_cast<size_t>(r * k));
  out.b.resize(static_cast<size_t>(n * r));
  for (int i = 0; i < r; ++i) {
    const float root = std::sqrt(std::max(s[i], 0.0f));
    for (int64_t c = 0; c < k; ++c) out.a[i * k + c] = root * vt[i * k + c];
    for (int64_t row = 0; row < n; ++row) out.b[row * r + i] = u[row * cols + i] * root;
  }
  return out;
}

}  // namespace graft

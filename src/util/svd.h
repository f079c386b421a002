// Truncated SVD of a weight delta D [n, k] (row-major fp32) into LoRA factors
//   D ≈ B · A,  A = diag(√S_r)·Vᵀ_r  [r, k],  B = U_r·diag(√S_r)  [n, r]
// (the singular values split evenly between the factors, so neither is badly scaled).
//
// The rank is fixed (clamped to min(n, k)) or chosen as the smallest r whose singular values
// keep `energy` of Σ s² (0 < energy <= 1). Fixed ranks well below min(n, k) use a randomized
// range finder with power iterations (Halko et al.), seeded, so results are reproducible; other
// cases use LAPACK's full sgesdd. BLAS threads follow OpenBLAS's own setting.
#pragma once

#include <cstdint>
#include <vector>

#include "util/status.h"

namespace graft {

struct RankChoice {
  int rank = 0;         // > 0: fixed rank
  double energy = 0.0;  // > 0: smallest rank keeping this fraction of Σ s²
};

struct LowRank {
  int rank = 0;
  std::vector<float> a;         // [rank, k]
  std::vector<float> b;         // [n, rank]
  std::vector<float> singular;  // the leading singular values found (at least rank of them)
  double kept_energy = 1.0;     // Σ_{i<rank} s² / Σ s² (of the values found)
};

Result<LowRank> TruncatedSvd(const float* d, int64_t n, int64_t k, const RankChoice& choice, uint64_t seed);

}  // namespace graft

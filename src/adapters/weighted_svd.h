// Activation-aware truncated SVD: LoRA factors for a weight delta D [n, k] that minimise the
// error on the inputs the projection actually sees, not in weight space:
//   min over rank r of  Σ_x ‖(D − B·A) x‖²  =  tr((D − BA) G (D − BA)ᵀ),  G = Σ_x x xᵀ [k, k]
// (calibration inputs, tools/calibration.h). With G + δI = L Lᵀ (Cholesky; δ = damp · mean of
// G's diagonal keeps directions the calibration never excited from being fitted by accident),
// the optimum is the truncated SVD of D·L mapped back: D·L ≈ U S Vᵀ, B = U S^½, A = S^½ Vᵀ L⁻¹
// — then each rank component rescaled so that its columns of B and rows of A have equal norms
// (B·A unchanged; neither factor badly scaled for bf16). G = identity gives TruncatedSvd's fit.
#pragma once

#include <cstdint>
#include <vector>

#include "util/svd.h"
#include "util/status.h"

namespace graft {

Result<LowRank> WeightedTruncatedSvd(const float* d, int64_t n, int64_t k, const std::vector<double>& gram, double damp,
                                     const RankChoice& choice, uint64_t seed);

}  // namespace graft

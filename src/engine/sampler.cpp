#include "engine/sampler.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>

namespace graft {

Status ValidateSamplingParams(const SamplingParams& p) {
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) {
    return InvalidArgument(fmt::format("temperature {} must be a finite number >= 0", p.temperature));
  }
  if (p.top_k < 0) return InvalidArgument(fmt::format("top_k {} must be >= 0 (0 disables it)", p.top_k));
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return InvalidArgument(fmt::format("top_p {} must be in (0, 1]", p.top_p));
  return Status::Ok();
}

int32_t Sampler::Sample(const float* logits, int vocab) {
  if (p_.temperature == 0.0f) {
    int32_t best = 0;
    for (int32_t i = 1; i < vocab; ++i) if (logits[i] > logits[best]) best = i;
    return best;
  }
  scratch_.resize(static_cast<size_t>(vocab));
  for (int32_t i = 0; i < vocab; ++i) scratch_[i] = {logits[i] / p_.temperature, i};
  // Descending by logit, ascending id on ties: a total order, so the result is deterministic.
  auto by_logit = [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; };
  size_t keep = scratch_.size();
  if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < keep) {
    keep = static_cast<size_t>(p_.top_k);
    std::partial_sort(scratch_.begin(), scratch_.begin() + static_cast<long>(keep), scratch_.end(), by_logit);
  } else {
    std::sort(scratch_.begin(), scratch_.end(), by_logit);
  }
  return Draw(keep);
}

int Sampler::CandidatesNeeded(int max_k) const {
  if (p_.temperature == 0.0f) return 1;
  if (p_.top_k > 0 && p_.top_k <= max_k) return p_.top_k;
  return 0;
}

int32_t Sampler::SampleCandidates(const float* values, const int32_t* ids, int n) {
  if (p_.temperature == 0.0f) return ids[0];
  const int keep = std::min(n, p_.top_k);
  scratch_.resize(static_cast<size_t>(keep));
  for (int i = 0; i < keep; ++i) scratch_[static_cast<size_t>(i)] = {values[i], ids[i]};
  return Draw(static_cast<size_t>(keep));
}

int32_t Sampler::Draw(size_t keep) {
  const float mx = scratch_[0].first;
  std::vector<double> probs(keep);
  double z = 0;
  for (size_t i = 0; i < keep; ++i) z += probs[i] = std::exp(static_cast<double>(scratch_[i].first - mx));
  if (p_.top_p < 1.0f) {
    double cum = 0;
    size_t n = 0;
    while (n < keep) {
      cum += probs[n] / z;
      ++n;
      if (cum >= p_.top_p) break;
    }
    keep = n;
    z = 0;
    for (size_t i = 0; i < keep; ++i) z += probs[i];
  }
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53 * z;
  double acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += probs[i];
    if (u < acc) return scratch_[i].second;
  }
  return scratch_[keep - 1].second;
}

}  // namespace graft

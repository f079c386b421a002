#include "engine/sampler.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>

namespace graft {

Status ValidateSamplingParams(const SamplingParams& p, int vocab) {
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) {
    return InvalidArgument(fmt::format("temperature {} must be a finite number >= 0", p.temperature));
  }
  if (p.top_k < 0) return InvalidArgument(fmt::format("top_k {} must be >= 0 (0 disables it)", p.top_k));
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return InvalidArgument(fmt::format("top_p {} must be in (0, 1]", p.top_p));
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return InvalidArgument(fmt::format("min_p {} must be in [0, 1]", p.min_p));
  if (!(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f)) {
    return InvalidArgument(fmt::format("presence_penalty {} must be in [-2, 2]", p.presence_penalty));
  }
  if (!(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f)) {
    return InvalidArgument(fmt::format("frequency_penalty {} must be in [-2, 2]", p.frequency_penalty));
  }
  if (!(p.repetition_penalty > 0.0f) || !std::isfinite(p.repetition_penalty)) {
    return InvalidArgument(fmt::format("repetition_penalty {} must be a finite number > 0 (1 disables it)",
                                       p.repetition_penalty));
  }
  std::vector<int32_t> tokens;
  for (const auto& [t, bias] : p.logit_bias) {
    if (t < 0 || (vocab > 0 && t >= vocab)) {
      return InvalidArgument(fmt::format("logit_bias: token {} is outside the vocabulary (0..{})", t, vocab - 1));
    }
    if (!(bias >= -100.0f && bias <= 100.0f)) {
      return InvalidArgument(fmt::format("logit_bias: the bias {} for token {} must be in [-100, 100]", bias, t));
    }
    tokens.push_back(t);
  }
  std::sort(tokens.begin(), tokens.end());
  if (auto d = std::adjacent_find(tokens.begin(), tokens.end()); d != tokens.end()) {
    return InvalidArgument(fmt::format("logit_bias: token {} is given twice", *d));
  }
  return Status::Ok();
}

Sampler::Sampler(const SamplingParams& p, const std::vector<int32_t>& prompt) : p_(p), rng_(p.seed) {
  if (p_.repetition_penalty != 1.0f) {
    prompt_set_ = prompt;
    std::sort(prompt_set_.begin(), prompt_set_.end());
    prompt_set_.erase(std::unique(prompt_set_.begin(), prompt_set_.end()), prompt_set_.end());
  }
}

void Sampler::Accept(int32_t token) {
  if (p_.Shapes()) ++output_counts_[token];
  if (ban_left_ > 0) --ban_left_;
}

void Sampler::BanUntil(std::vector<int32_t> tokens, int n) {
  banned_ = std::move(tokens);
  ban_left_ = banned_.empty() ? 0 : n;
}

void Sampler::Shape(float* row, int vocab) const {
  for (const auto& [t, bias] : p_.logit_bias) {
    if (t >= 0 && t < vocab) row[t] += bias;
  }
  if (p_.repetition_penalty != 1.0f) {
    const float r = p_.repetition_penalty;
    auto penalize = [&](int32_t t) {
      if (t >= 0 && t < vocab) row[t] = row[t] > 0.0f ? row[t] / r : row[t] * r;
    };
    for (int32_t t : prompt_set_) penalize(t);
    for (const auto& [t, count] : output_counts_) {
      if (!std::binary_search(prompt_set_.begin(), prompt_set_.end(), t)) penalize(t);
    }
  }
  for (const auto& [t, count] : output_counts_) {
    if (t >= 0 && t < vocab) row[t] -= p_.frequency_penalty * static_cast<float>(count) + p_.presence_penalty;
  }
  if (ban_left_ > 0) {
    for (int32_t t : banned_) {
      if (t >= 0 && t < vocab) row[t] = -INFINITY;
    }
  }
}

int32_t Sampler::Sample(const float* logits, int vocab) {
  if (Shaping()) {
    shaped_.assign(logits, logits + vocab);
    Shape(shaped_.data(), vocab);
    logits = shaped_.data();
  }
  return constraint_ ? SampleConstrained(logits, vocab) : SampleFrom(logits, vocab, nullptr);
}

namespace {
// Descending by logit, ascending id on ties: a total order, so the result is deterministic.
bool ByLogit(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
  return a.first != b.first ? a.first > b.first : a.second < b.second;
}
constexpr size_t kLazyCandidates = 64;  // greedy under a constraint: the best few checked before a full mask
}  // namespace

int32_t Sampler::SampleConstrained(const float* logits, int vocab) {
  if (p_.temperature == 0.0f) {
    // The best allowed token is the first allowed one in the row's order: check the best few
    // before computing the whole mask.
    scratch_.resize(static_cast<size_t>(vocab));
    for (int32_t i = 0; i < vocab; ++i) scratch_[static_cast<size_t>(i)] = {logits[i], i};
    const size_t k = std::min(kLazyCandidates, scratch_.size());
    std::partial_sort(scratch_.begin(), scratch_.begin() + static_cast<long>(k), scratch_.end(), ByLogit);
    for (size_t i = 0; i < k; ++i) {
      if (constraint_->Allows(scratch_[i].second)) return scratch_[i].second;
    }
  }
  constraint_->Mask(allowed_);
  allowed_.resize(static_cast<size_t>(vocab), 0);
  return SampleFrom(logits, vocab, allowed_.data());
}

int32_t Sampler::SampleFrom(const float* logits, int vocab, const uint8_t* allowed) {
  if (p_.temperature == 0.0f) {
    int32_t best = -1;
    for (int32_t i = 0; i < vocab; ++i) {
      if ((!allowed || allowed[i]) && (best < 0 || logits[i] > logits[best])) best = i;
    }
    return best;
  }
  scratch_.clear();
  for (int32_t i = 0; i < vocab; ++i) {
    if (!allowed || allowed[i]) scratch_.emplace_back(logits[i] / p_.temperature, i);
  }
  if (scratch_.empty()) return -1;
  size_t keep = scratch_.size();
  if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < keep) {
    keep = static_cast<size_t>(p_.top_k);
    std::partial_sort(scratch_.begin(), scratch_.begin() + static_cast<long>(keep), scratch_.end(), ByLogit);
  } else {
    std::sort(scratch_.begin(), scratch_.end(), ByLogit);
  }
  if (p_.min_p > 0.0f) {  // a prefix of the sorted row: p_i / p_max = exp(l_i - l_max) >= min_p
    const double top = scratch_[0].first;
    size_t n = 1;
    while (n < keep && std::exp(static_cast<double>(scratch_[n].first) - top) >= p_.min_p) ++n;
    keep = n;
  }
  return Draw(keep);
}

int Sampler::CandidatesNeeded(int max_k) const {
  if (Shaping() || constraint_) return 0;
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

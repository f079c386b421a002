// How closely a candidate model follows a reference on random token sequences: KL(reference ‖
// candidate) of every position's next-token distribution (mean and max) and top-1 agreement.
// The quality reports of `graft adapter extract` and `graft quantize`.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "util/status.h"

namespace graft {

struct TokenAgreement {
  int64_t positions = 0;
  double mean_kl = 0, max_kl = 0, top1 = 0;
};

// Writes the logits [ids.size(), vocab] of one sequence run from an empty cache.
using SequenceLogits = std::function<Status(const std::vector<int32_t>& ids, float* logits)>;

// `sequences` sequences of `length` tokens drawn uniformly from [0, vocab) by mt19937(seed).
Result<TokenAgreement> AgreementOnRandomTokens(int vocab, int sequences, int length, uint32_t seed,
                                               const SequenceLogits& reference, const SequenceLogits& candidate);

}  // namespace graft

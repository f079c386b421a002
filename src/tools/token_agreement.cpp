#include "tools/token_agreement.h"

#include <algorithm>
#include <random>

#include "tools/kl.h"

namespace graft {

Result<TokenAgreement> AgreementOnRandomTokens(int vocab, int sequences, int length, uint32_t seed,
                                               const SequenceLogits& reference, const SequenceLogits& candidate) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, vocab - 1);
  TokenAgreement a;
  double kl_sum = 0;
  int64_t same = 0;
  for (int s = 0; s < sequences; ++s) {
    std::vector<int32_t> ids(static_cast<size_t>(length));
    for (auto& t : ids) t = tok(rng);
    std::vector<float> ref(ids.size() * static_cast<size_t>(vocab)), cand(ref.size());
    GRAFT_RETURN_IF_ERROR(reference(ids, ref.data()));
    GRAFT_RETURN_IF_ERROR(candidate(ids, cand.data()));
    for (int t = 0; t < length; ++t) {
      const float* pr = ref.data() + static_cast<size_t>(t) * vocab;
      const float* pc = cand.data() + static_cast<size_t>(t) * vocab;
      const double kl = KlOfLogits(pr, pc, vocab);
      kl_sum += kl;
      a.max_kl = std::max(a.max_kl, kl);
      same += std::max_element(pr, pr + vocab) - pr == std::max_element(pc, pc + vocab) - pc;
      ++a.positions;
    }
  }
  a.mean_kl = kl_sum / static_cast<double>(std::max<int64_t>(a.positions, 1));
  a.top1 = static_cast<double>(same) / static_cast<double>(std::max<int64_t>(a.positions, 1));
  return a;
}

}  // namespace graft

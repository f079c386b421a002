#include "tools/compare_logits.h"

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "io/checkpoint.h"
#include "tools/kl.h"
#include "io/safetensors.h"

namespace graft {
namespace {


}  // namespace

Result<std::vector<LogitsAgreement>> CompareLogitsFiles(const std::string& reference, const std::string& candidate) {
  GRAFT_ASSIGN_OR_RETURN(SafetensorsFile ref, SafetensorsFile::Open(reference));
  GRAFT_ASSIGN_OR_RETURN(SafetensorsFile cand, SafetensorsFile::Open(candidate));
  std::vector<LogitsAgreement> out;
  LogitsAgreement all{"all"};
  std::vector<const TensorInfo*> sorted;
  for (const auto& t : ref.tensors()) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->name < b->name; });
  for (const TensorInfo* rt : sorted) {
    const TensorInfo* ct = cand.Find(rt->name);
    if (!ct) return InvalidArgument(fmt::format("{}: no sequence '{}' (the reference has it)", candidate, rt->name));
    if (rt->shape.size() != 2 || ct->shape != rt->shape) {
      return InvalidArgument(fmt::format("sequence '{}': reference shape [{}] and candidate shape [{}] differ "
                                         "or are not [len, vocab]", rt->name, fmt::join(rt->shape, ", "),
                                         fmt::join(ct->shape, ", ")));
    }
    GRAFT_ASSIGN_OR_RETURN(std::vector<float> r, ReadAsFloat(TensorRef{&ref, rt}));
    GRAFT_ASSIGN_OR_RETURN(std::vector<float> c, ReadAsFloat(TensorRef{&cand, ct}));
    const int len = static_cast<int>(rt->shape[0]), vocab = static_cast<int>(rt->shape[1]);
    LogitsAgreement a{rt->name};
    for (int t = 0; t < len; ++t) {
      const float* rp = r.data() + static_cast<size_t>(t) * vocab;
      const float* cp = c.data() + static_cast<size_t>(t) * vocab;
      a.positions++;
      a.top1_same += std::max_element(rp, rp + vocab) - rp == std::max_element(cp, cp + vocab) - cp;
      for (int v = 0; v < vocab; ++v) {
        a.max_abs_diff = std::max(a.max_abs_diff, static_cast<double>(std::fabs(rp[v] - cp[v])));
        a.max_abs_ref = std::max(a.max_abs_ref, static_cast<double>(std::fabs(rp[v])));
      }
      a.mean_kl += KlOfLogits(rp, cp, vocab);
    }
    all.positions += a.positions;
    all.top1_same += a.top1_same;
    all.max_abs_diff = std::max(all.max_abs_diff, a.max_abs_diff);
    all.max_abs_ref = std::max(all.max_abs_ref, a.max_abs_ref);
    all.mean_kl += a.mean_kl;
    a.mean_kl /= std::max(a.positions, 1);
    out.push_back(a);
  }
  all.mean_kl /= std::max(all.positions, 1);
  out.push_back(all);
  return out;
}

}  // namespace graft

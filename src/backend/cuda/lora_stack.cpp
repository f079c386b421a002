#include "backend/cuda/lora_stack.h"

namespace graft::cuda {

std::vector<std::pair<size_t, size_t>> StackedRuns(const std::vector<FactorSpan>& factors, int64_t k, int max_run) {
  auto stackable = [k](const FactorSpan& f) { return f.bf16 && f.cols == k && f.rows > 0 && f.rows % 8 == 0; };
  std::vector<std::pair<size_t, size_t>> runs;
  for (size_t i = 0; i < factors.size();) {
    size_t j = i + 1;
    if (stackable(factors[i])) {
      const char* next = static_cast<const char*>(factors[i].data) + factors[i].rows * k * 2;
      while (j < factors.size() && static_cast<int>(j - i) < max_run && stackable(factors[j]) &&
             factors[j].data == next) {
        next += factors[j].rows * k * 2;
        ++j;
      }
    }
    runs.emplace_back(i, j);
    i = j;
  }
  return runs;
}

}  // namespace graft::cuda

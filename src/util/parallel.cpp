#include "util/parallel.h"

#include <algorithm>
#include <thread>
#include <vector>

namespace graft {

void ParallelFor(int64_t n, int threads, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  const int64_t t = std::min<int64_t>(std::max(threads, 1), n);
  if (t == 1) {
    fn(0, n);
    return;
  }
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(t - 1));
  const int64_t step = (n + t - 1) / t;
  for (int64_t i = 1; i < t; ++i) {
    const int64_t b = i * step, e = std::min(n, b + step);
    if (b < e) pool.emplace_back(fn, b, e);
  }
  fn(0, std::min(n, step));
  for (auto& th : pool) th.join();
}

}  // namespace graft

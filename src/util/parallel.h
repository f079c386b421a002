// ParallelFor: split [0, n) into contiguous ranges over a fixed number of threads.
//
// Each index is processed by exactly one thread, and what fn computes for an index must not
// depend on which thread runs it (the CPU backend's results are therefore independent of the
// thread count). threads <= 1 runs inline.
#pragma once

#include <cstdint>
#include <functional>

namespace graft {

void ParallelFor(int64_t n, int threads, const std::function<void(int64_t begin, int64_t end)>& fn);

}  // namespace graft

// Seconds elapsed on the steady clock since t0 (timings in logs, metrics and tools).
#pragma once

#include <chrono>

namespace graft {

inline double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace graft

// Metrics: counters and latency histograms, rendered as Prometheus text for /metrics.
// Thread-safe.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace graft {

class Metrics {
 public:
  // One finished HTTP request.
  void Observe(const std::string& endpoint, const std::string& model, int status, double seconds);
  std::string Render(const EngineStats& engine) const;

 private:
  struct Histogram {
    std::vector<uint64_t> buckets;  // cumulative counts per bound
    uint64_t count = 0;
    double sum = 0;
  };
  mutable std::mutex mu_;
  std::map<std::string, uint64_t> requests_;    // labels -> count   GUARDED_BY(mu_)
  std::map<std::string, Histogram> latency_;    // labels -> histogram GUARDED_BY(mu_)
};

}  // namespace graft

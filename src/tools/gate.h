// `graft gate`: how close a candidate's decisions stay to a reference's (usually the merged
// release's, from `graft decide`), question by question.
//
// For every question: KL(reference ‖ candidate) over its choices (natural log) and whether the
// top choices agree. Reported overall and per record-length bucket (by the reference's
// usage.record_tokens: <=1K, 1-4K, 4-10K, >10K): mean KL ± standard error, KL percentiles
// (50/90/99/max, nearest rank) and top-choice agreement. The gate passes when mean KL <=
// max_kl and agreement >= min_top percent. Files must pair up exactly: the same number of
// lines, the same question ids in order, the same choices; error lines are mismatches too.
#pragma once

#include <string>
#include <vector>

#include "util/status.h"

namespace graft {

struct GateStats {
  std::string bucket;  // "all", "<=1K", "1K-4K", "4K-10K", ">10K"
  int questions = 0;
  double mean_kl = 0, stderr_kl = 0, p50 = 0, p90 = 0, p99 = 0, max_kl = 0;
  double top_agreement = 0;  // percent
};

struct GateReport {
  std::vector<GateStats> rows;  // "all" first, then the non-empty buckets
  bool passed = false;
  std::string Table() const;
};

Result<GateReport> RunGate(const std::string& reference, const std::string& candidate, double max_kl, double min_top);

}  // namespace graft

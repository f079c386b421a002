// `graft adapter verify` and `graft adapter inspect`.
//
// verify: the adapter loads and validates against the base (inventory, shapes, dtypes, values,
// base identity); every tensor file's SHA-256 matches graft_manifest.json and no file holds a
// tensor the manifest does not list; with exact and a merged checkpoint, every projection
// reconstructs bit for bit (weights/exact.h). Any mismatch makes the Status non-ok; the report
// lists what was checked.
#pragma once

#include <string>

#include "util/status.h"

namespace graft {

struct VerifyJob {
  std::string dir, base, merged;
  bool exact = false;
  bool force = false;  // accept a manifest naming another base
  std::string cache_dir;
};

// Appends one line per check to *report.
Status RunVerify(const VerifyJob& job, std::string* report);
Result<std::string> InspectAdapter(const std::string& dir);

}  // namespace graft

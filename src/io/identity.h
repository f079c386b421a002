// Checkpoint identity (docs/design.md §3.7): SHA-256 over the config and every tensor.
//
// Digest input, in order: "graft-identity-v1\n"; config.json re-serialised canonically
// (sorted keys, no whitespace) and "\n"; then for every tensor sorted by name:
// name "\n" dtype "\n" shape as "d0,d1,..." "\n" byte count as decimal "\n" and the bytes.
// The same weights in a different shard layout or file order give the same identity.
//
// ComputeIdentity hashes every byte (with a progress bar on a terminal). CachedIdentity keeps
// the result in cache_dir keyed by the directory's absolute path, and reuses it only while
// every file's name, size and modification time are unchanged.
#pragma once

#include <string>

#include "io/checkpoint.h"
#include "util/status.h"

namespace graft {

Result<std::string> ComputeIdentity(const Checkpoint& ckpt, const std::string& config_json_text);

struct IdentityResult {
  std::string identity;  // 64 hex digits
  bool from_cache = false;
};

// cache_dir may be empty (no caching).
Result<IdentityResult> CachedIdentity(const Checkpoint& ckpt, const std::string& cache_dir);

}  // namespace graft

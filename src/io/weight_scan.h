// ScanNonFinite: every floating-point tensor of a checkpoint read for NaN and infinity (BF16,
// F16, F32, F64, and FP8 E4M3 / E5M2, whose NaN codes are checked; integer, packed 4-bit and
// scale-exponent tensors hold none). A served model with such a value answers with NaN
// probabilities; `graft info --check-weights` and `graft serve --check-weights` (on by default
// for small checkpoints) refuse it, naming each tensor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "util/status.h"

namespace graft {

struct NonFiniteTensor {
  std::string name;
  uint64_t count = 0;  // non-finite values
  uint64_t first = 0;  // index of the first one
};

struct WeightScan {
  uint64_t tensors = 0, bytes = 0;       // floating-point tensors read, and their bytes
  std::vector<NonFiniteTensor> bad;      // in checkpoint order
};

// threads: tensors scanned in parallel. Shows progress on stderr.
WeightScan ScanNonFinite(const Checkpoint& ckpt, int threads);

// An error naming the tensors (at most 8, then how many more), or Ok when there are none.
Status NonFiniteError(const Checkpoint& ckpt, const WeightScan& scan);

}  // namespace graft

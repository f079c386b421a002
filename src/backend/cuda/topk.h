// CUDA sampling candidates: the contract of Ops::TopK on device pointers.
//
// One block per row makes k passes over the row; pass j finds, by a fixed block-wide tree,
// the best entry strictly after pass j-1's in the total order (value descending, id
// ascending). y = x / temperature is an IEEE division, as on the host, so the candidates are
// the very ones the CPU reference picks. A row never reads another row.
#pragma once

#include <cstdint>

#include "util/status.h"

namespace graft::cuda {

// x [rows, vocab], temperature [rows], values / ids [rows, k]: all device memory. k <= 64.
Status TopK(const float* x, int64_t rows, int vocab, const float* temperature, int k, float* values, int32_t* ids,
            void* stream);

}  // namespace graft::cuda

// Tensor maps for the bulk tensor copy engine (TMA): the description of a row-major 2-D array
// that a kernel's cp.async.bulk.tensor copies read boxes of (wgmma_ptx.cuh: TmaLoad2d).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "util/status.h"

namespace graft::cuda {

// map describes data [rows][cols] (elements of elem_bytes, 1 or 2: uint8 or bf16; row-major,
// rows cols * elem_bytes bytes apart, which must be a multiple of 16; data 16-byte aligned) for
// boxes of box_cols x box_rows elements stored in the 128-byte swizzle (box_cols * elem_bytes ==
// 128), zeros for coordinates past the edges. `who` names the caller in errors. The driver's
// encoder is fetched once.
Status EncodeSwizzled128(CUtensorMap* map, const void* data, int elem_bytes, int64_t rows, int64_t cols, int box_cols,
                         int box_rows, const char* who);

}  // namespace graft::cuda

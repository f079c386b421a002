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

// map describes bf16 data [rows][heads][64 · col_boxes] (row-major, 16-byte aligned) for boxes of
// 64 columns x 1 head x box_rows rows (at most 256) in the 128-byte swizzle: a box is box_rows
// rows of 128 bytes, one head's 64 columns each (TmaLoad3d's coordinates: column, head, row).
// For KV pages, whose rows are tokens [page · page_size + slot] and whose heads are the key-value
// heads.
Status EncodeSwizzled128Heads(CUtensorMap* map, const void* data, int64_t rows, int heads, int col_boxes, int box_rows,
                              const char* who);

}  // namespace graft::cuda

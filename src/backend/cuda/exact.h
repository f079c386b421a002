// CUDA exact-mode reconstruction: the contract of Ops::ExactWeight (weights/exact.h).
//
//   ExactReconstruct   out[r][c] = bf16(float(base[r][c]) + Σ_j b[r][j]·a[j][c]) for the rows
//                      of one module: fp32, j ascending, every product and sum rounded on its
//                      own (__fmul_rn / __fadd_rn, never a fused multiply-add), the float ->
//                      bf16 rounding bit for bit the CPU's (util/bf16.h, NaN included).
//   ExactResidual      one thread per chunk of kResidualChunk values decodes its varints from
//                      the chunk table and writes the values (chunks write disjoint elements).
// Each output element is written by one thread in one fixed order, so the result is the
// CPU reference's bits whatever the launch shape.
#pragma once

#include <cstdint>

#include "backend/cuda/device_weight.h"
#include "util/status.h"

namespace graft::cuda {

// base, out: bf16 [rows, k] (device, base already offset to the module's first row);
// a [rank, k] and b [rows, rank] in either storage format.
Status ExactReconstruct(const uint16_t* base, int64_t rows, int64_t k, const DevWeight& a, const DevWeight& b, int rank,
                        uint16_t* out, void* stream);

// The residual of one module on the device: stream (varints), values (bf16), chunk tables.
struct DevResidual {
  const uint8_t* stream = nullptr;
  const uint16_t* values = nullptr;
  const uint32_t* chunk_byte = nullptr;
  const int64_t* chunk_prev = nullptr;
  int64_t num_values = 0, chunks = 0;
};
// out: bf16, the module's first element (indices are relative to it).
Status ExactResidualApply(const DevResidual& r, uint16_t* out, void* stream);

}  // namespace graft::cuda

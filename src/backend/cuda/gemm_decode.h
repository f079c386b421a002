// The decode GEMM (MatMul's form for 1 to 16 rows of bf16 activations against a dense bf16
// weight): y[m, N] = xb[m, K] · Wᵀ, the activations already bf16 (gemm_pipe.h's ToBf16).
//
// A decode step reads every weight once for a handful of rows, so the whole game is keeping
// enough bytes in flight: one warp per block owns 8 outputs and streams their K through a
// four-stage shared-memory ring (cp.async, 256 K columns a stage, the x rows with them), 12 KB
// in flight per warp and N / 8 warps. Each 16-wide K
// chunk goes through mma.sync m16n8k16 (x rows as the A operand, rows past m zero), ascending
// from zero, exactly as in the prefill form and the WMMA kernels (matmul.h), so a row's bits do
// not depend on which form its batch size picks.
//
// Needs 1 <= m <= 16, N % 8 == 0, K % 16 == 0, xb and w 16-byte aligned.
#pragma once

#include <cstdint>

#include "util/status.h"

namespace graft::cuda {

Status GemmDecode(const uint16_t* xb, int64_t m, const uint16_t* w, int64_t n, int64_t k, float* y, int64_t ldy,
                  bool round_output, void* stream);

}  // namespace graft::cuda

// CUDA RMSNorm: the same contract as Ops::RmsNorm and Ops::AddRmsNorm (backend/ops.h), one
// block per row (RmsNorm on rows of up to 256 columns: a warp per row, the same bits).
//
// x, out: device pointers, [rows, dim] fp32 holding activation values; w: device pointer,
// [dim] fp32. The sum of squares is reduced per row in a fixed order that depends only on dim
// (each thread strides over the row, then a fixed tree over the block), so a row's bits never
// depend on the other rows. bf16 rounds where the CPU reference rounds.
#pragma once

#include <cstdint>

#include "util/status.h"

namespace graft::cuda {

enum class NormKind { kPlainW = 0, kOnePlusW = 1 };

// out_bf16: null, or where out's values also go as bf16 [rows, dim] (a twin, backend/ops.h).
Status RmsNorm(const float* x, const float* w, int64_t rows, int dim, float eps, NormKind kind, bool round_bf16,
               float* out, void* stream, uint16_t* out_bf16 = nullptr);

// h = r(h + y) (as cuda::Add), then out = RmsNorm(h) (as above), one block a row: the same bits
// as the two launches. h, y, out [rows, dim]; out must not alias h or y.
Status AddRmsNorm(float* h, const float* y, const float* w, int64_t rows, int dim, float eps, NormKind kind,
                  bool round_bf16, float* out, void* stream, uint16_t* out_bf16 = nullptr);

}  // namespace graft::cuda

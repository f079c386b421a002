// CUDA elementwise ops: the same contracts as the Ops methods of the same names
// (backend/ops.h), on device pointers, launched on `stream` (a cudaStream_t; nullptr = the
// default stream). `bf16` rounds every written value to bf16 where the CPU reference rounds.
// Each output element is computed by one thread from its own inputs only, so a row's bits never
// depend on the other rows. Errors (bad shapes, launch failures) come back as a Status.
#pragma once

#include <cstdint>

#include "backend/cuda/device_weight.h"
#include "util/status.h"

namespace graft::cuda {

// out[t] = table[ids[t]], ids [n] int32 on the device (checked by the caller), out [n, table.cols].
Status Embed(const DevWeight& table, const int32_t* ids, int n, bool bf16, float* out, void* stream);
// out[t, i] = r(r(silu(gu[t, i])) * gu[t, inter + i]); gu [n, 2*inter], out [n, inter].
// out_bf16: null, or where out's values also go as bf16 (a twin, backend/ops.h).
Status SiluMul(const float* gu, int64_t n, int64_t inter, bool bf16, float* out, void* stream,
               uint16_t* out_bf16 = nullptr);
// x = r(x + y) over n values.
Status Add(float* x, const float* y, int64_t n, bool bf16, void* stream);
// x[r, c] = r(x[r, c] * r(sigmoid(gate[r * gate_stride + c]))), x [rows, cols].
// x_bf16: null, or where the results also go as bf16 (a twin).
Status SigmoidGateMul(float* x, const float* gate, int64_t gate_stride, int64_t rows, int64_t cols, bool bf16,
                      void* stream, uint16_t* x_bf16 = nullptr);
// dst[r, dst_col + c] = src[r, src_col + c] for c < cols (strides in floats).
Status CopyBlock(const float* src, int64_t src_stride, int64_t src_col, float* dst, int64_t dst_stride,
                 int64_t dst_col, int64_t rows, int64_t cols, void* stream);
// Block b < count: dst[r, dst_col + b * dst_step + c] = src[r, src_col + b * src_step + c] for
// c < cols, r < rows (strides in floats): CopyBlock `count` times in one launch (16-byte moves
// where every offset and stride is a multiple of 4 floats).
Status CopyBlocks(const float* src, int64_t src_stride, int64_t src_col, int64_t src_step, float* dst,
                  int64_t dst_stride, int64_t dst_col, int64_t dst_step, int64_t rows, int64_t cols, int count,
                  void* stream);
// dst[r, i * width + c] = src[r, c] for i < times (src rows width apart, dst rows times * width).
Status RepeatCols(const float* src, int64_t rows, int64_t width, int times, float* dst, void* stream);
// x[r * ld + c] = bf16(x[r * ld + c]) for r < rows, c < cols (round to nearest even, in place).
Status RoundBlockBf16(float* x, int64_t ld, int64_t rows, int64_t cols, void* stream);
// dst[t * width + c] = src[rows[t] * width + c]; rows [n] on the device.
Status GatherRows(const float* src, int64_t width, const int32_t* rows, int n, float* dst, void* stream);
// dst[rows[t] * width + c] = src[t * width + c]; rows [n] on the device.
Status ScatterRows(const float* src, int64_t width, const int32_t* rows, int n, float* dst, void* stream);
// The same into bf16 rows (dst: __nv_bfloat16, bf16 KV pages): each value rounded to nearest even — exact for the
// bf16 values activations hold in bf16 mode.
Status ScatterRowsBf16(const float* src, int64_t width, const int32_t* rows, int n, void* dst, void* stream);
// NeoX RoPE in place on the first rot_dim dims of each head of x [n, heads, head_dim]; pos [n]
// and inv_freq [rot_dim/2] on the device. Rounding as Ops::Rope.
Status Rope(float* x, int n, int heads, int head_dim, int rot_dim, const int32_t* pos, const float* inv_freq,
            float attn_scale, bool bf16, void* stream);
// beta = r(sigmoid(b)), g = -exp(a_log) * softplus(a + dt_bias) (fp32); as Ops::GdnGates.
Status GdnGates(const float* in, int64_t stride, int64_t b_col, int64_t a_col, int n, int hv, const DevWeight& a_log,
                const DevWeight& dt_bias, bool bf16, float* beta, float* g, void* stream);

}  // namespace graft::cuda

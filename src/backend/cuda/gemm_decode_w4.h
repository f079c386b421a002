// The W4A16 decode GEMM (MatMul's form for 1 to 16 rows of bf16 activations against int4 or
// NVFP4 weights): y[m, N] = xb[m, K] · Wᵀ with W dequantized to bf16 exactly as
// quant_weight.cuh's QuantAt does — so every output has the bits the dense decode form
// (gemm_decode.h) gives on a bf16 weight holding those values, and the bits of the WMMA W4A16
// kernels.
//
// A warp owns 8 outputs and streams their packed weights (a quarter of bf16's bytes) and scales
// through an eight-stage cp.async ring beside the x rows; each 16-wide K chunk's B fragment is
// dequantized in registers straight from the packed words (no bf16 tile), then mma.sync
// m16n8k16, chunks ascending from zero. int4 weights are read in the device copy's lane order
// (int4_lanes.h: one word a lane per two chunks, one shift and mask per fragment register);
// with bf16-valued scales (DevWeight::scale_bf16, what compressed-tensors stores) the pair is
// dequantized by two bf16x2 FMAs, otherwise by QuantAt's fp32 arithmetic weight by weight.
//
// DecodeW4a16Fits: 1 <= m <= 16, N % 8 == 0, K % 256 == 0, symmetric int4 in lane order with
// groups of 32, 64, 128 or a multiple of 256 columns (or NVFP4), 16-byte aligned operands.
#pragma once

#include <cstdint>

#include "backend/cuda/device_weight.h"
#include "util/status.h"

namespace graft::cuda {

bool DecodeW4a16Fits(int64_t m, const DevWeight& w);
Status GemmDecodeW4a16(const uint16_t* xb, int64_t m, const DevWeight& w, float* y, int64_t ldy, bool round_output,
                       void* stream);

}  // namespace graft::cuda

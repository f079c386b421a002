// Device dequantization of quantized weights (DevWeight), element by element, with the CPU
// reference's arithmetic (model/quantized.cpp: DequantizeRows, then WeightRows' bf16 rounding
// for the W4A16 formats): products in fp32 with explicit round-to-nearest intrinsics.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/device_weight.h"
#include "backend/cuda/int4_lanes.h"

namespace graft::cuda {

// e4m3 code -> float, exactly (S.1111.111 is NaN).
__device__ __forceinline__ float E4m3ToFloat(uint8_t v) {
  const int e = (v >> 3) & 0xf, m = v & 0x7;
  float f;
  if (e == 0xf && m == 0x7) return __int_as_float(0x7fc00000);
  if (e == 0) f = static_cast<float>(m) * 0.001953125f;  // m/8 · 2^-6, exact
  else f = __int_as_float(((e - 7 + 127) << 23) | (m << 20));
  return (v & 0x80) ? -f : f;
}

__device__ __forceinline__ float E2m1ToFloat(uint32_t nibble) {
  const uint32_t i = nibble & 0x7;
  const float mag = i < 4 ? 0.5f * static_cast<float>(i) : (i == 4 ? 2.0f : (i == 5 ? 3.0f : (i == 6 ? 4.0f : 6.0f)));
  return (nibble & 0x8) ? -mag : mag;
}

// W[r][c] as the matmul reads it: int4 / NVFP4 rounded to bf16 (W4A16), fp8 code · scale in fp32.
__device__ __forceinline__ float QuantAt(const DevWeight& w, int64_t r, int64_t c) {
  const int64_t k = w.cols;
  switch (w.format) {
    case DevFormat::kInt4: {
      const int64_t groups = k / w.group, g = c / w.group;
      const auto* words = static_cast<const int32_t*>(w.data) + r * (k / 8);
      int u;
      if (w.int4_lanes) {
        const Int4LanePos p = Int4LaneOf(static_cast<int>(c % kInt4LaneBlock));
        u = static_cast<int>((static_cast<uint32_t>(words[c / kInt4LaneBlock * 4 + p.word]) >> (4 * p.nibble)) & 0xf);
      } else {
        u = static_cast<int>((static_cast<uint32_t>(words[c / 8]) >> (4 * (c % 8))) & 0xf);
      }
      const int zp = w.zero ? static_cast<int>((static_cast<uint32_t>(w.zero[(r / 8) * groups + g]) >> (4 * (r % 8))) & 0xf) : 8;
      return __bfloat162float(__float2bfloat16_rn(__fmul_rn(static_cast<float>(u - zp), w.scale[r * groups + g])));
    }
    case DevFormat::kNvfp4: {
      const uint8_t byte = static_cast<const uint8_t*>(w.data)[(r * k + c) / 2];
      const uint32_t nib = (c % 2 == 0) ? (byte & 0xf) : (byte >> 4);
      const float s = E4m3ToFloat(w.scale_fp8[r * (k / 16) + c / 16]);
      return __bfloat162float(__float2bfloat16_rn(__fmul_rn(__fmul_rn(E2m1ToFloat(nib), s), w.global)));
    }
    case DevFormat::kFp8Block: {
      const int64_t cb = (k + w.group - 1) / w.group;
      return __fmul_rn(E4m3ToFloat(static_cast<const uint8_t*>(w.data)[r * k + c]), w.scale[(r / w.group) * cb + c / w.group]);
    }
    case DevFormat::kFp8Channel:
      return __fmul_rn(E4m3ToFloat(static_cast<const uint8_t*>(w.data)[r * k + c]), w.scale[r]);
    default:
      return 0.0f;
  }
}

// Eight consecutive W4A16 weights W[r][c .. c+8) as bf16 (c % 8 == 0), packed as a uint4 (what
// the tensor-core kernels stage): one int4 word and one scale, or four NVFP4 bytes and one
// group scale (8 columns never straddle a group: groups are multiples of 8).
__device__ __forceinline__ uint4 QuantBf16x8(const DevWeight& w, int64_t r, int64_t c) {
  const int64_t k = w.cols;
  float v[8];
  if (w.format == DevFormat::kInt4) {
    const int64_t groups = k / w.group, g = c / w.group;
    const int zp = w.zero ? static_cast<int>((static_cast<uint32_t>(w.zero[(r / 8) * groups + g]) >> (4 * (r % 8))) & 0xf) : 8;
    const float s = w.scale[r * groups + g];
    const auto* words = static_cast<const int32_t*>(w.data) + r * (k / 8);
    int nib[8];
    if (w.int4_lanes) {  // columns c .. c+8 of the block: one nibble position in each of its words, e = 0 and 1
      const uint4 blk = *reinterpret_cast<const uint4*>(words + c / kInt4LaneBlock * 4);
      const uint32_t wd[4] = {blk.x, blk.y, blk.z, blk.w};
      const int p0 = Int4LaneOf(static_cast<int>(c % kInt4LaneBlock)).nibble;  // e = 0; e = 1 is p0 + 4
#pragma unroll
      for (int i = 0; i < 8; ++i) nib[i] = static_cast<int>((wd[i / 2] >> (4 * (p0 + 4 * (i % 2)))) & 0xf);
    } else {
      const uint32_t word = static_cast<uint32_t>(words[c / 8]);
#pragma unroll
      for (int i = 0; i < 8; ++i) nib[i] = static_cast<int>((word >> (4 * i)) & 0xf);
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = __fmul_rn(static_cast<float>(nib[i] - zp), s);
  } else {
    const uint8_t* p = static_cast<const uint8_t*>(w.data) + (r * k + c) / 2;
    const float s = E4m3ToFloat(w.scale_fp8[r * (k / 16) + c / 16]);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint8_t byte = p[i / 2];
      v[i] = __fmul_rn(__fmul_rn(E2m1ToFloat(i % 2 == 0 ? (byte & 0xf) : (byte >> 4)), s), w.global);
    }
  }
  uint4 out;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
  return out;
}

}  // namespace graft::cuda

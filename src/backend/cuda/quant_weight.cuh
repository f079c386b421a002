// Device dequantization of quantized weights (DevWeight), element by element, with the CPU
// reference's arithmetic (weights/quantized.cpp: DequantizeRows, then WeightRows' bf16 rounding
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

// The code nibble of W[r][c] of a 4-bit tensor: int4 words and NVFP4 bytes read as words share
// the nibble order (column 8j + i in nibble i of word j), and both go up in the lane order
// (int4_lanes.h) when w.int4_lanes.
__device__ __forceinline__ uint32_t NibbleAt(const DevWeight& w, int64_t r, int64_t c) {
  const auto* words = static_cast<const uint32_t*>(w.data) + r * (w.cols / 8);
  if (w.int4_lanes) {
    const Int4LanePos p = Int4LaneOf(static_cast<int>(c % kInt4LaneBlock));
    return (words[c / kInt4LaneBlock * kInt4LaneWords + p.word] >> (4 * p.nibble)) & 0xfu;
  }
  return (words[c / 8] >> (4 * (c % 8))) & 0xfu;
}

// The nibbles of W[r][c .. c+8) (c % 8 == 0) in column order: in lane order one nibble position
// in each of the four lane words 4t + b of the column's 32-column step b, e = 0 and 1
// (int4_lanes.h).
__device__ __forceinline__ void Nibbles8(const DevWeight& w, int64_t r, int64_t c, uint32_t (&nib)[8]) {
  const auto* words = static_cast<const uint32_t*>(w.data) + r * (w.cols / 8);
  if (w.int4_lanes) {
    const Int4LanePos p = Int4LaneOf(static_cast<int>(c % kInt4LaneBlock));  // t = 0, e = 0
    const uint32_t* bw = words + c / kInt4LaneBlock * kInt4LaneWords + p.word;
    const uint32_t wd[4] = {bw[0], bw[4], bw[8], bw[12]};
    const int p0 = p.nibble;  // e = 1 is p0 + 4
#pragma unroll
    for (int i = 0; i < 8; ++i) nib[i] = (wd[i / 2] >> (4 * (p0 + 4 * (i % 2)))) & 0xfu;
  } else {
    const uint32_t word = words[c / 8];
#pragma unroll
    for (int i = 0; i < 8; ++i) nib[i] = (word >> (4 * i)) & 0xfu;
  }
}

// W[r][c] as the matmul reads it: int4 / NVFP4 rounded to bf16 (W4A16), fp8 code · scale in fp32.
__device__ __forceinline__ float QuantAt(const DevWeight& w, int64_t r, int64_t c) {
  const int64_t k = w.cols;
  switch (w.format) {
    case DevFormat::kInt4: {
      const int64_t groups = k / w.group, g = c / w.group;
      const int u = static_cast<int>(NibbleAt(w, r, c));
      const int zp = w.zero ? static_cast<int>((static_cast<uint32_t>(w.zero[(r / 8) * groups + g]) >> (4 * (r % 8))) & 0xf) : 8;
      return __bfloat162float(__float2bfloat16_rn(__fmul_rn(static_cast<float>(u - zp), w.scale[r * groups + g])));
    }
    case DevFormat::kNvfp4: {
      const float s = E4m3ToFloat(w.scale_fp8[r * (k / 16) + c / 16]);
      return __bfloat162float(__float2bfloat16_rn(__fmul_rn(__fmul_rn(E2m1ToFloat(NibbleAt(w, r, c)), s), w.global)));
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
// the tensor-core kernels stage): eight nibbles (one word, or a place in each of a lane-order
// block's four) and one scale (8 columns never straddle a group: groups are multiples of 8).
__device__ __forceinline__ uint4 QuantBf16x8(const DevWeight& w, int64_t r, int64_t c) {
  const int64_t k = w.cols;
  uint32_t nib[8];
  Nibbles8(w, r, c, nib);
  float v[8];
  if (w.format == DevFormat::kInt4) {
    const int64_t groups = k / w.group, g = c / w.group;
    const int zp = w.zero ? static_cast<int>((static_cast<uint32_t>(w.zero[(r / 8) * groups + g]) >> (4 * (r % 8))) & 0xf) : 8;
    const float s = w.scale[r * groups + g];
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = __fmul_rn(static_cast<float>(static_cast<int>(nib[i]) - zp), s);
  } else {
    const float s = E4m3ToFloat(w.scale_fp8[r * (k / 16) + c / 16]);
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = __fmul_rn(__fmul_rn(E2m1ToFloat(nib[i]), s), w.global);
  }
  uint4 out;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
  return out;
}

}  // namespace graft::cuda

// DevWeight: a weight as the CUDA kernels see it, row-major [rows, cols], in device memory (who
// owns the memory is the caller's business): dense bf16 or fp32, or one quantized tensor in its
// stored format (weights/quantized.h; its scales widened to fp32, NVFP4's kept as e4m3 codes).
// Plain C++: host code that launches kernels includes it without any CUDA header.
#pragma once

#include <cstdint>

namespace graft::cuda {

struct Nvfp4Entry;  // nvfp4_table.h

enum class DevFormat : uint8_t { kDense, kFp8Block, kFp8Channel, kInt4, kNvfp4 };

struct DevWeight {
  const void* data = nullptr;  // dense values; fp8: e4m3 codes [rows*cols]; int4: words [rows*cols/8];
                               // nvfp4: packed codes [rows*cols/2] (both in int4_lanes.h's order when
                               // int4_lanes)
  int64_t rows = 0, cols = 0;
  bool bf16 = false;           // dense only
  DevFormat format = DevFormat::kDense;
  const float* scale = nullptr;          // fp8 block [⌈rows/g⌉, ⌈cols/g⌉], fp8 channel [rows], int4 [rows, cols/g]
  const uint8_t* scale_fp8 = nullptr;    // nvfp4 [rows, cols/16]
  const int32_t* zero = nullptr;         // int4 zero-point words [⌈rows/8⌉, cols/g], or none (symmetric)
  int group = 0;
  float global = 1.0f;                   // nvfp4
  const Nvfp4Entry* nvfp4_table = nullptr;  // nvfp4: its global scale's dequantization table (nvfp4_table.h)
  bool int4_lanes = false;               // int4 words / nvfp4 bytes in the lane order of int4_lanes.h
                                         // (cols % 128 == 0)
  bool scale_bf16 = false;               // int4: every scale is a bf16 value (the bf16x2 dequantization
                                         // then equals the fp32 one, gemm_decode_w4.cu)
  bool quantized() const { return format != DevFormat::kDense; }
  bool w4a16() const { return format == DevFormat::kInt4 || format == DevFormat::kNvfp4; }
  bool fp8() const { return format == DevFormat::kFp8Block || format == DevFormat::kFp8Channel; }
};

}  // namespace graft::cuda

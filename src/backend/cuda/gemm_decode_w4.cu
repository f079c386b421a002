#include "backend/cuda/gemm_decode_w4.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <string>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/mma_ptx.cuh"
#include "backend/cuda/quant_weight.cuh"

namespace graft::cuda {
namespace {

constexpr int kDK = 256;                 // K columns a stage
constexpr int kStages = 8;
constexpr int kXLd = kDK + 8;            // bf16 elements between x rows
constexpr int kWRowBytes = kDK / 2 + 16;  // packed bytes of a weight row a stage, padded: 144
                                          // bytes = 36 words, so rows g = 0..7 start in banks 4g
constexpr int kScaleBytes = 80;          // per weight row a stage: the int4 scales (groups of >= 32
                                          // columns: up to 8 floats) or 16 NVFP4 bytes; 20 words
                                          // apart, so rows g = 0..7 read distinct banks

struct StageLayout {
  int w, s, x, bytes;  // offsets of the weights, the scales, the x rows; the stage's size
};
__host__ __device__ inline StageLayout Layout(int m) {
  StageLayout l{};
  l.w = 0;
  l.s = 8 * kWRowBytes;
  l.x = l.s + 8 * kScaleBytes;
  l.bytes = l.x + m * kXLd * 2;
  return l;
}

__device__ __forceinline__ unsigned FmaBf16x2(unsigned a, unsigned b, unsigned c) {
  unsigned d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// The int4 pair in bits 0..3 and 16..19 of `bits` as (nibble - 8) · s in bf16, s2 = {s, s} a
// bf16 scale: 0x4300 | nibble is the bf16 128 + nibble; minus 136 is nibble - 8, exactly; the
// product rounded once to bf16 equals QuantAt's fp32 product (exact: 4 x 8 significant bits)
// rounded to bf16. The -0 addend keeps a zero's sign as the fp32 product has it.
__device__ __forceinline__ unsigned Int4PairBf16(unsigned bits, unsigned s2) {
  const unsigned biased = (bits & 0x000F000Fu) | 0x43004300u;
  const unsigned centred = FmaBf16x2(biased, 0x3F803F80u /* 1, 1 */, 0xC308C308u /* -136, -136 */);
  return FmaBf16x2(centred, s2, 0x80008000u /* -0, -0 */);
}

// The same pair with an fp32 scale, QuantAt's arithmetic: 2^23 + nibble as float bits, minus
// 2^23 + 8 (nibble - 8 exactly, without the quarter-rate int-to-float conversion), times s.
__device__ __forceinline__ unsigned Int4PairF32(unsigned bits, float s) {
  auto v = [&](unsigned nib) { return __fmul_rn(__fsub_rn(__int_as_float(0x4B000000 | (nib & 0xf)), 8388616.0f), s); };
  return PackBf16(v(bits), v(bits >> 16));
}

enum class W4Kind { kNvfp4, kInt4F32Scale, kInt4Bf16Scale };

template <W4Kind kKind>
__global__ void __launch_bounds__(32) GemmDecodeW4Kernel(const __nv_bfloat16* __restrict__ xb, int m, DevWeight dw,
                                                         float* __restrict__ y, int64_t ldy, bool round_bf16) {
  extern __shared__ __align__(16) unsigned char sm[];
  const StageLayout L = Layout(m);
  const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
  constexpr bool kFp4 = kKind == W4Kind::kNvfp4;
  const int64_t k = dw.cols, n0 = int64_t{blockIdx.x} * 8;
  const auto* packed = static_cast<const unsigned char*>(dw.data);
  const int group = kFp4 ? 16 : dw.group, ns = kDK / group > 0 ? kDK / group : 1;  // scales a row a stage
  // A stage's scale of column kk: kk >> gshift (int4 groups up to a stage are powers of two; a
  // wider group has one scale a stage, index 0).
  const int gshift = group >= kDK ? 8 : 31 - __clz(group);
  const int64_t groups = k / group;
  auto load = [&](int st, int64_t k0) {
    unsigned char* base = sm + st * L.bytes;
    // Weights: 8 rows x 128 bytes = 64 pieces, two a lane.
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int e = lane + 32 * i, r = e / 8, c = (e % 8) * 16;
      CpAsync16(base + L.w + r * kWRowBytes + c, packed + (n0 + r) * (k / 2) + k0 / 2 + c);
    }
    if (kFp4) {  // 8 rows x 16 scale bytes (K % 256 == 0 keeps each row's run 16-byte aligned)
      if (lane < 8) CpAsync16(base + L.s + lane * kScaleBytes, dw.scale_fp8 + (n0 + lane) * (k / 16) + k0 / 16);
    } else {  // 8 rows x ns fp32 scales, the stage's groups (a group wider than a stage: its one)
      for (int e = lane; e < 8 * ns; e += 32) {
        const int r = e / ns, j = e % ns;
        CpAsync4(base + L.s + r * kScaleBytes + 4 * j, dw.scale + (n0 + r) * groups + k0 / group + j);
      }
    }
    for (int e = lane; e < m * (kDK / 8); e += 32) {
      const int r = e / (kDK / 8), c = (e % (kDK / 8)) * 8;
      CpAsync16(base + L.x + (r * kXLd + c) * 2, xb + int64_t{r} * k + k0 + c);
    }
  };
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const int64_t slices = k / kDK;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < slices) load(s, int64_t{s} * kDK);
    CpAsyncCommit();
  }
  const int x_row = min(lane % 16, m - 1), x_col = (lane / 16) * 8;  // ldmatrix.x4 of x: rows past m read row m - 1
  for (int64_t i = 0; i < slices; ++i) {
    CpAsyncWait<kStages - 2>();
    __syncwarp();
    if (i + kStages - 1 < slices) load(static_cast<int>((i + kStages - 1) % kStages), (i + kStages - 1) * kDK);
    CpAsyncCommit();
    const unsigned char* base = sm + static_cast<int>(i % kStages) * L.bytes;
    const unsigned char* wrow = base + L.w + g * kWRowBytes;
    const unsigned char* srow = base + L.s + g * kScaleBytes;
    const auto* xs = reinterpret_cast<const __nv_bfloat16*>(base + L.x);
    if constexpr (kFp4) {
#pragma unroll
      for (int kk = 0; kk < kDK; kk += 16) {
        // Bytes kk/2 + t and kk/2 + 4 + t: K = kk + 2t, +1 and kk + 8 + 2t, +1 (low nibble first).
        const unsigned lo = wrow[kk / 2 + t], hi = wrow[kk / 2 + 4 + t];
        const float s = E4m3ToFloat(srow[kk / 16]);
        auto v = [&](unsigned nib) { return __fmul_rn(__fmul_rn(E2m1ToFloat(nib), s), dw.global); };
        unsigned a[4];
        LdMatrixX4(a, xs + x_row * kXLd + kk + x_col);
        Mma16816(acc, a, PackBf16(v(lo & 0xf), v(lo >> 4)), PackBf16(v(hi & 0xf), v(hi >> 4)));
      }
    } else {
      // Lane order (int4_lanes.h): word t of each 32-column block holds this lane's eight weights
      // of two K16 steps; (word >> 4(2h + q)) puts fragment b_q of step h in the pair's places.
#pragma unroll
      for (int blk = 0; blk < kDK / 32; ++blk) {
        const unsigned wd = *reinterpret_cast<const unsigned*>(wrow + blk * 16 + 4 * t);
        const float s = reinterpret_cast<const float*>(srow)[(blk * 32) >> gshift];  // groups >= 32 columns
        unsigned s2 = 0;
        if constexpr (kKind == W4Kind::kInt4Bf16Scale) s2 = PackBf16(s, s);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          unsigned b0, b1;
          if constexpr (kKind == W4Kind::kInt4Bf16Scale) {
            b0 = Int4PairBf16(wd >> (8 * h), s2);
            b1 = Int4PairBf16(wd >> (8 * h + 4), s2);
          } else {
            b0 = Int4PairF32(wd >> (8 * h), s);
            b1 = Int4PairF32(wd >> (8 * h + 4), s);
          }
          unsigned a[4];
          LdMatrixX4(a, xs + x_row * kXLd + blk * 32 + 16 * h + x_col);
          Mma16816(acc, a, b0, b1);
        }
      }
    }
  }
  CpAsyncWait<0>();
  const int64_t c = n0 + 2 * t;
  if (g < m) {
    y[g * ldy + c] = RoundAct(acc[0], round_bf16);
    y[g * ldy + c + 1] = RoundAct(acc[1], round_bf16);
  }
  if (g + 8 < m) {
    y[(g + 8) * ldy + c] = RoundAct(acc[2], round_bf16);
    y[(g + 8) * ldy + c + 1] = RoundAct(acc[3], round_bf16);
  }
}

template <W4Kind kKind>
Status Launch(const __nv_bfloat16* xb, int64_t m, const DevWeight& w, float* y, int64_t ldy, bool round_output,
              cudaStream_t s) {
  static const cudaError_t ready = [] {
    cudaError_t e = cudaFuncSetAttribute(GemmDecodeW4Kernel<kKind>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         kStages * Layout(16).bytes);
    if (e == cudaSuccess) {
      e = cudaFuncSetAttribute(GemmDecodeW4Kernel<kKind>, cudaFuncAttributePreferredSharedMemoryCarveout,
                               cudaSharedmemCarveoutMaxShared);
    }
    return e;
  }();
  if (ready != cudaSuccess) return Internal(std::string("cuda GemmDecodeW4a16: shared memory: ") + cudaGetErrorString(ready));
  GemmDecodeW4Kernel<kKind><<<static_cast<unsigned>(w.rows / 8), 32, static_cast<size_t>(kStages * Layout(static_cast<int>(m)).bytes), s>>>(
      xb, static_cast<int>(m), w, y, ldy, round_output);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return Internal(std::string("cuda GemmDecodeW4a16 launch: ") + cudaGetErrorString(err));
  return Status::Ok();
}

}  // namespace

bool DecodeW4a16Fits(int64_t m, const DevWeight& w) {
  if (m < 1 || m > 16 || w.rows % 8 != 0 || w.cols % kDK != 0 || w.rows / 8 > 0x7fffffff) return false;
  if (reinterpret_cast<uintptr_t>(w.data) % 16 != 0) return false;
  if (w.format == DevFormat::kNvfp4) return w.scale_fp8 != nullptr && reinterpret_cast<uintptr_t>(w.scale_fp8) % 16 == 0;
  return w.format == DevFormat::kInt4 && w.int4_lanes && w.zero == nullptr && w.group >= 32 && w.group % 32 == 0 &&
         (w.group <= kDK ? kDK % w.group == 0 : w.group % kDK == 0) && kDK / w.group <= kScaleBytes / 4;
}

Status GemmDecodeW4a16(const uint16_t* xb, int64_t m, const DevWeight& w, float* y, int64_t ldy, bool round_output,
                       void* stream) {
  if (!DecodeW4a16Fits(m, w) || ldy < w.rows || reinterpret_cast<uintptr_t>(xb) % 16 != 0) {
    return InvalidArgument("cuda GemmDecodeW4a16: needs 1..16 rows, N % 8 == 0, K % 256 == 0, symmetric int4 groups "
                           "of 32k columns or NVFP4, aligned operands");
  }
  const auto* xp = reinterpret_cast<const __nv_bfloat16*>(xb);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (w.format == DevFormat::kNvfp4) return Launch<W4Kind::kNvfp4>(xp, m, w, y, ldy, round_output, s);
  return w.scale_bf16 ? Launch<W4Kind::kInt4Bf16Scale>(xp, m, w, y, ldy, round_output, s)
                      : Launch<W4Kind::kInt4F32Scale>(xp, m, w, y, ldy, round_output, s);
}

}  // namespace graft::cuda

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
constexpr int kStages = 4;               // a warp's ring
constexpr int kSliceStages = kW4SliceColumns / kDK;
static_assert(kW4SliceColumns % kDK == 0, "a slice is whole stages");
constexpr int kMaxWarps = 32;
constexpr int kSmemBudget = 200 * 1024;  // a block's rings and slice sums
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

// A block owns 8 outputs; its warps share out K's slices (kW4SliceColumns columns: slice j to
// warp j mod warps), each slice's chain from zero into `acc`, kept in `red` at the slice's end;
// then warp 0 adds the slices in ascending order (from -0, which adds exactly).
template <W4Kind kKind>
__global__ void __launch_bounds__(1024) GemmDecodeW4Kernel(const __nv_bfloat16* __restrict__ xb, int m, DevWeight dw,
                                                           float* __restrict__ y, int64_t ldy, bool round_bf16) {
  extern __shared__ __align__(16) unsigned char smem[];
  const StageLayout L = Layout(m);
  const int warp = threadIdx.x / 32, warps = blockDim.x / 32;
  unsigned char* sm = smem + warp * kStages * L.bytes;  // this warp's ring
  const int64_t total_stages = dw.cols / kDK, slice_count = (total_stages + kSliceStages - 1) / kSliceStages;
  float* red = reinterpret_cast<float*>(smem + warps * kStages * L.bytes);  // [slice][lane][4]
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  constexpr bool kFp4 = kKind == W4Kind::kNvfp4;
  const int64_t k = dw.cols, n0 = int64_t{blockIdx.x} * 8;
  const int group = kFp4 ? 16 : dw.group, ns = kDK / group > 0 ? kDK / group : 1;  // scales a row a stage
  // A stage's scale of column kk: kk >> gshift (int4 groups up to a stage are powers of two; a
  // wider group has one scale a stage, index 0).
  const int gshift = group >= kDK ? 8 : 31 - __clz(group);
  const int64_t groups = k / group;
  // Each lane's copies, addressed once: stage s adds s * kDK / 2 packed bytes, s * ns scales
  // (a group wider than a stage: its index, s * kDK / group) and s * kDK x columns. Weights: 8
  // rows x 128 bytes = 64 pieces, rows lane / 8 and 4 + lane / 8 at byte (lane % 8) * 16.
  const unsigned char* wsrc = static_cast<const unsigned char*>(dw.data) + (n0 + lane / 8) * (k / 2) + (lane % 8) * 16;
  const int64_t wsrc4 = 4 * (k / 2);
  const int wdst = L.w + (lane / 8) * kWRowBytes + (lane % 8) * 16;
  // Scales: NVFP4, lanes 0..7 copy their row's 16 bytes; int4, lane e (and e + 32) copies scale
  // j = e % ns of row e / ns.
  const int sr0 = lane / ns, sr1 = (lane + 32) / ns;
  const bool s0 = kFp4 ? lane < 8 : lane < 8 * ns, s1 = !kFp4 && lane + 32 < 8 * ns;
  const float* ssrc0 = kFp4 ? nullptr : dw.scale + (n0 + sr0) * groups + lane % ns;
  const float* ssrc1 = kFp4 ? nullptr : dw.scale + (n0 + sr1) * groups + (lane + 32) % ns;
  const int sdst0 = L.s + sr0 * kScaleBytes + 4 * (lane % ns), sdst1 = L.s + sr1 * kScaleBytes + 4 * ((lane + 32) % ns);
  const unsigned char* fsrc = kFp4 ? dw.scale_fp8 + (n0 + lane) * (k / 16) : nullptr;
  const __nv_bfloat16* xsrc = xb + lane * 8;
  const int xdst = L.x + lane * 16;
  auto load = [&](int st, int64_t s) {
    unsigned char* base = sm + st * L.bytes;
    const int64_t k0 = s * kDK;
    CpAsync16(base + wdst, wsrc + k0 / 2);
    CpAsync16(base + wdst + 4 * kWRowBytes, wsrc + wsrc4 + k0 / 2);
    if constexpr (kFp4) {  // K % 256 == 0 keeps each row's run 16-byte aligned
      if (s0) CpAsync16(base + L.s + lane * kScaleBytes, fsrc + k0 / 16);
    } else {
      const int64_t sg = k0 / group;
      if (s0) CpAsync4(base + sdst0, ssrc0 + sg);
      if (s1) CpAsync4(base + sdst1, ssrc1 + sg);
    }
    for (int r = 0; r < m; ++r) CpAsync16(base + xdst + r * kXLd * 2, xsrc + int64_t{r} * k + k0);
  };
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  // The warp's i-th stage: stage i % kSliceStages of its (i / kSliceStages)-th slice; only the
  // last slice of K can be short, so the warp's stages below total_stages are a prefix.
  auto stage_of = [&](int64_t i) { return (warp + warps * (i / kSliceStages)) * kSliceStages + i % kSliceStages; };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (stage_of(s) < total_stages) load(s, stage_of(s));
    CpAsyncCommit();
  }
  const int x_off = (min(lane % 16, m - 1) * kXLd + (lane / 16) * 8) * 2;  // ldmatrix.x4 of x: rows past m read row m - 1
  for (int64_t i = 0; stage_of(i) < total_stages; ++i) {
    CpAsyncWait<kStages - 2>();
    __syncwarp();
    if (stage_of(i + kStages - 1) < total_stages) load(static_cast<int>((i + kStages - 1) % kStages), stage_of(i + kStages - 1));
    CpAsyncCommit();
    const unsigned char* base = sm + static_cast<int>(i % kStages) * L.bytes;
    const unsigned char* wrow = base + L.w + g * kWRowBytes;
    const unsigned char* srow = base + L.s + g * kScaleBytes;
    const unsigned char* xs = base + L.x + x_off;
    if constexpr (kFp4) {
#pragma unroll
      for (int kk = 0; kk < kDK; kk += 16) {
        // Bytes kk/2 + t and kk/2 + 4 + t: K = kk + 2t, +1 and kk + 8 + 2t, +1 (low nibble first).
        const unsigned lo = wrow[kk / 2 + t], hi = wrow[kk / 2 + 4 + t];
        const float s = E4m3ToFloat(srow[kk / 16]);
        auto v = [&](unsigned nib) { return __fmul_rn(__fmul_rn(E2m1ToFloat(nib), s), dw.global); };
        unsigned a[4];
        LdMatrixX4(a, xs + kk * 2);
        Mma16816(acc, a, PackBf16(v(lo & 0xf), v(lo >> 4)), PackBf16(v(hi & 0xf), v(hi >> 4)));
      }
    } else {
      // Lane order (int4_lanes.h): word t of each 32-column block holds this lane's eight weights
      // of two K16 steps; (word >> 4(2h + q)) puts fragment b_q of step h in the pair's places.
      // The stage's eight words and scales are read first and its sixteen B fragments made
      // before the chain of mma.sync, so the dequantization overlaps the chain's latency.
      unsigned wd[kDK / 32];
      float sc[kDK / 32];
#pragma unroll
      for (int blk = 0; blk < kDK / 32; ++blk) {
        wd[blk] = *reinterpret_cast<const unsigned*>(wrow + blk * 16 + 4 * t);
        sc[blk] = reinterpret_cast<const float*>(srow)[(blk * 32) >> gshift];  // groups >= 32 columns
      }
      unsigned b[kDK / 32][2][2];
#pragma unroll
      for (int blk = 0; blk < kDK / 32; ++blk) {
        const unsigned s2 = kKind == W4Kind::kInt4Bf16Scale ? PackBf16(sc[blk], sc[blk]) : 0u;
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int q = 0; q < 2; ++q) {
            const unsigned bits = wd[blk] >> (8 * h + 4 * q);
            b[blk][h][q] = kKind == W4Kind::kInt4Bf16Scale ? Int4PairBf16(bits, s2) : Int4PairF32(bits, sc[blk]);
          }
      }
#pragma unroll
      for (int blk = 0; blk < kDK / 32; ++blk)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          unsigned a[4];
          LdMatrixX4(a, xs + (blk * 32 + 16 * h) * 2);
          Mma16816(acc, a, b[blk][h][0], b[blk][h][1]);
        }
    }
    if (i % kSliceStages == kSliceStages - 1 || stage_of(i + 1) >= total_stages) {  // the slice ends
      const int64_t j = warp + warps * (i / kSliceStages);
      *reinterpret_cast<float4*>(red + (j * 32 + lane) * 4) = make_float4(acc[0], acc[1], acc[2], acc[3]);
      acc[0] = acc[1] = acc[2] = acc[3] = 0.0f;
    }
  }
  CpAsyncWait<0>();
  __syncthreads();
  if (warp != 0) return;
  float total[4] = {-0.0f, -0.0f, -0.0f, -0.0f};
  for (int64_t j = 0; j < slice_count; ++j) {
    const float4 v = *reinterpret_cast<const float4*>(red + (j * 32 + lane) * 4);
    total[0] = __fadd_rn(total[0], v.x);
    total[1] = __fadd_rn(total[1], v.y);
    total[2] = __fadd_rn(total[2], v.z);
    total[3] = __fadd_rn(total[3], v.w);
  }
  const int64_t c = n0 + 2 * t;
  if (g < m) {
    y[g * ldy + c] = RoundAct(total[0], round_bf16);
    y[g * ldy + c + 1] = RoundAct(total[1], round_bf16);
  }
  if (g + 8 < m) {
    y[(g + 8) * ldy + c] = RoundAct(total[2], round_bf16);
    y[(g + 8) * ldy + c + 1] = RoundAct(total[3], round_bf16);
  }
}

// Warps a block: one per slice, as many as fit kSmemBudget (each warp then takes every
// warps-th slice); the slice sums' buffer after the rings.
struct BlockShape {
  int warps;
  int64_t smem;
};
BlockShape ShapeFor(int64_t m, int64_t k) {
  const int64_t slices = (k + kW4SliceColumns - 1) / kW4SliceColumns, red = slices * 32 * 16;
  const int64_t ring = int64_t{kStages} * Layout(static_cast<int>(m)).bytes;
  int64_t warps = slices < kMaxWarps ? slices : kMaxWarps;
  while (warps > 1 && warps * ring + red > kSmemBudget) --warps;
  return {static_cast<int>(warps), warps * ring + red};
}

template <W4Kind kKind>
Status Launch(const __nv_bfloat16* xb, int64_t m, const DevWeight& w, float* y, int64_t ldy, bool round_output,
              cudaStream_t s) {
  static const cudaError_t ready = [] {
    cudaError_t e = cudaFuncSetAttribute(GemmDecodeW4Kernel<kKind>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         227 * 1024);
    if (e == cudaSuccess) {
      e = cudaFuncSetAttribute(GemmDecodeW4Kernel<kKind>, cudaFuncAttributePreferredSharedMemoryCarveout,
                               cudaSharedmemCarveoutMaxShared);
    }
    return e;
  }();
  if (ready != cudaSuccess) return Internal(std::string("cuda GemmDecodeW4a16: shared memory: ") + cudaGetErrorString(ready));
  const BlockShape b = ShapeFor(m, w.cols);
  GemmDecodeW4Kernel<kKind><<<static_cast<unsigned>(w.rows / 8), 32 * b.warps, static_cast<size_t>(b.smem), s>>>(
      xb, static_cast<int>(m), w, y, ldy, round_output);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return Internal(std::string("cuda GemmDecodeW4a16 launch: ") + cudaGetErrorString(err));
  return Status::Ok();
}

}  // namespace

bool DecodeW4a16Fits(int64_t m, const DevWeight& w) {
  if (m < 1 || m > 16 || w.rows % 8 != 0 || w.cols % kDK != 0 || w.rows / 8 > 0x7fffffff) return false;
  if (ShapeFor(m, w.cols).smem > kSmemBudget) return false;  // K beyond a block's slice sums
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

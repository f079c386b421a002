#include "backend/cuda/gemm_decode_w4.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <string>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/launched.h"
#include "backend/cuda/mma_ptx.cuh"
#include "backend/cuda/nvfp4_table.h"
#include "backend/cuda/quant_weight.cuh"

namespace graft::cuda {
namespace {

constexpr int kStages = 4;               // a warp's ring
constexpr int kRows = 16;                // outputs a block: the mma's M
constexpr int kMaxWarps = 32;
constexpr int kSmemBudget = 200 * 1024;  // a block's rings and slice sums
constexpr int kScaleBytes = 16;          // per weight row a stage: the int4 scales (up to 4 floats)
                                         // or 8 NVFP4 bytes; rows g = 0..7 in banks 4g
constexpr int kTableBytes = kNvfp4TableEntries * 16;  // NVFP4: the tensor's table, after the slice sums

// A stage of kDK K columns (128; 256 for int4 at up to 8 rows with groups of >= 64, where the
// per-stage work is spread over twice the bytes): 16 weight rows of kDK / 2 packed bytes, padded
// by 16 so that rows g = 0..7 start in distinct bank quads (word t of row g is conflict-free),
// their scales, and the m x rows padded by 8 bf16 (ldmatrix's eight row addresses in distinct
// bank quads).
template <int kDK>
struct Geo {
  static_assert(kW4SliceColumns % kDK == 0, "a slice is whole stages");
  static constexpr int kXLd = kDK + 8;
  static constexpr int kWRowBytes = kDK / 2 + 16;
  static constexpr int kWPieces = kDK / 32;  // 16-byte pieces of a weight row a stage
  static constexpr int kXPieces = kDK / 8;   // of an x row
};

struct StageLayout {
  int w, s, x, bytes;  // offsets of the weights, the scales, the x rows; the stage's size
};
template <int kDK>
__host__ __device__ inline StageLayout Layout(int m) {
  StageLayout l{};
  l.w = 0;
  l.s = kRows * Geo<kDK>::kWRowBytes;
  l.x = l.s + kRows * kScaleBytes;
  l.bytes = l.x + m * Geo<kDK>::kXLd * 2;
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

// A block owns 16 outputs, the mma's M (the weights are the A operand, the x rows its N: one
// mma covers 16 outputs where the x-as-A form covered 8, halving the mma.sync and ldmatrix per
// weight byte at batch 1); its warps share out K's slices (kW4SliceColumns columns: slice j to
// warp j mod warps), each slice's chain from zero into `acc`, kept in `red` at the slice's end;
// then warp 0 adds the slices in ascending order (from -0, which adds exactly). kNt: n-tiles of
// 8 x rows (1 up to 8 rows, 2 up to 16).
template <W4Kind kKind, int kNt, bool kOneScale, int kDK>
__global__ void __launch_bounds__(1024) GemmDecodeW4Kernel(const __nv_bfloat16* __restrict__ xb, int m, DevWeight dw,
                                                           float* __restrict__ y, int64_t ldy, bool round_bf16) {
  using G = Geo<kDK>;
  constexpr int kXLd = G::kXLd, kWRowBytes = G::kWRowBytes;
  extern __shared__ __align__(16) unsigned char smem[];
  const StageLayout L = Layout<kDK>(m);
  const int warp = threadIdx.x / 32, warps = blockDim.x / 32;
  unsigned char* sm = smem + warp * kStages * L.bytes;  // this warp's ring
  float* red = reinterpret_cast<float*>(smem + warps * kStages * L.bytes);  // [slice][lane][4 kNt]
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  constexpr bool kFp4 = kKind == W4Kind::kNvfp4;
  const int64_t k = dw.cols, n0 = int64_t{blockIdx.x} * kRows, last = dw.rows - 1;
  const int64_t slice_count = (k + kW4SliceColumns - 1) / kW4SliceColumns;
  // NVFP4: the table (nvfp4_table.h) in shared memory, read by every warp after the barrier below.
  [[maybe_unused]] Nvfp4Entry* tab = reinterpret_cast<Nvfp4Entry*>(red + slice_count * 32 * 4 * kNt);
  if constexpr (kFp4) {
    for (int i = threadIdx.x; i < kNvfp4TableEntries; i += blockDim.x) tab[i] = dw.nvfp4_table[i];
  }
  // Groups are powers of two (DecodeW4a16Fits): a column's group is column >> glog. A stage's
  // scale of its column kk: kk >> glog (kOneScale: a group spans the stage, one scale).
  const int group = kFp4 ? 16 : dw.group, glog = 31 - __clz(group), ns = kDK / group > 0 ? kDK / group : 1;
  const int64_t groups = k / group;
  // Rows past N (N % 16 == 8: the block's upper half) read the last row and are not written.
  auto row = [&](int r) { return min(n0 + r, last); };
  // Each lane's copies, addressed once from column 0 (a stage at column k0 adds k0 / 2 packed
  // bytes, k0 >> glog scales, k0 x columns). Weights: 16 rows x kWPieces pieces of 16 bytes;
  // lane copies pieces lane + 32i: rows lane / kWPieces + kWRows i at byte (lane % kWPieces) * 16.
  constexpr int kWCopies = kRows * G::kWPieces / 32, kWRows = 32 / G::kWPieces;
  const unsigned char* wsrc[kWCopies];
#pragma unroll
  for (int i = 0; i < kWCopies; ++i) {
    wsrc[i] = static_cast<const unsigned char*>(dw.data) + row(lane / G::kWPieces + kWRows * i) * (k / 2) +
              (lane % G::kWPieces) * 16;
  }
  const int wdst = L.w + (lane / G::kWPieces) * kWRowBytes + (lane % G::kWPieces) * 16;
  // Scales: NVFP4, lanes 0..15 copy their row's 8 bytes; int4, lane e (and e + 32) copies scale
  // j = e % ns of row e / ns.
  const int sr0 = lane / ns, sr1 = (lane + 32) / ns;
  const bool s0 = kFp4 ? lane < kRows : lane < kRows * ns, s1 = !kFp4 && lane + 32 < kRows * ns;
  const float* ssrc0 = kFp4 || !s0 ? nullptr : dw.scale + row(sr0) * groups + lane % ns;
  const float* ssrc1 = kFp4 || !s1 ? nullptr : dw.scale + row(sr1) * groups + (lane + 32) % ns;
  const int sdst0 = L.s + sr0 * kScaleBytes + 4 * (lane % ns), sdst1 = L.s + sr1 * kScaleBytes + 4 * ((lane + 32) % ns);
  const unsigned char* fsrc = kFp4 && lane < kRows ? dw.scale_fp8 + row(lane) * (k / 16) : nullptr;
  // x: row r's kXPieces pieces a stage; lane copies piece lane % kXPieces of rows
  // lane / kXPieces + kXStep j (at most 8 kNt rows; those past m skipped).
  constexpr int kXStep = 32 / G::kXPieces, kXCopies = 8 * kNt / kXStep;
  const __nv_bfloat16* xsrc = xb + (lane / G::kXPieces) * k + (lane % G::kXPieces) * 8;
  const int xdst = L.x + (lane / G::kXPieces) * kXLd * 2 + (lane % G::kXPieces) * 16;
  const int64_t xstep = int64_t{kXStep} * k;
  auto load = [&](int slot, int64_t k0) {
    unsigned char* base = sm + slot * L.bytes;
#pragma unroll
    for (int i = 0; i < kWCopies; ++i) CpAsync16(base + wdst + kWRows * i * kWRowBytes, wsrc[i] + (k0 >> 1));
    if constexpr (kFp4) {  // K % 128 == 0 keeps each row's 8 bytes 8-byte aligned
      if (s0) CpAsync8(base + L.s + lane * kScaleBytes, fsrc + (k0 >> 4));
    } else {
      const int64_t sg = k0 >> glog;
      if (s0) CpAsync4(base + sdst0, ssrc0 + sg);
      if (s1) CpAsync4(base + sdst1, ssrc1 + sg);
    }
#pragma unroll
    for (int j = 0; j < kXCopies; ++j) {
      if (lane / G::kXPieces + kXStep * j < m) CpAsync16(base + xdst + kXStep * j * kXLd * 2, xsrc + j * xstep + k0);
    }
  };
  // The warp's columns: its slices (slice j to warp j mod warps) a stage at a time — past a
  // slice's end, warps - 1 slices on; only K's last slice can be short.
  const int64_t jump = int64_t{warps - 1} * kW4SliceColumns;
  auto next = [&](int64_t c) {
    c += kDK;
    return (c & (kW4SliceColumns - 1)) == 0 ? c + jump : c;
  };
  float acc[kNt][4] = {};
  int64_t kl = int64_t{warp} * kW4SliceColumns;  // the next stage to load
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (kl < k) {
      load(s, kl);
      kl = next(kl);
    }
    CpAsyncCommit();
  }
  // ldmatrix.x4 of x as the B operand: lane l addresses row l % 8 (+ 8 for the second n-tile) of
  // matrix l / 8, the 8 columns at 8 (l / 8) of a 32-column block; rows past m read row m - 1.
  int x_off[kNt];
#pragma unroll
  for (int nt = 0; nt < kNt; ++nt) x_off[nt] = (min(8 * nt + lane % 8, m - 1) * kXLd + (lane / 8) * 8) * 2;
  int64_t kc = int64_t{warp} * kW4SliceColumns;  // the stage computed now
  if constexpr (kFp4) __syncthreads();  // the table is in place
  for (int i = 0; kc < k; ++i) {
    CpAsyncWait<kStages - 2>();
    __syncwarp();
    if (kl < k) {
      load((i + kStages - 1) % kStages, kl);
      kl = next(kl);
    }
    CpAsyncCommit();
    const unsigned char* base = sm + (i % kStages) * L.bytes;
    const unsigned char* wlo = base + L.w + g * kWRowBytes;  // output rows g and g + 8
    const unsigned char* whi = wlo + 8 * kWRowBytes;
    const unsigned char* slo = base + L.s + g * kScaleBytes;
    const unsigned char* shi = slo + 8 * kScaleBytes;
    const unsigned char* xs = base + L.x;
#pragma unroll
    for (int blk = 0; blk < kDK / 32; ++blk) {
      // a[h]: the A fragments of K16 step h of this 32-column block — rows g (a0, a2) and g + 8
      // (a1, a3) at K 2t, 2t + 1 (a0, a1) and 2t + 8, 2t + 9 (a2, a3).
      unsigned a[2][4];
      if constexpr (kFp4) {
        // Lane order (int4_lanes.h), as for int4: word t of the 32-column block holds a row's
        // eight codes of this lane for both K16 steps; step h is group 2 blk + h, whose scale
        // code picks the table entry (nvfp4_table.h).
        const unsigned wl = *reinterpret_cast<const unsigned*>(wlo + blk * 16 + 4 * t);
        const unsigned wh = *reinterpret_cast<const unsigned*>(whi + blk * 16 + 4 * t);
        const unsigned cl = *reinterpret_cast<const uint16_t*>(slo + blk * 2);
        const unsigned ch = *reinterpret_cast<const uint16_t*>(shi + blk * 2);
        uint32_t fl[2][2], fh[2][2];
        Nvfp4Fragments(wl, tab[cl & 0xffu], tab[cl >> 8], fl);
        Nvfp4Fragments(wh, tab[ch & 0xffu], tab[ch >> 8], fh);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          a[h][0] = fl[h][0];
          a[h][2] = fl[h][1];
          a[h][1] = fh[h][0];
          a[h][3] = fh[h][1];
        }
      } else {
        // Lane order (int4_lanes.h): word t of the 32-column block holds a row's eight weights of
        // this lane for both K16 steps; (word >> 4(2h + q)) puts fragment q of step h in the
        // pair's places.
        const unsigned wl = *reinterpret_cast<const unsigned*>(wlo + blk * 16 + 4 * t);
        const unsigned wh = *reinterpret_cast<const unsigned*>(whi + blk * 16 + 4 * t);
        const int sj = kOneScale ? 0 : (blk * 32) >> glog;
        const float scl = reinterpret_cast<const float*>(slo)[sj], sch = reinterpret_cast<const float*>(shi)[sj];
        const unsigned s2l = kKind == W4Kind::kInt4Bf16Scale ? PackBf16(scl, scl) : 0u;
        const unsigned s2h = kKind == W4Kind::kInt4Bf16Scale ? PackBf16(sch, sch) : 0u;
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int q = 0; q < 2; ++q) {
            const int sh = 8 * h + 4 * q;
            a[h][2 * q] = kKind == W4Kind::kInt4Bf16Scale ? Int4PairBf16(wl >> sh, s2l) : Int4PairF32(wl >> sh, scl);
            a[h][2 * q + 1] = kKind == W4Kind::kInt4Bf16Scale ? Int4PairBf16(wh >> sh, s2h) : Int4PairF32(wh >> sh, sch);
          }
      }
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt) {
        unsigned b[4];  // b0, b1 of step 0, then of step 1
        LdMatrixX4(b, xs + x_off[nt] + blk * 64);
        Mma16816(acc[nt], a[0], b[0], b[1]);
        Mma16816(acc[nt], a[1], b[2], b[3]);
      }
    }
    if (((kc + kDK) & (kW4SliceColumns - 1)) == 0 || kc + kDK >= k) {  // the slice ends
      const int64_t j = kc / kW4SliceColumns;
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt) {
        *reinterpret_cast<float4*>(red + ((j * 32 + lane) * kNt + nt) * 4) =
            make_float4(acc[nt][0], acc[nt][1], acc[nt][2], acc[nt][3]);
        acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
      }
    }
    kc = next(kc);
  }
  CpAsyncWait<0>();
  __syncthreads();
  if (warp != 0) return;
  float total[kNt][4];
#pragma unroll
  for (int nt = 0; nt < kNt; ++nt) total[nt][0] = total[nt][1] = total[nt][2] = total[nt][3] = -0.0f;
  for (int64_t j = 0; j < slice_count; ++j) {
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt) {
      const float4 v = *reinterpret_cast<const float4*>(red + ((j * 32 + lane) * kNt + nt) * 4);
      total[nt][0] = __fadd_rn(total[nt][0], v.x);
      total[nt][1] = __fadd_rn(total[nt][1], v.y);
      total[nt][2] = __fadd_rn(total[nt][2], v.z);
      total[nt][3] = __fadd_rn(total[nt][3], v.w);
    }
  }
  StoreWeightsAsAOutputs<kNt>(total, t, m, n0 + g, true, n0 + 8 + g, n0 + 8 + g <= last, y, ldy, round_bf16);
}

// Warps a block: one per slice, as many as fit kSmemBudget (each warp then takes every
// warps-th slice); the slice sums' buffer after the rings.
struct BlockShape {
  int warps;
  int64_t smem;
};
int NTiles(int64_t m) { return m <= 8 ? 1 : 2; }
template <int kDK>
BlockShape ShapeFor(int64_t m, int64_t k, bool nvfp4) {
  const int64_t slices = (k + kW4SliceColumns - 1) / kW4SliceColumns,
                red = slices * 32 * 16 * NTiles(m) + (nvfp4 ? kTableBytes : 0);
  const int64_t ring = int64_t{kStages} * Layout<kDK>(static_cast<int>(m)).bytes;
  int64_t warps = slices < kMaxWarps ? slices : kMaxWarps;
  while (warps > 1 && warps * ring + red > kSmemBudget) --warps;
  return {static_cast<int>(warps), warps * ring + red};
}

// 256-column stages: int4 at up to 8 rows, K whole stages, groups of >= 64 (at most 4 scales a
// row a stage, what the scale copies and kScaleBytes hold), and still a warp for every slice
// (the down projection's 17 slices would otherwise leave one warp two: measured slower).
bool WideStages(int64_t m, const DevWeight& w) {
  if (w.format != DevFormat::kInt4 || m > 8 || w.cols % 256 != 0 || w.group < 64) return false;
  const BlockShape b = ShapeFor<256>(m, w.cols, false);
  return b.smem <= kSmemBudget && b.warps == (w.cols + kW4SliceColumns - 1) / kW4SliceColumns;
}

template <W4Kind kKind, int kNt, bool kOneScale, int kDK>
Status Launch(const __nv_bfloat16* xb, int64_t m, const DevWeight& w, float* y, int64_t ldy, bool round_output,
              cudaStream_t s) {
  static const cudaError_t ready = [] {
    cudaError_t e = cudaFuncSetAttribute(GemmDecodeW4Kernel<kKind, kNt, kOneScale, kDK>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024);
    if (e == cudaSuccess) {
      e = cudaFuncSetAttribute(GemmDecodeW4Kernel<kKind, kNt, kOneScale, kDK>,
                               cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
    }
    return e;
  }();
  if (ready != cudaSuccess) return Internal(std::string("cuda GemmDecodeW4a16: shared memory: ") + cudaGetErrorString(ready));
  const BlockShape b = ShapeFor<kDK>(m, w.cols, kKind == W4Kind::kNvfp4);
  const auto blocks = static_cast<unsigned>((w.rows + kRows - 1) / kRows);
  GemmDecodeW4Kernel<kKind, kNt, kOneScale, kDK><<<blocks, 32 * b.warps, static_cast<size_t>(b.smem), s>>>(
      xb, static_cast<int>(m), w, y, ldy, round_output);
  return Launched("GemmDecodeW4a16");
}

template <W4Kind kKind, bool kOneScale>
Status LaunchFor(const __nv_bfloat16* xb, int64_t m, const DevWeight& w, float* y, int64_t ldy, bool round_output,
                 cudaStream_t s) {
  return NTiles(m) == 1 ? Launch<kKind, 1, kOneScale, 128>(xb, m, w, y, ldy, round_output, s)
                        : Launch<kKind, 2, kOneScale, 128>(xb, m, w, y, ldy, round_output, s);
}

// int4: 256-column stages where they fit (one or two scales a stage), else 128-column ones with
// one scale a stage (groups of a stage or more) or several.
template <W4Kind kKind>
Status LaunchInt4(const __nv_bfloat16* xb, int64_t m, const DevWeight& w, float* y, int64_t ldy, bool round_output,
                  cudaStream_t s) {
  if (WideStages(m, w)) {
    return w.group >= 256 ? Launch<kKind, 1, true, 256>(xb, m, w, y, ldy, round_output, s)
                          : Launch<kKind, 1, false, 256>(xb, m, w, y, ldy, round_output, s);
  }
  return w.group >= 128 ? LaunchFor<kKind, true>(xb, m, w, y, ldy, round_output, s)
                        : LaunchFor<kKind, false>(xb, m, w, y, ldy, round_output, s);
}

}  // namespace

bool DecodeW4a16Fits(int64_t m, const DevWeight& w) {
  if (m < 1 || m > 16 || w.rows % 8 != 0 || w.cols % 128 != 0 || w.rows / kRows > 0x7fffffff) return false;
  const bool nvfp4 = w.format == DevFormat::kNvfp4;
  if (ShapeFor<128>(m, w.cols, nvfp4).smem > kSmemBudget) return false;  // K beyond a block's slice sums
  if (reinterpret_cast<uintptr_t>(w.data) % 16 != 0) return false;
  if (nvfp4) {
    return w.int4_lanes && w.nvfp4_table != nullptr && w.scale_fp8 != nullptr &&
           reinterpret_cast<uintptr_t>(w.scale_fp8) % 16 == 0;
  }
  return w.format == DevFormat::kInt4 && w.int4_lanes && w.zero == nullptr && w.group >= 32 &&
         (w.group & (w.group - 1)) == 0;  // groups >= 32: at most 4 scales a row a stage (kScaleBytes)
}

Status GemmDecodeW4a16(const uint16_t* xb, int64_t m, const DevWeight& w, float* y, int64_t ldy, bool round_output,
                       void* stream) {
  if (!DecodeW4a16Fits(m, w) || ldy < w.rows || reinterpret_cast<uintptr_t>(xb) % 16 != 0) {
    return InvalidArgument("cuda GemmDecodeW4a16: needs 1..16 rows, N % 8 == 0, K % 128 == 0, symmetric int4 groups "
                           "of 2^j >= 32 columns or NVFP4, aligned operands");
  }
  const auto* xp = reinterpret_cast<const __nv_bfloat16*>(xb);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (w.format == DevFormat::kNvfp4) return LaunchFor<W4Kind::kNvfp4, false>(xp, m, w, y, ldy, round_output, s);
  return w.scale_bf16 ? LaunchInt4<W4Kind::kInt4Bf16Scale>(xp, m, w, y, ldy, round_output, s)
                      : LaunchInt4<W4Kind::kInt4F32Scale>(xp, m, w, y, ldy, round_output, s);
}

}  // namespace graft::cuda

#include "backend/cuda/gemm_decode_w4.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/int4_lanes.h"
#include "backend/cuda/launched.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/matmul.h"
#include "backend/cuda/mma_ptx.cuh"
#include "backend/cuda/nvfp4_table.h"
#include "backend/cuda/w4_fragments.cuh"

namespace graft::cuda {
namespace {

// A block: kWarps 16-output warps on one slice, sharing the slice of x it converts: four for up
// to three rows, eight from four (x's slice in fp32 is m x 4 KB a block against the block's 8 KB
// of weights a warp: at 16 rows four warps read twice their weights' bytes of x), sixteen past
// eight rows for weights of at least kWideOutputs outputs (gate|up, q|k|v, the GDN input: +13%
// at 16 rows; at 8 rows sixteen lose 20%, and the 5,120-output down / o gain nothing: fewer
// blocks than the SMs' slots; bench/results/decode.md § sweeps (2026-12-02)).
// Tried below four rows (bench/results/decode.md § whole (2026-12-02)): one warp chaining all of K of a
// wide weight and adding its slices itself (no partials, no SumSplits, one long stream a warp):
// 1-8% slower with four-stage rings (fewer warps, fewer bytes in flight), 12-25% with deeper ones;
// bounding the four-warp form to 7 or 8 blocks a multiprocessor (72 / 64 registers, against 79
// and 6): the spills cost 10-21%. Under ncu (there) a third of its stalls wait on memory and as
// many on issue: fewer instructions a byte matter as much as more bytes in flight.
constexpr int kFewRowsWarps = 4, kManyRowsWarps = 8, kManyRowsFrom = 4, kWideManyRowsWarps = 16;
constexpr int64_t kWideOutputs = 8192;
constexpr int kRows = 16;         // outputs a warp: the mma's M
constexpr int kStage = 128;       // K columns a stage: one 16-byte load a lane and row (int4_lanes.h)
constexpr int64_t kMaxTailRows = 256;  // a bf16 tail is a few outputs (matmul.cu's kFewOutputs: sliced at every m)
constexpr int kDepth = 4;         // stages a warp has in flight ahead of the one it computes
constexpr int kXLd = kW4SliceColumns + 8;  // bf16 a shared x row: ldmatrix's eight rows in distinct bank quads
static_assert(kInt4LaneBlock == kStage, "a stage is one lane-order block");
static_assert(kW4SliceColumns % kStage == 0, "a slice is whole stages");
constexpr int kSliceStages = kW4SliceColumns / kStage;

using namespace w4;  // NOLINT: the shared fragment helpers (w4_fragments.cuh)

// The slice of x [m, K] (columns k0 .. k0 + cols) to bf16 (round to nearest, as ToBf16) in
// shared memory, rows xld apart.
__device__ __forceinline__ void StageX(unsigned char* smem, const float* __restrict__ x, int m, int64_t k, int64_t k0,
                                       int cols, int xld) {
  const int per_row = cols / 4;
  for (int i = threadIdx.x; i < m * per_row; i += blockDim.x) {
    const int r = i / per_row, c = i - r * per_row;
    const float4 v = __ldg(reinterpret_cast<const float4*>(x + r * k + k0) + c);
    *reinterpret_cast<uint2*>(smem + (r * xld + 4 * c) * 2) = make_uint2(PackBf16(v.x, v.y), PackBf16(v.z, v.w));
  }
}

// A warp of the bf16 tail (a fused weight's few dense rows beside its 4-bit ones, e.g. the GDN
// in-projection's b / a): rows r0 .. r0 + 15 of `tail` over the slice's stages, the same chain as
// the 4-bit rows' (and MatMulSplitK's on a dense weight: 16-column steps ascending from zero), the
// A fragments read straight from the bf16 rows (row-major: a word is a column pair).
template <int kNt>
__device__ __forceinline__ void TailWarpChain(const DevWeight& tail, int64_t r0, int64_t k0, int stages,
                                              const unsigned char* smem, const int (&x_off)[kNt], int g, int t,
                                              float (&acc)[kNt][4]) {
  const int64_t k = tail.cols;
  const auto* wl = static_cast<const uint16_t*>(tail.data) + (r0 + g) * k + k0 + 2 * t;
  const auto* wh = wl + 8 * k;
  for (int s = 0; s < stages; ++s) {
    unsigned a[8][4];  // K16 steps 0..7 of the stage
#pragma unroll
    for (int h = 0; h < 8; ++h) {
      const int c = s * kStage + 16 * h;
      a[h][0] = __ldg(reinterpret_cast<const unsigned*>(wl + c));
      a[h][1] = __ldg(reinterpret_cast<const unsigned*>(wh + c));
      a[h][2] = __ldg(reinterpret_cast<const unsigned*>(wl + c + 8));
      a[h][3] = __ldg(reinterpret_cast<const unsigned*>(wh + c + 8));
    }
    const unsigned char* xs = smem + s * kStage * 2;
#pragma unroll
    for (int b = 0; b < 4; ++b) {
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt) {
        unsigned bf[4];
        LdMatrixX4(bf, xs + x_off[nt] + b * 64);
        Mma16816(acc[nt], a[2 * b], bf[0], bf[1]);
        Mma16816(acc[nt], a[2 * b + 1], bf[2], bf[3]);
      }
    }
  }
}

// Block (blockIdx.x, j = blockIdx.y): outputs 64 blockIdx.x .. + 63 over slice j's columns
// [1024 j, min(K, 1024 (j + 1))). Each warp's chain runs from zero through the slice's K16 steps
// in ascending order (two a 32-column step, four steps a stage); its sums go to
// partial[j][x row][output], or with one slice straight to y. kNt: n-tiles of 8 x rows (1 up to
// 8 rows, 2 up to 16). kSw: scale words a row and stage (see Stage).
template <W4Kind kKind, int kNt, int kSw, int kWarps>
__global__ void __launch_bounds__(32 * kWarps) GemmDecodeW4Kernel(const float* __restrict__ x, int m, DevWeight dw,
                                                                  float* __restrict__ y, int64_t ldy, bool round_bf16,
                                                                  float* __restrict__ partial, DevWeight tail,
                                                                  int tail_blocks) {
  extern __shared__ __align__(16) unsigned char smem[];  // x's slice [m][kXLd] bf16, then the NVFP4 table
  constexpr bool kFp4 = kKind == W4Kind::kNvfp4;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t k = dw.cols, n = dw.rows, last = n - 1, j = blockIdx.y, k0 = j * kW4SliceColumns;
  const int cols = static_cast<int>(k - k0 < kW4SliceColumns ? k - k0 : kW4SliceColumns), stages = cols / kStage;
  // Outputs a row of partial sums: the 4-bit rows, then the tail's (written at columns n + r).
  const int64_t n_all = n + (tail_blocks > 0 ? tail.rows : 0);
  if (static_cast<int>(blockIdx.x) < tail_blocks) {  // the tail's blocks come first: they start early
    PdlBegin();
    StageX(smem, x, m, k, k0, cols, kXLd);
    __syncthreads();
    const int64_t tr0 = int64_t{blockIdx.x} * (kRows * kWarps) + kRows * warp;
    if (tr0 >= tail.rows) return;  // tail.rows % 16 == 0: a warp is whole or idle
    int x_off[kNt];
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt) x_off[nt] = (min(8 * nt + lane % 8, m - 1) * kXLd + (lane / 8) * 8) * 2;
    float acc[kNt][4] = {};
    TailWarpChain<kNt>(tail, tr0, k0, stages, smem, x_off, g, t, acc);
    if (gridDim.y == 1) {
      StoreWeightsAsAOutputs<kNt>(acc, t, m, tr0 + g, true, tr0 + 8 + g, true, y + n, ldy, round_bf16);
    } else {
      StoreWeightsAsAOutputs<kNt>(acc, t, m, tr0 + g, true, tr0 + 8 + g, true, partial + j * m * n_all + n, n_all, false);
    }
    return;
  }
  const int64_t r0 = int64_t{blockIdx.x - tail_blocks} * (kRows * kWarps) + kRows * warp;
  const bool active = r0 <= last;  // N % 16 == 8: the last warp's upper rows read row N - 1 and are not written
  const int64_t rlo = min(r0 + g, last), rhi = min(r0 + 8 + g, last);

  // This lane's loads: stage s of row r is the 16 bytes at (r, k0 + 128 s) + 16 t (int4_lanes.h).
  const auto* wlo = reinterpret_cast<const uint4*>(static_cast<const unsigned char*>(dw.data) + rlo * (k / 2) + k0 / 2) + t;
  const auto* whi = reinterpret_cast<const uint4*>(static_cast<const unsigned char*>(dw.data) + rhi * (k / 2) + k0 / 2) + t;
  const int glog = kFp4 ? 4 : 31 - __clz(dw.group);
  const uint32_t *slo, *shi;  // a row's scale words from the slice's first column
  if constexpr (kFp4) {
    slo = reinterpret_cast<const uint32_t*>(dw.scale_fp8 + rlo * (k / 16) + k0 / 16);
    shi = reinterpret_cast<const uint32_t*>(dw.scale_fp8 + rhi * (k / 16) + k0 / 16);
  } else {
    const int64_t groups = k >> glog;
    slo = reinterpret_cast<const uint32_t*>(dw.scale) + rlo * groups;
    shi = reinterpret_cast<const uint32_t*>(dw.scale) + rhi * groups;
  }
  auto load = [&](Stage<kSw>& st, int s) {
    st.lo = LdStream(wlo + 4 * s);
    st.hi = LdStream(whi + 4 * s);
    // NVFP4: eight code bytes a stage; int4 kSw > 1: kSw scales a stage; kSw == 1: the group of
    // the stage's first column (groups >= 128 columns hold whole stages).
    const int64_t off = kFp4 ? 2 * s : kSw > 1 ? ((k0 >> glog) + kSw * s) : ((k0 + kStage * s) >> glog);
    LdWords<kSw>(slo + off, st.slo);
    LdWords<kSw>(shi + off, st.shi);
  };
  Stage<kSw> ring[kDepth];
  if (active) {
#pragma unroll
    for (int i = 0; i < kDepth; ++i) {
      if (i < stages) load(ring[i], i);
    }
  }

  // Only now wait for the kernel that wrote x (pdl.cuh): the ring's first weight loads, issued
  // above, overlap its tail; 4-bit weights are never written by a kernel of a step.
  PdlBegin();

  // While those loads fly: the slice of x to bf16 (round to nearest, as ToBf16) in shared memory,
  // and the NVFP4 table.
  StageX(smem, x, m, k, k0, cols, kXLd);
  [[maybe_unused]] Nvfp4Entry* tab = reinterpret_cast<Nvfp4Entry*>(smem + m * kXLd * 2);
  if constexpr (kFp4) {
    for (int i = threadIdx.x; i < kNvfp4TableEntries; i += blockDim.x) tab[i] = dw.nvfp4_table[i];
  }
  __syncthreads();
  if (!active) return;

  // ldmatrix.x4 of x as the B operand: lane l addresses row l % 8 (+ 8 for the second n-tile) of
  // matrix l / 8, the 8 columns at 8 (l / 8) of a 32-column step; rows past m read row m - 1.
  int x_off[kNt];
#pragma unroll
  for (int nt = 0; nt < kNt; ++nt) x_off[nt] = (min(8 * nt + lane % 8, m - 1) * kXLd + (lane / 8) * 8) * 2;
  float acc[kNt][4] = {};
  // Stage s's four 32-column steps into acc.
  auto compute = [&](const Stage<kSw>& cur, int s) {
    const unsigned char* xs = smem + s * kStage * 2;
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      unsigned a[2][4];
      Fragments<kKind, kSw>(cur, b, tab, a);
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt) {
        unsigned bf[4];  // b0, b1 of step 0, then of step 1
        LdMatrixX4(bf, xs + x_off[nt] + b * 64);
        Mma16816(acc[nt], a[0], bf[0], bf[1]);
        Mma16816(acc[nt], a[1], bf[2], bf[3]);
      }
    }
  };
  if (stages == kSliceStages) {
    // A whole slice (all but a short last one): unrolled at compile time, so that the ring needs
    // no moves between rounds, every load and ldmatrix address is a base plus a constant, and no
    // stage tests its index. The same chain as the loop below.
#pragma unroll
    for (int s = 0; s < kSliceStages; ++s) {
      const Stage<kSw> cur = ring[s % kDepth];
      if (s + kDepth < kSliceStages) load(ring[s % kDepth], s + kDepth);
      compute(cur, s);
    }
  } else {
    for (int s0 = 0; s0 < stages; s0 += kDepth) {
#pragma unroll
      for (int i = 0; i < kDepth; ++i) {
        const int s = s0 + i;
        if (s < stages) {
          const Stage<kSw> cur = ring[i];
          if (s + kDepth < stages) load(ring[i], s + kDepth);
          compute(cur, s);
        }
      }
    }
  }
  const bool hi_ok = r0 + 8 + g <= last;
  if (gridDim.y == 1) {
    StoreWeightsAsAOutputs<kNt>(acc, t, m, r0 + g, true, r0 + 8 + g, hi_ok, y, ldy, round_bf16);
  } else {
    StoreWeightsAsAOutputs<kNt>(acc, t, m, r0 + g, true, r0 + 8 + g, hi_ok, partial + j * m * n_all, n_all, false);
  }
}

int64_t Slices(const DevWeight& w) { return (w.cols + kW4SliceColumns - 1) / kW4SliceColumns; }

// One call's operands: tail (rows 0: none) is a dense bf16 weight of the same K whose outputs
// follow w's in y (columns w.rows ..) and in the partial sums.
struct W4Call {
  const float* x;
  int64_t m;
  const DevWeight& w;
  float* y;
  int64_t ldy;
  bool round_output;
  cudaStream_t s;
  float* partial;
  const DevWeight& tail;
};

template <W4Kind kKind, int kNt, int kSw, int kWarps>
Status Launch(const W4Call& c) {
  const int64_t per_block = kRows * kWarps;
  const int tail_blocks = static_cast<int>((c.tail.rows + per_block - 1) / per_block);
  const dim3 grid(static_cast<unsigned>((c.w.rows + per_block - 1) / per_block + tail_blocks),
                  static_cast<unsigned>(Slices(c.w)));
  const size_t smem = static_cast<size_t>(c.m * kXLd * 2 + (kKind == W4Kind::kNvfp4 ? kNvfp4TableEntries * 16 : 0));
  LaunchPdl(GemmDecodeW4Kernel<kKind, kNt, kSw, kWarps>, grid, 32 * kWarps, smem, c.s, c.x, static_cast<int>(c.m), c.w,
            c.y, c.ldy, c.round_output, c.partial, c.tail, tail_blocks);
  return Launched("GemmDecodeW4a16");
}

template <W4Kind kKind, int kSw>
Status LaunchRows(const W4Call& c) {
  if (c.m < kManyRowsFrom) return Launch<kKind, 1, kSw, kFewRowsWarps>(c);
  if (c.m <= 8) return Launch<kKind, 1, kSw, kManyRowsWarps>(c);
  return c.w.rows >= kWideOutputs ? Launch<kKind, 2, kSw, kWideManyRowsWarps>(c) : Launch<kKind, 2, kSw, kManyRowsWarps>(c);
}

// int4: one scale word a stage (groups of >= 128 columns), two (64) or four (32).
template <W4Kind kKind>
Status LaunchInt4(const W4Call& c) {
  if (c.w.group >= kStage) return LaunchRows<kKind, 1>(c);
  return c.w.group == 64 ? LaunchRows<kKind, 2>(c) : LaunchRows<kKind, 4>(c);
}

// Outputs a row of y this call fills: w's, then the tail's.
int64_t Outputs(const DevWeight& w, const DevWeight* tail) { return w.rows + (tail != nullptr ? tail->rows : 0); }

}  // namespace

bool W4LanesFit(const DevWeight& w) {
  if (w.rows < 8 || w.rows % 8 != 0 || w.cols < kStage || w.cols % kStage != 0 || w.rows > (int64_t{1} << 36)) return false;
  if (Slices(w) > 65535 || reinterpret_cast<uintptr_t>(w.data) % 16 != 0) return false;
  if (w.format == DevFormat::kNvfp4) {
    return w.int4_lanes && w.nvfp4_table != nullptr && w.scale_fp8 != nullptr &&
           reinterpret_cast<uintptr_t>(w.scale_fp8) % 16 == 0;
  }
  return w.format == DevFormat::kInt4 && w.int4_lanes && w.zero == nullptr && w.group >= 32 &&
         (w.group & (w.group - 1)) == 0 && reinterpret_cast<uintptr_t>(w.scale) % 16 == 0;
}

bool DecodeW4a16Fits(int64_t m, const DevWeight& w) { return m >= 1 && m <= 16 && W4LanesFit(w); }

bool DecodeW4a16TailFits(int64_t m, const DevWeight& w, const DevWeight& tail) {
  return DecodeW4a16Fits(m, w) && w.rows % kRows == 0 && tail.bf16 && !tail.quantized() && tail.cols == w.cols &&
         tail.rows > 0 && tail.rows % kRows == 0 && tail.rows <= kMaxTailRows && reinterpret_cast<uintptr_t>(tail.data) % 16 == 0;
}

int64_t DecodeW4a16ScratchBytes(int64_t m, const DevWeight& w, const DevWeight* tail) {
  const int64_t slices = Slices(w);
  return slices > 1 ? slices * m * Outputs(w, tail) * 4 : 0;
}

Status GemmDecodeW4a16(const float* x, int64_t m, const DevWeight& w, float* y, int64_t ldy, bool round_output,
                       void* stream, void* scratch, const DevWeight* tail) {
  if (!DecodeW4a16Fits(m, w) || ldy < Outputs(w, tail) || reinterpret_cast<uintptr_t>(x) % 16 != 0) {
    return InvalidArgument("cuda GemmDecodeW4a16: needs 1..16 rows, N % 8 == 0, K % 128 == 0, symmetric int4 groups "
                           "of 2^j >= 32 columns or NVFP4, aligned operands");
  }
  if (tail != nullptr && !DecodeW4a16TailFits(m, w, *tail)) {
    return InvalidArgument("cuda GemmDecodeW4a16: a bf16 tail needs w's K, a multiple of 16 rows up to 256, aligned "
                           "data, and w's rows a multiple of 16");
  }
  const bool split = Slices(w) > 1;
  if (split && (scratch == nullptr || reinterpret_cast<uintptr_t>(scratch) % 16 != 0)) {
    return InvalidArgument("cuda GemmDecodeW4a16: K > 1024 needs DecodeW4a16ScratchBytes of aligned scratch");
  }
  const DevWeight none{};
  const W4Call c{x, m, w, y, ldy, round_output, static_cast<cudaStream_t>(stream), static_cast<float*>(scratch),
                 tail != nullptr ? *tail : none};
  Status st = w.format == DevFormat::kNvfp4 ? LaunchRows<W4Kind::kNvfp4, 2>(c)
              : w.scale_bf16               ? LaunchInt4<W4Kind::kInt4Bf16Scale>(c)
                                           : LaunchInt4<W4Kind::kInt4F32Scale>(c);
  if (!st.ok() || !split) return st;
  DevWeight all = w;  // SumSplits over every output: w's and the tail's
  all.rows = Outputs(w, tail);
  return SumSplitsInto(c.partial, m, all, y, ldy, round_output, stream);
}

}  // namespace graft::cuda

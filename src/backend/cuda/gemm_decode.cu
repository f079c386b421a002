#include "backend/cuda/gemm_decode.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <string>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/gemm_pipe.h"
#include "backend/cuda/launched.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/mma_ptx.cuh"

namespace graft::cuda {
namespace {

// One shape of the decode form: kWarps warps a block, each owning 8 outputs for all rows (kMT
// tiles of 16), K streamed kDK columns a stage through a kStages-deep cp.async ring that holds
// the block's 8 kWarps weight rows and the m x rows, kDK + 8 elements apart (ldmatrix's eight
// row reads then land in eight different bank groups).
template <int kMT, int kWarps, int kDK, int kStages>
struct DecodeShape {
  static constexpr int kMT_ = kMT, kWarps_ = kWarps, kDK_ = kDK, kStages_ = kStages;
  static constexpr int kLd = kDK + 8;
  static constexpr int kPer = kDK / 8;                   // 16-byte pieces in a row of a full stage
  static constexpr int kWPieces = kPer / 4;              // weight pieces per thread per stage
  static constexpr int kThreads = 32 * kWarps;
  static int64_t SmemBytes(int64_t m) { return int64_t{kStages} * (8 * kWarps + m) * kLd * 2; }
};
// The shape is picked by the row count and the weight's outputs (a function of m and N, never
// of the bits: every shape sums each output's K chunks in the same order). More warps a block
// share each stage's x rows (x is read from L2 once a block: with a warp a block at 16 rows,
// twice the weight's bytes), fewer leave more blocks for weights with few outputs (a decode
// step's down and o projections: 5,120 outputs are 640 one-warp blocks but 80 eight-warp ones).
// Chosen by sweeping the H200 over Qwen3.5-27B's bf16 projections at 1-64 rows
// (bench/results/decode.md § attn-prep (2026-12-02)); "wide" is N >= kWideOutputs.
constexpr int64_t kWideOutputs = 8192;
// One row, few outputs (down, o, the GDN out-projection): two warps a block, six stages of 256
// columns — 24 KB of weights in flight a warp, 54 KB of shared memory a block, so 5,120 outputs'
// 320 blocks are all resident at once. Against one warp and four stages: down 61.7 -> 57.8 us,
// o / GDN out 26.9 -> 24.8 us (Qwen3.5-27B, 4-8%); one warp with six or eight stages, eight
// stages of 128 columns, four or six of 512: equal or slower
// (bench/results/decode.md § stream (2026-12-03)).
using Shape1 = DecodeShape<1, 2, 256, 6>;
// One row, wide (gate|up, the GDN in-projection, q|k|v, the head): four warps, three stages of
// 256 columns — 9-21% faster there, 15% slower on the down projection. (Four stages, eight
// warps, two warps, three stages of 512 columns: equal or slower, bench/results/decode.md § stream (2026-12-03).)
using Shape1Wide = DecodeShape<1, 4, 256, 3>;
// 2 to 16 rows: eight warps (wide) or six. The one-warp form ran 16 rows at 47% of the copy
// bandwidth (projections) and 37% (head); these at 63% and 87%.
using Shape16 = DecodeShape<1, 6, 128, 4>;
using Shape16Wide = DecodeShape<1, 8, 128, 4>;
// 17 to 32 rows: eight warps (+23% on the step's projections against four).
using Shape32 = DecodeShape<2, 8, 128, 4>;
// 33 to 64 rows: eight warps and three stages (wide; 64 rows' stages are large), else four
// warps and four stages.
using Shape64 = DecodeShape<4, 4, 128, 4>;
using Shape64Wide = DecodeShape<4, 8, 128, 3>;

template <class S>
__global__ void __launch_bounds__(S::kThreads) GemmDecodeKernel(const __nv_bfloat16* __restrict__ xb, int m,
                                                                const __nv_bfloat16* __restrict__ w, int64_t n,
                                                                int64_t k, float* __restrict__ y, int64_t ldy,
                                                                bool round_bf16, int64_t kz, int64_t split_stride,
                                                                int64_t x_cols, bool add, const int32_t* add_rows,
                                                                float add_scale) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  constexpr int kDK = S::kDK_, kLd = S::kLd, kPer = S::kPer, kStages = S::kStages_, kT = S::kThreads;
  extern __shared__ __align__(16) __nv_bfloat16 sm[];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
  const int rows = 8 * S::kWarps_ + m;  // smem rows a stage: weights, then x
  const int64_t nb = int64_t{blockIdx.x} * 8 * S::kWarps_;
  // This block's K range (blockIdx.y's slice of a split product, else all of K) and its output.
  const int64_t kb = int64_t{blockIdx.y} * kz, ke = min(k, kb + kz);
  y += int64_t{blockIdx.y} * split_stride;
  // This thread's weight pieces of every full stage: row r = e / kPer, piece e % kPer. Rows past
  // N (the last block's idle warps) read row N - 1; their outputs are never stored.
  const __nv_bfloat16* wsrc[S::kWPieces];
  int wdst[S::kWPieces];
#pragma unroll
  for (int i = 0; i < S::kWPieces; ++i) {
    const int e = tid + i * kT, r = e / kPer, c = (e % kPer) * 8;
    wsrc[i] = w + min(nb + r, n - 1) * k + c;
    wdst[i] = r * kLd + c;
  }
  // x's rows are x_cols long and repeat along K (x_cols == K, or a multiple of kDK dividing it).
  auto load = [&](int st, int64_t k0) {
    __nv_bfloat16* base = sm + st * rows * kLd;
    const __nv_bfloat16* xk = xb + (x_cols == k ? k0 : k0 % x_cols);
    if (ke - k0 >= kDK) {
#pragma unroll
      for (int i = 0; i < S::kWPieces; ++i) CpAsync16(base + wdst[i], wsrc[i] + k0);
      for (int e = tid; e < m * kPer; e += kT) {
        const int r = e / kPer, c = (e % kPer) * 8;
        CpAsync16(base + (8 * S::kWarps_ + r) * kLd + c, xk + int64_t{r} * x_cols + c);
      }
    } else {  // the last, partial stage
      const int per = static_cast<int>(ke - k0) / 8;
      for (int e = tid; e < rows * per; e += kT) {
        const int r = e / per, c = (e % per) * 8;
        const __nv_bfloat16* src = r < 8 * S::kWarps_ ? w + min(nb + r, n - 1) * k + k0 + c
                                                       : xk + int64_t{r - 8 * S::kWarps_} * x_cols + c;
        CpAsync16(base + r * kLd + c, src);
      }
    }
  };
  float acc[S::kMT_][4] = {};
  const int64_t slices = (ke - kb + kDK - 1) / kDK;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < slices) load(s, kb + int64_t{s} * kDK);
    CpAsyncCommit();
  }
  // ldmatrix row addresses (element offsets within a stage): the weights, two 16-column chunks
  // at a time (matrices: chunk c's K 0-7, 8-15, chunk c + 1's); x, one 16 x 16 tile (rows 0-7
  // and 8-15 at K 0-7, then at K 8-15), rows past m reading row m - 1 (their outputs unused).
  const int w_off = (8 * warp + lane % 8) * kLd + (lane / 8) * 8;
  const int w_off2 = (8 * warp + lane % 8) * kLd + ((lane / 8) % 2) * 8;  // one chunk (ldmatrix.x2)
  int x_off[S::kMT_];
#pragma unroll
  for (int mt = 0; mt < S::kMT_; ++mt) {
    const int r = min(16 * mt + lane % 16, m - 1);
    x_off[mt] = (8 * S::kWarps_ + r) * kLd + (lane / 16) * 8;
  }
  for (int64_t i = 0; i < slices; ++i) {
    CpAsyncWait<kStages - 2>();  // slice i has landed (this thread's copies) ...
    __syncthreads();             // ... and every thread's; all are done with slice i - 1's stage
    if (i + kStages - 1 < slices) load(static_cast<int>((i + kStages - 1) % kStages), kb + (i + kStages - 1) * kDK);
    CpAsyncCommit();
    const __nv_bfloat16* base = sm + static_cast<int>(i % kStages) * rows * kLd;
    const int span = static_cast<int>(min(static_cast<int64_t>(kDK), ke - kb - i * kDK));  // a multiple of 16
    auto chunk = [&](int kk, unsigned b0, unsigned b1) {
#pragma unroll
      for (int mt = 0; mt < S::kMT_; ++mt) {
        unsigned a[4];
        LdMatrixX4(a, base + x_off[mt] + kk);
        Mma16816(acc[mt], a, b0, b1);
      }
    };
    if (span == kDK) {
#pragma unroll
      for (int kk = 0; kk < kDK; kk += 32) {
        unsigned b[4];
        LdMatrixX4(b, base + w_off + kk);
        chunk(kk, b[0], b[1]);
        chunk(kk + 16, b[2], b[3]);
      }
    } else {
      for (int kk = 0; kk < span; kk += 16) {
        unsigned b0, b1;
        LdMatrixX2(b0, b1, base + w_off2 + kk);
        chunk(kk, b0, b1);
      }
    }
  }
  CpAsyncWait<0>();
  const int64_t c = nb + 8 * warp + 2 * t;
  if (c >= n) return;
  if (add) {  // GemmDecodeAddRows: LoraScatterAdd's arithmetic on the rounded outputs
#pragma unroll
    for (int mt = 0; mt < S::kMT_; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = 16 * mt + g + 8 * h;
        if (r >= m) continue;
        float* yr = y + int64_t{add_rows ? add_rows[r] : r} * ldy + c;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float d = RoundAct(__fmul_rn(RoundAct(acc[mt][2 * h + e], true), add_scale), true);
          yr[e] = RoundAct(__fadd_rn(yr[e], d), true);
        }
      }
    }
    return;
  }
#pragma unroll
  for (int mt = 0; mt < S::kMT_; ++mt) {
    const int r0 = 16 * mt + g, r1 = r0 + 8;
    if (r0 < m) {
      y[r0 * ldy + c] = RoundAct(acc[mt][0], round_bf16);
      y[r0 * ldy + c + 1] = RoundAct(acc[mt][1], round_bf16);
    }
    if (r1 < m) {
      y[r1 * ldy + c] = RoundAct(acc[mt][2], round_bf16);
      y[r1 * ldy + c + 1] = RoundAct(acc[mt][3], round_bf16);
    }
  }
}

// The epilogue of GemmDecodeAddRows (add false: GemmDecode's stores).
struct AddRows {
  bool add = false;
  const int32_t* rows = nullptr;
  float scale = 1.0f;
};

template <class S>
Status Launch(const __nv_bfloat16* xb, int64_t m, const __nv_bfloat16* w, int64_t n, int64_t k, float* y, int64_t ldy,
              bool round_output, int64_t kz, int64_t x_cols, cudaStream_t s, AddRows add = {}) {
  // The kernel needs no L1 cache (x travels with the weights through shared memory): all of the
  // unified memory as shared memory lets the most blocks sit on each multiprocessor.
  static const cudaError_t ready = [] {
    cudaError_t e = cudaFuncSetAttribute(GemmDecodeKernel<S>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(S::SmemBytes(16 * S::kMT_)));
    if (e == cudaSuccess) {
      e = cudaFuncSetAttribute(GemmDecodeKernel<S>, cudaFuncAttributePreferredSharedMemoryCarveout,
                               cudaSharedmemCarveoutMaxShared);
    }
    return e;
  }();
  if (ready != cudaSuccess) return Internal(std::string("cuda GemmDecode: shared memory: ") + cudaGetErrorString(ready));
  const int64_t per_block = 8 * S::kWarps_;
  const dim3 grid(static_cast<unsigned>((n + per_block - 1) / per_block), static_cast<unsigned>((k + kz - 1) / kz));
  LaunchPdl(GemmDecodeKernel<S>, grid, S::kThreads, static_cast<size_t>(S::SmemBytes(m)), s, xb, static_cast<int>(m), w,
            n, k, y, ldy, round_output, kz, m * ldy, x_cols, add.add, add.rows, add.scale);
  return Launched("GemmDecode");
}

Status Dispatch(const uint16_t* xb, int64_t m, const uint16_t* w, int64_t n, int64_t k, float* y, int64_t ldy,
                bool round_output, void* stream, int64_t split_k, int64_t x_cols, AddRows add) {
  const int64_t kz = split_k > 0 ? split_k : k, xc = x_cols > 0 ? x_cols : k;
  if (m < 1 || m > kDecodeMaxRows || n <= 0 || n % 8 != 0 || k <= 0 || k % 16 != 0 || ldy < n ||
      reinterpret_cast<uintptr_t>(xb) % 16 != 0 || reinterpret_cast<uintptr_t>(w) % 16 != 0 || kz % 16 != 0 ||
      (k + kz - 1) / kz > 65535 || (xc != k && (xc % kRepeatAlign != 0 || k % xc != 0 || kz % kRepeatAlign != 0))) {
    return InvalidArgument(
        "cuda GemmDecode: needs 1..64 rows, N % 8 == 0, K % 16 == 0, aligned operands, split slices a multiple of 16, "
        "a repeated x a multiple of 256 columns dividing K");
  }
  if (n / 8 > 0x7fffffff) return InvalidArgument("cuda GemmDecode: too many outputs for one launch");
  const auto* xp = reinterpret_cast<const __nv_bfloat16*>(xb);
  const auto* wp = reinterpret_cast<const __nv_bfloat16*>(w);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const bool wide = n >= kWideOutputs;
  if (m == 1) {
    return wide ? Launch<Shape1Wide>(xp, m, wp, n, k, y, ldy, round_output, kz, xc, s, add)
                : Launch<Shape1>(xp, m, wp, n, k, y, ldy, round_output, kz, xc, s, add);
  }
  if (m <= 16) {
    return wide ? Launch<Shape16Wide>(xp, m, wp, n, k, y, ldy, round_output, kz, xc, s, add)
                : Launch<Shape16>(xp, m, wp, n, k, y, ldy, round_output, kz, xc, s, add);
  }
  if (m <= 32) return Launch<Shape32>(xp, m, wp, n, k, y, ldy, round_output, kz, xc, s, add);
  return wide ? Launch<Shape64Wide>(xp, m, wp, n, k, y, ldy, round_output, kz, xc, s, add)
              : Launch<Shape64>(xp, m, wp, n, k, y, ldy, round_output, kz, xc, s, add);
}

}  // namespace

Status GemmDecode(const uint16_t* xb, int64_t m, const uint16_t* w, int64_t n, int64_t k, float* y, int64_t ldy,
                  bool round_output, void* stream, int64_t split_k, int64_t x_cols) {
  return Dispatch(xb, m, w, n, k, y, ldy, round_output, stream, split_k, x_cols, AddRows{});
}

Status GemmDecodeAddRows(const uint16_t* xb, int64_t m, const uint16_t* w, int64_t n, int64_t k, float* y, int64_t ldy,
                         const int32_t* rows, float scale, void* stream) {
  return Dispatch(xb, m, w, n, k, y, ldy, true, stream, 0, 0, AddRows{true, rows, scale});
}

}  // namespace graft::cuda

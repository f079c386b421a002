#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/gemm_decode.h"
#include "backend/cuda/gemm_decode_w4.h"
#include "backend/cuda/gemm_pipe.h"
#include "backend/cuda/gemm_wgmma.h"
#include "backend/cuda/gemm_wgmma_w4.h"
#include "backend/cuda/launched.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/matmul.h"
#include "backend/cuda/quant_weight.cuh"
#include "backend/cuda/simt_tile.cuh"

namespace graft::cuda {
namespace {

using namespace nvcuda;

constexpr int kBM = 64, kBN = 64, kBK = 32, kPad = 8, kThreads = 128;
constexpr int64_t kSplitColumns = kW4SliceColumns;  // K columns per split of MatMulSplitK: W4A16's slices

using Acc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// W4A16's slices (gemm_decode_w4.h): where a slice ends (after column kn, of kend), the slice's
// chain joins the running total — total + acc, in ascending slice order, total from -0 (which
// adds exactly) — and the next chain starts from zero.
__device__ __forceinline__ bool SliceEnds(int64_t kn, int64_t kend) { return kn % kW4SliceColumns == 0 || kn >= kend; }
__device__ __forceinline__ void Promote(Acc& total, Acc& acc) {
#pragma unroll
  for (int e = 0; e < total.num_elements; ++e) total.x[e] = __fadd_rn(total.x[e], acc.x[e]);
  wmma::fill_fragment(acc, 0.0f);
}

// One 64 x 64 output tile per block; 4 warps as 2 x 2, each 32 x 32 = 2 x 2 WMMA fragments.
// kQuant: W is an int4 / NVFP4 tensor (dw), dequantized to bf16 while staged (W4A16: the same
// bf16 values, so the same bits, as a dense weight holding them).
template <bool kQuant>
__global__ void __launch_bounds__(kThreads) GemmBf16Kernel(const float* __restrict__ x, int64_t m,
                                                           const __nv_bfloat16* __restrict__ w, DevWeight dw, int64_t n,
                                                           int64_t k, float* __restrict__ y, int64_t ldy, bool round_bf16,
                                                           bool vec8, int64_t kz, int64_t zstride) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  __shared__ __align__(32) __nv_bfloat16 As[kBM][kBK + kPad];
  __shared__ __align__(32) __nv_bfloat16 Bs[kBN][kBK + kPad];
  __shared__ __align__(32) float Cs[kBM][kBN + 4];
  const int64_t row0 = int64_t{blockIdx.y} * kBM, col0 = int64_t{blockIdx.x} * kBN;
  const int warp = threadIdx.x / 32, wm = warp / 2, wn = warp % 2;
  Acc acc[2][2], total[2][2];  // total: kQuant's sum of slices
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f), wmma::fill_fragment(total[i][j], -0.0f);
  // Split z (MatMulSplitK) covers K columns [z kz, (z + 1) kz) and writes y + z zstride.
  const int64_t kbeg = int64_t{blockIdx.z} * kz, kend = kbeg + kz < k ? kbeg + kz : k;
  y += int64_t{blockIdx.z} * zstride;
  for (int64_t k0 = kbeg; k0 < kend; k0 += kBK) {
    for (int e = threadIdx.x; e < kBM * kBK; e += kThreads) {
      const int r = e / kBK, c = e % kBK;
      const int64_t gr = row0 + r, gc = k0 + c;
      As[r][c] = __float2bfloat16_rn(gr < m && gc < kend ? x[gr * k + gc] : 0.0f);
    }
    if constexpr (kQuant) {  // eight weights per thread and step where whole (the same values as one by one)
      for (int e = threadIdx.x; e < kBN * kBK / 8; e += kThreads) {
        const int r = e / (kBK / 8), c = (e % (kBK / 8)) * 8;
        const int64_t gr = col0 + r, gc = k0 + c;
        if (vec8 && gr < n && gc + 8 <= k) {
          *reinterpret_cast<uint4*>(&Bs[r][c]) = QuantBf16x8(dw, gr, gc);
        } else {
          for (int i = 0; i < 8; ++i) Bs[r][c + i] = __float2bfloat16_rn(gr < n && gc + i < k ? QuantAt(dw, gr, gc + i) : 0.0f);
        }
      }
    } else {
      for (int e = threadIdx.x; e < kBN * kBK; e += kThreads) {
        const int r = e / kBK, c = e % kBK;
        const int64_t gr = col0 + r, gc = k0 + c;
        Bs[r][c] = gr < n && gc < kend ? w[gr * k + gc] : __float2bfloat16_rn(0.0f);
      }
    }
    __syncthreads();
    for (int kk = 0; kk < kBK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b[2];
      for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(a[i], &As[wm * 32 + i * 16][kk], kBK + kPad);
      for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(b[j], &Bs[wn * 32 + j * 16][kk], kBK + kPad);
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
    }
    __syncthreads();
    if (kQuant && SliceEnds(k0 + kBK, kend)) {
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) Promote(total[i][j], acc[i][j]);
    }
  }
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j)
      wmma::store_matrix_sync(&Cs[wm * 32 + i * 16][wn * 32 + j * 16], kQuant ? total[i][j] : acc[i][j], kBN + 4,
                              wmma::mem_row_major);
  __syncthreads();
  for (int e = threadIdx.x; e < kBM * kBN; e += kThreads) {
    const int r = e / kBN, c = e % kBN;
    const int64_t gr = row0 + r, gc = col0 + c;
    if (gr < m && gc < n) y[gr * ldy + gc] = RoundAct(Cs[r][c], round_bf16);
  }
}

// The large-tile form for prefill-sized batches: 128 x 128 outputs per block, 8 warps as 2 x 4,
// each 64 x 32 = 4 x 2 WMMA fragments; the next 64-wide K slice is fetched into registers while
// the tensor cores work on the current one (two shared-memory buffers). Each output still gains
// its products as the same sequence of 16-wide K chunks in ascending order through the same
// WMMA instruction as GemmBf16Kernel, so the two kernels give the same bits and the choice
// between them (by m) never changes a row. Needs k % 8 == 0 and 16-byte aligned x and w.
// kQuant as for GemmBf16Kernel (eight weights dequantized per fetch; int4 groups % 8 == 0).
constexpr int kLM = 128, kLN = 128, kLK = 64, kLPad = 8, kLThreads = 256, kLLd = kLK + kLPad;
constexpr int kLAFetch = kLM * kLK / 4 / kLThreads, kLBFetch = kLN * kLK / 8 / kLThreads;  // float4s, uint4s per thread

struct LargeTileSmem {
  __nv_bfloat16 a[2][kLM][kLLd];
  __nv_bfloat16 b[2][kLN][kLLd];
};

template <bool kQuant>
__global__ void __launch_bounds__(kLThreads, 1) GemmBf16LargeKernel(const float* __restrict__ x, int64_t m,
                                                                 const __nv_bfloat16* __restrict__ w, DevWeight dw,
                                                                 int64_t n, int64_t k, float* __restrict__ y, int64_t ldy,
                                                                 bool round_bf16, int64_t kz, int64_t zstride) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  extern __shared__ __align__(128) unsigned char raw[];  // sizeof(LargeTileSmem), dynamic
  // Split z (MatMulSplitK) covers K columns [z kz, (z + 1) kz) and writes y + z zstride.
  const int64_t kbeg = int64_t{blockIdx.z} * kz, kend = kbeg + kz < k ? kbeg + kz : k;
  y += int64_t{blockIdx.z} * zstride;
  LargeTileSmem& sm = *reinterpret_cast<LargeTileSmem*>(raw);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, wm = warp / 4, wn = warp % 4;
  const int64_t row0 = int64_t{blockIdx.y} * kLM, col0 = int64_t{blockIdx.x} * kLN;
  float4 ra[kLAFetch];  // this thread's share of the next A slice (4 floats each)
  uint4 rb[kLBFetch];   // and of the next B slice (8 bf16 each)
#define GRAFT_FETCH(k0)                                                                                         \
  _Pragma("unroll") for (int i = 0; i < kLAFetch; ++i) {                                                        \
    const int f = tid + kLThreads * i, r = f / (kLK / 4), c = (f % (kLK / 4)) * 4;                             \
    const int64_t gr = row0 + r, gc = (k0) + c;                                                                 \
    ra[i] = gr < m && gc < kend ? *reinterpret_cast<const float4*>(x + gr * k + gc) : make_float4(0.f, 0.f, 0.f, 0.f); \
  }                                                                                                             \
  _Pragma("unroll") for (int i = 0; i < kLBFetch; ++i) {                                                        \
    const int u = tid + kLThreads * i, r = u / (kLK / 8), c = (u % (kLK / 8)) * 8;                             \
    const int64_t gr = col0 + r, gc = (k0) + c;                                                                 \
    if constexpr (kQuant) rb[i] = gr < n && gc < kend ? QuantBf16x8(dw, gr, gc) : make_uint4(0u, 0u, 0u, 0u);   \
    else rb[i] = gr < n && gc < kend ? *reinterpret_cast<const uint4*>(w + gr * k + gc) : make_uint4(0u, 0u, 0u, 0u); \
  }
#define GRAFT_PUT(buf)                                                                                          \
  _Pragma("unroll") for (int i = 0; i < kLAFetch; ++i) {                                                        \
    const int f = tid + kLThreads * i, r = f / (kLK / 4), c = (f % (kLK / 4)) * 4;                             \
    __nv_bfloat162* dst = reinterpret_cast<__nv_bfloat162*>(&sm.a[buf][r][c]);                                  \
    dst[0] = __floats2bfloat162_rn(ra[i].x, ra[i].y);                                                           \
    dst[1] = __floats2bfloat162_rn(ra[i].z, ra[i].w);                                                           \
  }                                                                                                             \
  _Pragma("unroll") for (int i = 0; i < kLBFetch; ++i) {                                                        \
    const int u = tid + kLThreads * i, r = u / (kLK / 8), c = (u % (kLK / 8)) * 8;                             \
    *reinterpret_cast<uint4*>(&sm.b[buf][r][c]) = rb[i];                                                        \
  }
  Acc acc[4][2], total[4][2];  // total: kQuant's sum of slices
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f), wmma::fill_fragment(total[i][j], -0.0f);
  const int64_t slices = (kend - kbeg + kLK - 1) / kLK;
  GRAFT_FETCH(kbeg)
  GRAFT_PUT(0)
  __syncthreads();
  for (int64_t t = 0; t < slices; ++t) {
    const int cur = static_cast<int>(t & 1);
    if (t + 1 < slices) {
      GRAFT_FETCH(kbeg + (t + 1) * kLK)
    }
#pragma unroll
    for (int kk = 0; kk < kLK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a[4];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b[2];
#pragma unroll
      for (int i = 0; i < 4; ++i) wmma::load_matrix_sync(a[i], &sm.a[cur][wm * 64 + i * 16][kk], kLLd);
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(b[j], &sm.b[cur][wn * 32 + j * 16][kk], kLLd);
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
    }
    if (kQuant && SliceEnds(kbeg + (t + 1) * kLK, kend)) {
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) Promote(total[i][j], acc[i][j]);
    }
    // The other buffer was last read before the barrier that ended the previous slice.
    if (t + 1 < slices) {
      GRAFT_PUT(cur ^ 1)
    }
    __syncthreads();
  }
#undef GRAFT_FETCH
#undef GRAFT_PUT
  // Epilogue: each warp stages one fragment at a time in its own corner of the (now free)
  // shared memory, then writes it rounded, inside the bounds.
  float* stage = reinterpret_cast<float*>(raw) + warp * 16 * 20;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      wmma::store_matrix_sync(stage, kQuant ? total[i][j] : acc[i][j], 20, wmma::mem_row_major);
      __syncwarp();
      for (int e = lane; e < 256; e += 32) {
        const int r = e / 16, c = e % 16;
        const int64_t gr = row0 + wm * 64 + i * 16 + r, gc = col0 + wn * 32 + j * 16 + c;
        if (gr < m && gc < n) y[gr * ldy + gc] = RoundAct(stage[r * 20 + c], round_bf16);
      }
      __syncwarp();
    }
  }
}

// The W4A16 WMMA decode form (m <= 64, int4 or NVFP4 weights with N % 16 == 0 and K % 16 == 0; dense
// bf16 weights take gemm_decode.h): each warp owns 16 outputs and walks all of K, kSkAhead
// 16-wide chunks ahead of the tensor cores, each applied to every 16-row group of x; the x rows
// (padded to a multiple of 16 with zeros) are staged as bf16 through shared memory kSK columns at
// a time. Every output gains its products as the same ascending sequence of 16-wide K chunks
// through the same WMMA instruction as the other kernels, so its bits are theirs.
constexpr int kSkWarps = 4, kSkPad = 8, kSkAhead = 8;

// The decode forms' shared steps. SkinnyStageX: rows [0, 16 kRG) of x's columns [k0, k0 + span)
// as bf16 into xs (zeros past m), the whole block between two barriers.
template <int kRG, int kSK>
__device__ __forceinline__ void SkinnyStageX(const float* __restrict__ x, int64_t m, int64_t k, int64_t k0, int span,
                                             __nv_bfloat16 (*xs)[kSK + kSkPad]) {
  __syncthreads();
  for (int e = threadIdx.x; e < 16 * kRG * span; e += 32 * kSkWarps) {
    const int r = e / span, c = e % span;
    xs[r][c] = __float2bfloat16_rn(r < m ? x[r * k + k0 + c] : 0.0f);
  }
  __syncthreads();
}

// SkinnyStore: a warp's kRG accumulators (rows 16 g.., outputs n0..n0 + 15) through its stage
// tile, rounded, rows past m dropped.
template <int kRG>
__device__ __forceinline__ void SkinnyStore(wmma::fragment<wmma::accumulator, 16, 16, 16, float> (&acc)[kRG],
                                            float (*stage)[20], int64_t m, int64_t n0, float* __restrict__ y,
                                            int64_t ldy, bool round_bf16) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int g = 0; g < kRG; ++g) {
    wmma::store_matrix_sync(&stage[0][0], acc[g], 20, wmma::mem_row_major);
    __syncwarp();
    for (int e = lane; e < 256; e += 32) {
      const int r = 16 * g + e / 16, c = e % 16;
      if (r < m) y[r * ldy + n0 + c] = RoundAct(stage[e / 16][c], round_bf16);
    }
    __syncwarp();
  }
}

// Each warp dequantizes its next kSkAhead 16 x 16 weight tiles to bf16 (eight weights per lane and load,
// QuantBf16x8) into its own shared-memory tiles and loads the fragments from there — the same
// bf16 values, the same chunk order, the same bits as the dense kernels on them.
template <int kRG, int kSK>  // kRG groups of 16 rows (m <= 16 kRG), x staged kSK columns at a time
__global__ void __launch_bounds__(32 * kSkWarps) GemmW4a16SkinnyKernel(const float* __restrict__ x, int64_t m,
                                                                        DevWeight dw, float* __restrict__ y, int64_t ldy,
                                                                        bool round_bf16) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  __shared__ __align__(32) __nv_bfloat16 xs[16 * kRG][kSK + kSkPad];
  __shared__ __align__(32) __nv_bfloat16 bt[kSkWarps][kSkAhead][16][16 + 8];
  __shared__ __align__(32) float stage[kSkWarps][16][20];
  const int64_t n = dw.rows, k = dw.cols;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t n0 = (int64_t{blockIdx.x} * kSkWarps + warp) * 16;
  const bool active = n0 < n;
  Acc acc[kRG], total[kRG];  // the running slice and the sum of the slices before it
#pragma unroll
  for (int g = 0; g < kRG; ++g) wmma::fill_fragment(acc[g], 0.0f), wmma::fill_fragment(total[g], -0.0f);
  for (int64_t k0 = 0; k0 < k; k0 += kSK) {
    const int span = static_cast<int>(min(static_cast<int64_t>(kSK), k - k0));  // a multiple of 16
    SkinnyStageX<kRG, kSK>(x, m, k, k0, span, xs);
    if (!active) continue;
    for (int kk = 0; kk < span; kk += 16 * kSkAhead) {
      const int chunks = min(kSkAhead, (span - kk) / 16);
      __syncwarp();
      for (int e = lane; e < chunks * 32; e += 32) {  // per chunk: 16 rows x 2 groups of 8
        const int i = e / 32, r = (e % 32) / 2, c8 = (e % 2) * 8;
        *reinterpret_cast<uint4*>(&bt[warp][i][r][c8]) = QuantBf16x8(dw, n0 + r, k0 + kk + 16 * i + c8);
      }
      __syncwarp();
      for (int i = 0; i < chunks; ++i) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b;
        wmma::load_matrix_sync(b, &bt[warp][i][0][0], 16 + 8);
#pragma unroll
        for (int g = 0; g < kRG; ++g) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
          wmma::load_matrix_sync(a, &xs[16 * g][kk + 16 * i], kSK + kSkPad);
          wmma::mma_sync(acc[g], a, b, acc[g]);
        }
        if (SliceEnds(k0 + kk + 16 * (i + 1), k)) {
#pragma unroll
          for (int g = 0; g < kRG; ++g) Promote(total[g], acc[g]);
        }
      }
    }
  }
  if (active) SkinnyStore<kRG>(total, stage[warp], m, n0, y, ldy, round_bf16);
}

// One output per thread, summed in the CPU reference's order: 16 partial sums over i mod 16,
// then a fixed pairwise tree.
__global__ void GemmSimtKernel(const float* __restrict__ x, int64_t m, DevWeight w, float* __restrict__ y, int64_t ldy,
                               bool round_bf16) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  const int64_t n = w.rows, k = w.cols;
  for (int64_t o = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; o < m * n; o += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = o / n, j = o % n;
    y[r * ldy + j] = RoundAct(DotWeight16(x + r * k, w, j * k, k), round_bf16);
  }
}

// The same sums as GemmSimtKernel, tiled for batches: a block computes 32 rows x 32 outputs
// with x and W staged 16 columns at a time through shared memory; each thread owns 2 rows x 2
// outputs and keeps, for each, the 16 partial sums of the CPU order (lane l gains the products
// at i ≡ l mod 16, the tail into lanes 0..), then the same pairwise tree — so every output is
// bit for bit GemmSimtKernel's (and the CPU reference's), only the loads are shared.

__global__ void __launch_bounds__(256) GemmSimtTiledKernel(const float* __restrict__ x, int64_t m, DevWeight w,
                                                           float* __restrict__ y, int64_t ldy, bool round_bf16) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  __shared__ float xs[kSM][kSK + 1];
  __shared__ float ws[kSN][kSK + 1];
  const int64_t n = w.rows, k = w.cols;
  const int64_t row0 = int64_t{blockIdx.y} * kSM, col0 = int64_t{blockIdx.x} * kSN;
  const int tr = threadIdx.x / 16, tc = threadIdx.x % 16;  // rows tr, tr + 16; outputs tc, tc + 16
  float acc[2][2][16];
#pragma unroll
  for (int a = 0; a < 2; ++a)
#pragma unroll
    for (int b = 0; b < 2; ++b)
#pragma unroll
      for (int l = 0; l < 16; ++l) acc[a][b][l] = 0.0f;
  for (int64_t k0 = 0; k0 < k; k0 += kSK) {
    StageSlice(xs, ws, row0, col0, k0, m, n, k, [&](int64_t r, int64_t c) { return x[r * k + c]; },
               [&](int64_t j, int64_t c) { return WeightAt(w, j * k + c); });
    __syncthreads();
    // The tail adds only real terms.
    AccumulateSlice(acc, xs, ws, tr, tc, static_cast<int>(min(static_cast<int64_t>(kSK), k - k0)));
    __syncthreads();
  }
#pragma unroll
  for (int a = 0; a < 2; ++a) {
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      const float sum = Tree16(acc[a][b]);
      const int64_t gr = row0 + tr + 16 * a, gc = col0 + tc + 16 * b;
      if (gr < m && gc < n) y[gr * ldy + gc] = RoundAct(sum, round_bf16);
    }
  }
}

// The large tile's shared memory is over the 48 KB static limit: allowed once per kernel.
Status LargeTileReady() {
  static const cudaError_t err = [] {
    cudaError_t e = cudaFuncSetAttribute(GemmBf16LargeKernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(sizeof(LargeTileSmem)));
    if (e == cudaSuccess) {
      e = cudaFuncSetAttribute(GemmBf16LargeKernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(sizeof(LargeTileSmem)));
    }
    return e;
  }();
  if (err != cudaSuccess) return Internal(std::string("cuda MatMul: large-tile shared memory: ") + cudaGetErrorString(err));
  return Status::Ok();
}

static_assert(kDecodeFormRows >= 1 && kDecodeFormRows <= kDecodeMaxRows, "the decode form takes at most kDecodeMaxRows");

// Whether MatMul takes the prefill form (gemm_pipe.h) or the decode form (gemm_decode.h), both
// on a bf16 copy of x.
bool PipeForm(int64_t m, const DevWeight& w, bool bf16) {
  return bf16 && w.bf16 && !w.quantized() && m > kDecodeFormRows && w.cols % 8 == 0 && reinterpret_cast<uintptr_t>(w.data) % 16 == 0;
}
bool DecodeForm(int64_t m, const DevWeight& w, bool bf16) {
  return bf16 && w.bf16 && !w.quantized() && m >= 1 && m <= kDecodeFormRows && w.rows % 8 == 0 && w.cols % 16 == 0 &&
         reinterpret_cast<uintptr_t>(w.data) % 16 == 0;
}

// Dense bf16 weights with few outputs and a long K (Qwen3.5's GDN b / a gates kept bf16 beside
// an FP8 or 4-bit in_proj: 96 rows x 5120) run MatMulSplitK's slices and SumSplits at every row
// count: one chain over all of K kept batch 1 on 12 warps, 14 us a layer (H200, 27B). Both
// mma.sync forms take such a weight whatever m is, so its bits still depend on K alone.
constexpr int64_t kFewOutputs = 256;
bool SplitFewOutputs(const DevWeight& w, bool bf16) {
  return DecodeForm(1, w, bf16) && PipeForm(kDecodeFormRows + 1, w, bf16) && w.rows <= kFewOutputs &&
         w.cols > SplitKColumns(w.cols);
}
int64_t Bf16CopyBytes(int64_t m, const DevWeight& w) { return (m * w.cols * 2 + 15) / 16 * 16; }

}  // namespace

bool Bf16FormsFit(int64_t m, const DevWeight& w, int64_t x_cols) {
  return (PipeForm(m, w, true) || DecodeForm(m, w, true)) &&
         (x_cols == w.cols || (x_cols > 0 && x_cols % kRepeatAlign == 0 && w.cols % x_cols == 0));
}

Status MatMulBf16(const uint16_t* xb, int64_t x_cols, int64_t m, const DevWeight& w, float* y, int64_t ldy,
                  bool round_output, bool split_k, void* stream) {
  if (m == 0) return Status::Ok();
  if (!Bf16FormsFit(m, w, x_cols)) return InvalidArgument("cuda MatMulBf16: the mma.sync forms do not take this shape");
  const auto* wd = static_cast<const uint16_t*>(w.data);
  const int64_t kz = split_k ? SplitKColumns(w.cols) : 0;
  return m > kDecodeFormRows ? GemmPipe(xb, m, wd, w.rows, w.cols, y, ldy, round_output, stream, kz, x_cols)
                            : GemmDecode(xb, m, wd, w.rows, w.cols, y, ldy, round_output, stream, kz, x_cols);
}

namespace {
// y[r][c] (rows ldy apart) = Σ_s partial[s][r][c] (partial [splits, m, cols]) in ascending s,
// rounded once: SumSplits, and the W4A16 prefill's column chunks.
__global__ void SumSplitsKernel(const float* __restrict__ partial, int64_t splits, int64_t m, int64_t cols,
                                float* __restrict__ y, int64_t ldy, bool round_bf16) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  const int64_t count = m * cols;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < count; e += int64_t{gridDim.x} * blockDim.x) {
    y[(e / cols) * ldy + e % cols] = RoundAct(SumOfSlices(partial, splits, count, e), round_bf16);
  }
}

// SumSplitsKernel's sums rounded to bf16 and stored as bf16 words (a LoRA t for the bf16 B
// product), output (r, c) of block b (starts[b] <= c < starts[b + 1]) at y + m starts[b] +
// r (starts[b + 1] - starts[b]) + c - starts[b]: one block is y [m, cols] itself.
struct SumBlocks {
  int64_t starts[kMaxSumBlocks + 1];
  int64_t rows, row0;  // BlockRows, resolved
  int count;
};
__global__ void SumSplitsBf16BlocksKernel(const float* __restrict__ partial, int64_t splits, int64_t m, int64_t cols,
                                          SumBlocks blocks, __nv_bfloat16* __restrict__ y) {
  PdlBegin();
  const int64_t count = m * cols;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < count; e += int64_t{gridDim.x} * blockDim.x) {
    const float sum = SumOfSlices(partial, splits, count, e);
    const int64_t r = e / cols, c = e % cols;
    int b = 0;
    while (b + 1 < blocks.count && c >= blocks.starts[b + 1]) ++b;
    const int64_t lo = blocks.starts[b], width = blocks.starts[b + 1] - lo;
    y[blocks.rows * lo + (blocks.row0 + r) * width + (c - lo)] = __float2bfloat16_rn(sum);
  }
}

// SumSplitsBf16Groups: each sum's elements in 256-element blocks, sum i's blocks from first[i].
struct SplitSums {
  SplitSum sum[kMaxSplitSums];
  int32_t first[kMaxSplitSums + 1];
  int count;
};
__global__ void SumSplitsBf16GroupsKernel(SplitSums g) {
  PdlBegin();
  int i = 0;
  while (i + 1 < g.count && static_cast<int32_t>(blockIdx.x) >= g.first[i + 1]) ++i;
  const SplitSum& s = g.sum[i];
  const int64_t count = s.m * s.cols, e = int64_t{static_cast<int32_t>(blockIdx.x) - g.first[i]} * blockDim.x + threadIdx.x;
  if (e >= count) return;
  reinterpret_cast<__nv_bfloat16*>(s.y)[e] = __float2bfloat16_rn(SumOfSlices(s.partial, s.splits, count, e));
}

// W4A16's chunked form: past the 4-bit decode form's 16 rows for weights gemm_wgmma_w4.h does not
// take (zero points, groups under 32 columns, no lane order), and for every 4-bit weight from
// kW4DequantRows rows. The weight dequantized to bf16 `chunk` output rows at a time into scratch
// (after x's bf16 copy), each chunk's product with MatMulSplitK's slices summed inside the wgmma
// kernel in ascending order (GemmWgmmaSplitKSumF32; K <= 1024: one slice, the plain product) —
// SumSplits over MatMulSplitK on the dequantized weight, the W4A16 contract itself, each weight
// dequantized once (the WMMA forms dequantize it again for every 16 outputs of each 16 or 128
// rows of x: 1.3% of the copy bandwidth at 64 rows). The chunk's copy stays under
// kW4PrefillBudget bytes.
constexpr int64_t kW4DecodeMaxRows = 16;
constexpr int64_t kW4DequantRows = 2048;
constexpr int64_t kW4PrefillBudget = int64_t{96} << 20;
struct W4Prefill {
  int64_t chunk = 0, splits = 0, xb_bytes = 0, w_bytes = 0, bytes = 0;  // bytes: the scratch in all
};
W4Prefill W4PrefillPlan(int64_t m, const DevWeight& w) {
  W4Prefill p;
  if (!w.w4a16() || m <= kW4DecodeMaxRows || w.cols % 16 != 0 || w.rows % 8 != 0 ||
      reinterpret_cast<uintptr_t>(w.data) % 16 != 0 ||
      (w.format == DevFormat::kInt4 && w.group % 8 != 0)) {
    return p;
  }
  const int64_t kz = SplitKColumns(w.cols);
  p.splits = (w.cols + kz - 1) / kz;
  // A chunk row: its bf16 weights (the slices are summed inside the product: no partials).
  p.chunk = std::min<int64_t>(w.rows, std::max<int64_t>(128, kW4PrefillBudget / (w.cols * 2) / 128 * 128));
  p.xb_bytes = (m * w.cols * 2 + 255) / 256 * 256;
  p.w_bytes = (p.chunk * w.cols * 2 + 255) / 256 * 256;
  p.bytes = p.xb_bytes + p.w_bytes;
  return p;
}

// out [rows, K] bf16 = W's rows [r0, r0 + rows) dequantized (QuantBf16x8: QuantAt's values), 8
// columns a thread.
__global__ void DequantRowsKernel(DevWeight w, int64_t r0, int64_t rows, uint4* __restrict__ out) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  const int64_t per_row = w.cols / 8, count = rows * per_row;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < count; e += int64_t{gridDim.x} * blockDim.x) {
    out[e] = QuantBf16x8(w, r0 + e / per_row, (e % per_row) * 8);
  }
}

unsigned GridFor(int64_t count) {
  const int64_t blocks = (count + 255) / 256;
  return static_cast<unsigned>(blocks < 8192 ? (blocks > 0 ? blocks : 1) : 8192);
}

Status W4PrefillMatMul(const uint16_t* xb, int64_t m, const DevWeight& w, const W4Prefill& p, float* y, int64_t ldy,
                       bool round_output, cudaStream_t s, unsigned char* scratch) {
  auto* wb = reinterpret_cast<uint16_t*>(scratch + p.xb_bytes);
  for (int64_t n0 = 0; n0 < w.rows; n0 += p.chunk) {
    const int64_t nc = std::min(p.chunk, w.rows - n0);
    LaunchPdl(DequantRowsKernel, GridFor(nc * w.cols / 8), 256, 0, s, w, n0, nc, reinterpret_cast<uint4*>(wb));
    DevWeight dense;
    dense.data = wb;
    dense.rows = nc;
    dense.cols = w.cols;
    dense.bf16 = true;
    if (p.splits == 1) {  // one slice: the plain matmul, rounded as it lands
      GRAFT_RETURN_IF_ERROR(MatMulBf16(xb, w.cols, m, dense, y + n0, ldy, round_output, /*split_k=*/false, s));
      continue;
    }
    // The slices (MatMulSplitK's) summed in the product as SumSplits adds them, into y's columns.
    GRAFT_RETURN_IF_ERROR(GemmWgmmaSplitKSumF32(xb, m, wb, nc, w.cols, SplitKColumns(w.cols), y + n0, ldy,
                                                round_output, s));
  }
  return Launched("MatMul (W4A16 prefill)");
}
}  // namespace

const char* MatMulFormName(MatMulForm f) {
  switch (f) {
    case MatMulForm::kW4Decode: return "4-bit decode";
    case MatMulForm::kBf16Decode: return "bf16 decode";
    case MatMulForm::kBf16DecodeSplit: return "bf16 decode, split K";
    case MatMulForm::kBf16Prefill: return "bf16 prefill (wgmma)";
    case MatMulForm::kBf16PrefillSplit: return "bf16 prefill, split K";
    case MatMulForm::kW4PrefillWgmma: return "4-bit prefill (wgmma, dequantized in registers)";
    case MatMulForm::kW4Prefill: return "4-bit prefill (dequantized chunks)";
    case MatMulForm::kW4Skinny: return "4-bit skinny";
    case MatMulForm::kTile128: return "FALLBACK bf16 128x128 tiles";
    case MatMulForm::kTile64: return "FALLBACK bf16 64x64 tiles";
    case MatMulForm::kSimtTiled: return "fp32 SIMT tiles";
    case MatMulForm::kSimt: return "fp32 SIMT";
    case MatMulForm::kNone: return "none (FP8: MatMulFp8)";
  }
  return "?";
}

MatMulForm ChooseMatMulForm(int64_t m, const DevWeight& w, bool bf16, bool x_aligned16) {
  if (w.fp8()) return MatMulForm::kNone;
  if (bf16 && DecodeW4a16Fits(m, w) && x_aligned16) return MatMulForm::kW4Decode;
  if (PipeForm(m, w, bf16) || DecodeForm(m, w, bf16)) {
    const bool split = SplitFewOutputs(w, bf16);
    if (m > kDecodeFormRows) return split ? MatMulForm::kBf16PrefillSplit : MatMulForm::kBf16Prefill;
    return split ? MatMulForm::kBf16DecodeSplit : MatMulForm::kBf16Decode;
  }
  // From kW4DequantRows rows a weight's bf16 copy, a chunk at a time, pays for itself: the
  // summed-slices wgmma product then runs at the bf16 GEMM's pace, where dequantizing in the
  // registers of every tile holds the 4-bit form to ~65% of it (bench/results/quantized.md
  // § fp8-prefill). Either form gives the W4A16 contract's bits.
  const bool chunked = bf16 && W4PrefillPlan(m, w).chunk > 0;
  if (chunked && m >= kW4DequantRows) return MatMulForm::kW4Prefill;
  if (bf16 && m > kW4DecodeMaxRows && W4LanesFit(w)) return MatMulForm::kW4PrefillWgmma;
  if (chunked) return MatMulForm::kW4Prefill;
  const bool tensor = bf16 && (w.bf16 || w.w4a16());
  if (tensor && w.w4a16() && m <= 64 && w.rows % 16 == 0 && w.cols % 16 == 0 &&
      (w.format != DevFormat::kInt4 || w.group % 8 == 0)) {
    return MatMulForm::kW4Skinny;
  }
  const bool aligned = w.cols % 8 == 0 && x_aligned16 && reinterpret_cast<uintptr_t>(w.data) % 16 == 0 &&
                       (w.format != DevFormat::kInt4 || w.group % 8 == 0);
  if (tensor && m > kBM && aligned) return MatMulForm::kTile128;
  if (tensor) return MatMulForm::kTile64;
  return m > 8 ? MatMulForm::kSimtTiled : MatMulForm::kSimt;
}

int64_t MatMulScratchBytes(int64_t m, const DevWeight& w, bool bf16) {
  switch (ChooseMatMulForm(m, w, bf16, /*x_aligned16=*/true)) {  // room for the aligned case's forms
    case MatMulForm::kW4Prefill: return W4PrefillPlan(m, w).bytes;
    case MatMulForm::kW4Decode: return DecodeW4a16ScratchBytes(m, w);
    case MatMulForm::kW4PrefillWgmma: return Bf16CopyBytes(m, w);
    case MatMulForm::kBf16DecodeSplit:
    case MatMulForm::kBf16PrefillSplit:  // x in bf16, then the slices' partial products
      return Bf16CopyBytes(m, w) + (w.cols + SplitKColumns(w.cols) - 1) / SplitKColumns(w.cols) * m * w.rows * 4;
    case MatMulForm::kBf16Decode:
    case MatMulForm::kBf16Prefill: return Bf16CopyBytes(m, w);
    default: return 0;
  }
}

const uint16_t* MatMulBf16Copy(int64_t m, const DevWeight& w, bool bf16, bool x_aligned16, const void* scratch) {
  switch (ChooseMatMulForm(m, w, bf16, x_aligned16)) {
    case MatMulForm::kBf16Decode:
    case MatMulForm::kBf16Prefill:
    case MatMulForm::kBf16DecodeSplit:
    case MatMulForm::kBf16PrefillSplit:
    case MatMulForm::kW4PrefillWgmma:
    case MatMulForm::kW4Prefill: return static_cast<const uint16_t*>(scratch);  // Bf16CopyOf's
    default: return nullptr;
  }
}

namespace {
// The way into the kernels that read bf16 activations (the mma.sync forms, the W4A16 decode
// form): x's twin where the caller has one (16-byte aligned), else x [m, K] copied to bf16 into
// the caller's scratch (`who` names the caller in the error when there is none).
Result<const uint16_t*> Bf16CopyOf(const char* who, const float* x, int64_t m, const DevWeight& w, void* stream,
                                   void* scratch, const uint16_t* twin = nullptr) {
  if (const uint16_t* usable = UsableTwin(twin)) return usable;
  if (scratch == nullptr || reinterpret_cast<uintptr_t>(scratch) % 16 != 0) {
    return InvalidArgument(std::string(who) + ": bf16 products need MatMulScratchBytes of aligned scratch");
  }
  auto* xb = static_cast<uint16_t*>(scratch);
  if (Status st = ToBf16(x, m * w.cols, xb, stream); !st.ok()) return st;
  return static_cast<const uint16_t*>(xb);
}
}  // namespace

Status MatMul(const float* x, int64_t m, const DevWeight& w, float* y, int64_t ldy, bool round_output, bool bf16,
              void* stream, void* scratch, const uint16_t* xb_twin) {
  if (m < 0 || w.rows <= 0 || w.cols <= 0 || ldy < w.rows) return InvalidArgument("cuda MatMul: bad shape");
  if (w.fp8()) return InvalidArgument("cuda MatMul: FP8 weights run MatMulFp8");
  if (m == 0) return Status::Ok();
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const auto* wb = static_cast<const __nv_bfloat16*>(w.data);
  const MatMulForm form = ChooseMatMulForm(m, w, bf16, reinterpret_cast<uintptr_t>(x) % 16 == 0);
  switch (form) {
    case MatMulForm::kW4Decode:  // dequantized in registers, x read in fp32 (gemm_decode_w4.h)
      return GemmDecodeW4a16(x, m, w, y, ldy, round_output, stream, scratch);
    case MatMulForm::kBf16Decode:
    case MatMulForm::kBf16Prefill:
    case MatMulForm::kBf16DecodeSplit:
    case MatMulForm::kBf16PrefillSplit: {
      GRAFT_ASSIGN_OR_RETURN(const uint16_t* xb, Bf16CopyOf("cuda MatMul", x, m, w, stream, scratch, xb_twin));
      if (form == MatMulForm::kBf16DecodeSplit || form == MatMulForm::kBf16PrefillSplit) {
        auto* partial = reinterpret_cast<float*>(static_cast<unsigned char*>(scratch) + Bf16CopyBytes(m, w));
        GRAFT_RETURN_IF_ERROR(MatMulBf16(xb, w.cols, m, w, partial, w.rows, false, /*split_k=*/true, stream));
        return SumSplitsInto(partial, m, w, y, ldy, round_output, stream);
      }
      return MatMulBf16(xb, w.cols, m, w, y, ldy, round_output, /*split_k=*/false, stream);
    }
    case MatMulForm::kW4PrefillWgmma: {
      GRAFT_ASSIGN_OR_RETURN(const uint16_t* xb, Bf16CopyOf("cuda MatMul", x, m, w, stream, scratch, xb_twin));
      return GemmWgmmaW4(xb, m, w, y, ldy, round_output, stream);
    }
    case MatMulForm::kW4Prefill: {
      GRAFT_ASSIGN_OR_RETURN(const uint16_t* xb, Bf16CopyOf("cuda MatMul", x, m, w, stream, scratch, xb_twin));
      return W4PrefillMatMul(xb, m, w, W4PrefillPlan(m, w), y, ldy, round_output, s, static_cast<unsigned char*>(scratch));
    }
    case MatMulForm::kW4Skinny: {
      const unsigned blocks = static_cast<unsigned>((w.rows / 16 + kSkWarps - 1) / kSkWarps);
      if (m <= 16)
        LaunchPdl(GemmW4a16SkinnyKernel<1, 512>, blocks, 32 * kSkWarps, 0, s, x, m, w, y, ldy, round_output);
      else if (m <= 32)
        LaunchPdl(GemmW4a16SkinnyKernel<2, 256>, blocks, 32 * kSkWarps, 0, s, x, m, w, y, ldy, round_output);
      else
        LaunchPdl(GemmW4a16SkinnyKernel<4, 128>, blocks, 32 * kSkWarps, 0, s, x, m, w, y, ldy, round_output);
      break;
    }
    case MatMulForm::kTile128: {
      if (Status ready = LargeTileReady(); !ready.ok()) return ready;
      const int64_t gy = (m + kLM - 1) / kLM;
      if (gy > 65535) return InvalidArgument("cuda MatMul: more than 65535 * 128 rows in one call");
      const dim3 grid(static_cast<unsigned>((w.rows + kLN - 1) / kLN), static_cast<unsigned>(gy));
      const int64_t kz = (w.cols + kLK - 1) / kLK * kLK;  // one split: all of K
      if (w.quantized())
        LaunchPdl(GemmBf16LargeKernel<true>, grid, kLThreads, sizeof(LargeTileSmem), s, x, m, wb, w, w.rows, w.cols, y,
                  ldy, round_output, kz, 0);
      else
        LaunchPdl(GemmBf16LargeKernel<false>, grid, kLThreads, sizeof(LargeTileSmem), s, x, m, wb, w, w.rows, w.cols, y,
                  ldy, round_output, kz, 0);
      break;
    }
    case MatMulForm::kTile64: {
      const int64_t gy = (m + kBM - 1) / kBM;
      if (gy > 65535) return InvalidArgument("cuda MatMul: more than 65535 * 64 rows in one call");
      const dim3 grid(static_cast<unsigned>((w.rows + kBN - 1) / kBN), static_cast<unsigned>(gy));
      const bool vec8 = w.cols % 8 == 0 && (w.format != DevFormat::kInt4 || w.group % 8 == 0);
      const int64_t kz = (w.cols + kBK - 1) / kBK * kBK;  // one split: all of K
      if (w.quantized())
        LaunchPdl(GemmBf16Kernel<true>, grid, kThreads, 0, s, x, m, wb, w, w.rows, w.cols, y, ldy, round_output, vec8,
                  kz, 0);
      else
        LaunchPdl(GemmBf16Kernel<false>, grid, kThreads, 0, s, x, m, wb, w, w.rows, w.cols, y, ldy, round_output, false,
                  kz, 0);
      break;
    }
    case MatMulForm::kSimtTiled: {
      const int64_t gy = (m + kSM - 1) / kSM;
      if (gy > 65535) return InvalidArgument("cuda MatMul: more than 65535 * 32 rows in one call (SIMT)");
      const dim3 grid(static_cast<unsigned>((w.rows + kSN - 1) / kSN), static_cast<unsigned>(gy));
      LaunchPdl(GemmSimtTiledKernel, grid, 256, 0, s, x, m, w, y, ldy, round_output && bf16);
      break;
    }
    case MatMulForm::kSimt: {
      const int64_t total = m * w.rows;
      const int64_t blocks = (total + 255) / 256;
      LaunchPdl(GemmSimtKernel, static_cast<unsigned>(blocks < 1048576 ? blocks : 1048576), 256, 0, s, x, m, w, y,
                ldy, round_output && bf16);
      break;
    }
    case MatMulForm::kNone: return InvalidArgument("cuda MatMul: FP8 weights run MatMulFp8");
  }
  return Launched("MatMul");
}

int64_t SplitKColumns(int64_t k) { return k <= kSplitColumns ? (k + kBK - 1) / kBK * kBK : kSplitColumns; }

int64_t MatMulSplitKScratchBytes(int64_t m, const DevWeight& w) {
  return PipeForm(m, w, true) || DecodeForm(m, w, true) ? Bf16CopyBytes(m, w) : 0;
}

Status MatMulSplitK(const float* x, int64_t m, const DevWeight& w, float* partial, void* stream, void* scratch) {
  if (m < 0 || w.rows <= 0 || w.cols <= 0 || !w.bf16 || w.format != DevFormat::kDense) {
    return InvalidArgument("cuda MatMulSplitK: needs a dense bf16 weight");
  }
  if (m == 0) return Status::Ok();
  const int64_t kz = SplitKColumns(w.cols), splits = (w.cols + kz - 1) / kz;
  if (PipeForm(m, w, true) || DecodeForm(m, w, true)) {  // the same slices through the mma.sync forms
    GRAFT_ASSIGN_OR_RETURN(const uint16_t* xb, Bf16CopyOf("cuda MatMulSplitK", x, m, w, stream, scratch));
    return MatMulBf16(xb, w.cols, m, w, partial, w.rows, false, /*split_k=*/true, stream);
  }
  const auto* wb = static_cast<const __nv_bfloat16*>(w.data);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  // Both tiles run each slice's 16-wide chunks in the same order from zero: the same partials.
  const bool large = m > kBM && w.cols % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                     reinterpret_cast<uintptr_t>(w.data) % 16 == 0;
  const int64_t gy = (m + (large ? kLM : kBM) - 1) / (large ? kLM : kBM);
  if (gy > 65535 || splits > 65535) return InvalidArgument("cuda MatMulSplitK: too many rows or splits");
  if (large) {
    if (Status ready = LargeTileReady(); !ready.ok()) return ready;
    const dim3 grid(static_cast<unsigned>((w.rows + kLN - 1) / kLN), static_cast<unsigned>(gy), static_cast<unsigned>(splits));
    LaunchPdl(GemmBf16LargeKernel<false>, grid, kLThreads, sizeof(LargeTileSmem), s, x, m, wb, w, w.rows, w.cols,
              partial, w.rows, false, kz, m * w.rows);
  } else {
    const dim3 grid(static_cast<unsigned>((w.rows + kBN - 1) / kBN), static_cast<unsigned>(gy), static_cast<unsigned>(splits));
    LaunchPdl(GemmBf16Kernel<false>, grid, kThreads, 0, s, x, m, wb, w, w.rows, w.cols, partial, w.rows, false, false,
              kz, m * w.rows);
  }
  return Launched("MatMulSplitK");
}

Status SumSplits(const float* partial, int64_t m, const DevWeight& w, float* y, bool round_output, void* stream) {
  return SumSplitsInto(partial, m, w, y, w.rows, round_output, stream);
}

Status SumSplitsInto(const float* partial, int64_t m, const DevWeight& w, float* y, int64_t ldy, bool round_output,
                     void* stream) {
  const int64_t kz = SplitKColumns(w.cols), splits = (w.cols + kz - 1) / kz, count = m * w.rows;
  if (count == 0) return Status::Ok();
  const int64_t blocks = (count + 255) / 256;
  LaunchPdl(SumSplitsKernel, static_cast<unsigned>(blocks < 65535 ? blocks : 65535), 256, 0,
            static_cast<cudaStream_t>(stream), partial, splits, m, w.rows, y, ldy, round_output);
  return Launched("SumSplits");
}

static_assert(kMaxSumBlocks <= kWgmmaMaxSumBlocks, "the summed split form takes every stack SumSplitsBf16Blocks does");

bool SplitKSumFits(int64_t m, const DevWeight& w, int64_t x_cols, const void* xb) {
  // Its tiles run all of K each: with fewer than a quarter of the multiprocessors' worth (16 tiles:
  // a 1K-row product of rank 256) the split form's slice-tiles are faster despite the partials; from
  // 64 tiles on it is 1.4-2.3x faster (H100, K 5,120 to 17,408, 1K and 4K rows).
  const int64_t tiles = (m + 127) / 128 * ((w.rows + 127) / 128);
  return m > kDecodeFormRows && w.bf16 && x_cols == w.cols && GemmWgmmaFits(m, w.rows, w.cols, xb, w.data) &&
         4 * tiles >= WgmmaMultiprocessors();
}

Status MatMulSplitKSumBf16(const uint16_t* xb, int64_t m, const DevWeight& w, const int64_t* starts, int blocks,
                           uint16_t* y, void* stream, BlockRows place) {
  if (!SplitKSumFits(m, w, w.cols, xb)) return InvalidArgument("cuda MatMulSplitKSumBf16: the summed split form does not take this shape");
  return GemmWgmmaSplitKSum(xb, m, static_cast<const uint16_t*>(w.data), w.rows, w.cols, SplitKColumns(w.cols), starts,
                            blocks, y, stream, place);
}

Status SumSplitsBf16(const float* partial, int64_t m, const DevWeight& w, uint16_t* y, void* stream) {
  const int64_t whole[2] = {0, w.rows};
  return SumSplitsBf16Blocks(partial, m, w, whole, 1, y, stream);
}

Status SumSplitsBf16Blocks(const float* partial, int64_t m, const DevWeight& w, const int64_t* starts, int blocks,
                           uint16_t* y, void* stream, BlockRows place) {
  if (blocks < 1 || blocks > kMaxSumBlocks || starts[0] != 0 || starts[blocks] != w.rows) {
    return InvalidArgument("cuda SumSplitsBf16Blocks: 1 to " + std::to_string(kMaxSumBlocks) +
                           " blocks from row 0 to the weight's last");
  }
  SumBlocks b{};
  b.count = blocks;
  b.rows = place.rows > 0 ? place.rows : m;
  b.row0 = place.row0;
  if (b.row0 < 0 || b.row0 + m > b.rows) {
    return InvalidArgument("cuda SumSplitsBf16Blocks: rows [" + std::to_string(b.row0) + ", " +
                           std::to_string(b.row0 + m) + ") are not inside arrays of " + std::to_string(b.rows));
  }
  for (int i = 0; i <= blocks; ++i) {
    if (i > 0 && starts[i] <= starts[i - 1]) return InvalidArgument("cuda SumSplitsBf16Blocks: blocks out of order or empty");
    b.starts[i] = starts[i];
  }
  const int64_t kz = SplitKColumns(w.cols), splits = (w.cols + kz - 1) / kz, count = m * w.rows;
  if (count == 0) return Status::Ok();
  const int64_t grid = (count + 255) / 256;
  LaunchPdl(SumSplitsBf16BlocksKernel, static_cast<unsigned>(grid < 65535 ? grid : 65535), 256, 0,
            static_cast<cudaStream_t>(stream), partial, splits, m, w.rows, b, reinterpret_cast<__nv_bfloat16*>(y));
  return Launched("SumSplitsBf16Blocks");
}

Status SumSplitsBf16Groups(const SplitSum* sums, int count, void* stream) {
  if (count < 0 || count > kMaxSplitSums) {
    return InvalidArgument("cuda SumSplitsBf16Groups: 0.." + std::to_string(kMaxSplitSums) + " sums a launch");
  }
  SplitSums g{};
  g.count = count;
  int64_t at = 0;
  for (int i = 0; i < count; ++i) {
    const SplitSum& s = sums[i];
    if (s.partial == nullptr || s.y == nullptr || s.splits < 1 || s.m < 0 || s.cols < 0) {
      return InvalidArgument("cuda SumSplitsBf16Groups: sum " + std::to_string(i) + " has no partials, output or slices");
    }
    g.sum[i] = s;
    g.first[i] = static_cast<int32_t>(at);
    at += (s.m * s.cols + 255) / 256;
    if (at > 0x7fffffff) return InvalidArgument("cuda SumSplitsBf16Groups: too many elements for one launch");
  }
  g.first[count] = static_cast<int32_t>(at);
  if (at == 0) return Status::Ok();
  LaunchPdl(SumSplitsBf16GroupsKernel, static_cast<unsigned>(at), 256, 0, static_cast<cudaStream_t>(stream), g);
  return Launched("SumSplitsBf16Groups");
}

}  // namespace graft::cuda

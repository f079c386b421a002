// The arithmetic of the Gated DeltaNet's tensor-core form (gdn.h: GdnTensorCoreForm), shared by
// its chunk kernels (gdn_tc_chunk.cu) and its token kernel (gdn_tc_tokens.cu). Every value a
// row's output depends on is made here, by one function, so that both kernels compute it from
// the same inputs with the same operations and a row's bits never depend on which kernel ran it.
//
// The products go through mma.sync m16n8k16 (bf16 in, fp32 accumulate). Each output element of
// an mma depends only on its own A row and B column, so a row computed alone (the token kernel:
// the row at the top of a tile of zeros) gets the bits it gets inside a full tile (the chunk
// kernels), as long as the same K steps are issued in the same order from the same start.
//   - q and k enter as their raw bf16 values (the conv's output; other values are rounded to
//     bf16 first): exact A / B operands. Their L2 norms become fp32 factors on the products.
//   - S (the state) and W (the chunk's corrected values, scaled) are fp32: each is split into
//     three bf16 terms, hi + mid + lo, which hold its 24 significant bits exactly, and each K
//     step issues the three products in that order into one accumulator.
//   - The triangular recurrence and the output sums stay fp32 fused multiply-adds in ascending
//     chunk row (gdn_tc_chunk.cu and gdn_tc_tokens.cu run the same chains).
#pragma once

#include <cuda_bf16.h>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/gdn.h"
#include "backend/cuda/mma_ptx.cuh"

namespace graft::cuda::gdn_tc {

constexpr int kC = kGdnChunk;  // 64 rows a chunk
constexpr int kMaxKs = kGdnTcMaxDk / 16;

// dk rounded up to whole 16-wide K steps (zeros past dk: a zero product adds nothing).
__host__ __device__ constexpr int PaddedDk(int dk) { return (dk + 15) / 16 * 16; }
// A bf16 row's stride in shared memory: 16 bytes past the padded row, so that the 8 rows an
// ldmatrix reads start in distinct bank quads.
__host__ __device__ constexpr int RowStride(int dkp) { return dkp + 8; }

__device__ __forceinline__ float Bf16Round(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// x = hi + mid + lo exactly (bf16 terms, each the rounding of what the earlier ones leave).
__device__ __forceinline__ void Split3(float x, float& hi, float& mid, float& lo) {
  hi = Bf16Round(x);
  const float r = __fsub_rn(x, hi);
  mid = Bf16Round(r);
  lo = Bf16Round(__fsub_rn(r, mid));
}
// The three bf16x2 registers of an mma B operand pair (K 2t and 2t + 1) from two fp32 values.
__device__ __forceinline__ void SplitPack3(float k0, float k1, unsigned (&p)[3]) {
  float h0, m0, l0, h1, m1, l1;
  Split3(k0, h0, m0, l0);
  Split3(k1, h1, m1, l1);
  p[0] = PackBf16(h0, h1);
  p[1] = PackBf16(m0, m1);
  p[2] = PackBf16(l0, l1);
}

// One K step of an exact-A, split-B product: hi, mid, lo in that order.
__device__ __forceinline__ void MmaSplit3(float (&d)[4], const unsigned (&a)[4], const unsigned (&b0)[3],
                                          const unsigned (&b1)[3]) {
  Mma16816(d, a, b0[0], b1[0]);
  Mma16816(d, a, b0[1], b1[1]);
  Mma16816(d, a, b0[2], b1[2]);
}

// Lane l's ldmatrix row addresses (x4), element offsets into a tile of `stride` elements a row:
// A fragments of rows [r0, r0 + 16) x K [k0, k0 + 16) from a [M][K] tile (non-transposed).
__device__ __forceinline__ int AOffset(int lane, int r0, int k0, int stride) {
  return (r0 + ((lane >> 3) & 1) * 8 + (lane & 7)) * stride + k0 + (lane >> 4) * 8;
}
// A fragments of rows [r0, r0 + 16) x K [k0, k0 + 16) from a [K][M] tile (ldmatrix .trans).
__device__ __forceinline__ int ATransOffset(int lane, int r0, int k0, int stride) {
  return (k0 + (lane >> 4) * 8 + (lane & 7)) * stride + r0 + ((lane >> 3) & 1) * 8;
}
// B fragments of outputs [n0, n0 + 16) (two n-tiles) x K [k0, k0 + 16) from a [K][N] tile
// (ldmatrix .trans): registers b0, b1 of tile n0, then b0, b1 of tile n0 + 8.
__device__ __forceinline__ int BTransOffset(int lane, int n0, int k0, int stride) {
  return (k0 + ((lane >> 3) & 1) * 8 + (lane & 7)) * stride + n0 + (lane >> 4) * 8;
}
// B fragments of outputs [n0, n0 + 16) x K [k0, k0 + 16) from a [N][K] tile (non-transposed).
__device__ __forceinline__ int BOffset(int lane, int n0, int k0, int stride) {
  return (n0 + (lane >> 4) * 8 + (lane & 7)) * stride + k0 + ((lane >> 3) & 1) * 8;
}

// 1 / ‖x‖ of a q or k row held as bf16 (in shared memory): Σ x² in WarpSum16's order, by a
// whole warp (every lane gets it).
__device__ __forceinline__ float InvNorm(const __nv_bfloat16* x, int dk, int lane) {
  const float ss = WarpSum16(dk, lane, [&](int64_t i) {
    const float v = __bfloat162float(x[i]);
    return __fmul_rn(v, v);
  });
  return 1.0f / sqrtf(__fadd_rn(ss, 1e-6f));
}
// InvNorm on a half warp: lanes [16 h, 16 h + 16) take row x (each half its own row) through the
// same terms, the same order and the same pairwise tree (shuffles within the half), so a row gets
// InvNorm's bits; every lane of the half gets its row's value. Both halves must call it.
__device__ __forceinline__ float InvNormHalf(const __nv_bfloat16* x, int dk, int lane) {
  const int l = lane & 15;
  float acc = 0.0f;
  int i = 0;
  for (; i + 16 <= dk; i += 16) {
    const float v = __bfloat162float(x[i + l]);
    acc = __fadd_rn(acc, __fmul_rn(v, v));
  }
  if (i + l < dk) {
    const float v = __bfloat162float(x[i + l]);
    acc = __fadd_rn(acc, __fmul_rn(v, v));
  }
  for (int s = 8; s > 0; s >>= 1) acc = __fadd_rn(acc, __shfl_down_sync(0xffffffffu, acc, s, 16));
  const float ss = __shfl_sync(0xffffffffu, acc, 0, 16);
  return 1.0f / sqrtf(__fadd_rn(ss, 1e-6f));
}
// q's factor: 1 / ‖q‖ times 1 / sqrt(dk).
__device__ __forceinline__ float QFactor(float inv_q, int dk) {
  return __fmul_rn(inv_q, 1.0f / sqrtf(static_cast<float>(dk)));
}

// A coefficient of the chunk: the raw dot of row i's q or k with key m, times row i's factor,
// key m's inverse norm and the decay e^{gam_i − gam_m}, in that order.
__device__ __forceinline__ float Coef(float dot, float f_i, float inv_m, float gam_i, float gam_m) {
  return __fmul_rn(__fmul_rn(__fmul_rn(dot, f_i), inv_m), expf(__fsub_rn(gam_i, gam_m)));
}
// The first terms of row i's chains: w = v − e_i (inv_i · Sᵀk_raw), o = e_i (fq_i · Sᵀq_raw).
__device__ __forceinline__ float WStart(float v, float e_i, float inv_i, float sk) {
  return __fsub_rn(v, __fmul_rn(e_i, __fmul_rn(inv_i, sk)));
}
__device__ __forceinline__ float OStart(float e_i, float fq_i, float sq) { return __fmul_rn(e_i, __fmul_rn(fq_i, sq)); }
// Row m's corrected value scaled for the state update: (inv_m · e^{gam_last − gam_m}) · Vn_m.
__device__ __forceinline__ float WUpdate(float inv_m, float d_m, float vn) { return __fmul_rn(__fmul_rn(inv_m, d_m), vn); }

}  // namespace graft::cuda::gdn_tc

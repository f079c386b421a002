// The SIMT GEMM tile shared by the fp32 matmul (matmul.cu) and FP8's W8A8 (matmul_fp8.cu): a
// block computes kSM rows x kSN outputs with x and W staged kSK columns at a time through shared
// memory; each of its 256 threads owns 2 rows x 2 outputs and keeps, per output, the 16 partial
// sums of the CPU reference's order (lane l gains the products at i ≡ l mod 16), folded by the
// CPU's pairwise tree (backend/cpu/cpu_ops.h: DotF32).
#pragma once

namespace graft::cuda {

constexpr int kSM = 32, kSN = 32, kSK = 16;

// Stages columns [k0, k0 + kSK) of the block's x rows and W rows (zeros outside [0, m) x [0, k)
// and [0, n)); x_at(r, c) and w_at(n, c) read one element each.
template <typename XAt, typename WAt>
__device__ __forceinline__ void StageSlice(float (&xs)[kSM][kSK + 1], float (&ws)[kSN][kSK + 1], int64_t row0,
                                           int64_t col0, int64_t k0, int64_t m, int64_t n, int64_t k, XAt x_at,
                                           WAt w_at) {
  for (int e = threadIdx.x; e < kSM * kSK; e += 256) {
    const int r = e / kSK, c = e % kSK;
    const int64_t gr = row0 + r, gc = k0 + c, gn = col0 + r;
    xs[r][c] = gr < m && gc < k ? x_at(gr, gc) : 0.0f;
    ws[r][c] = gn < n && gc < k ? w_at(gn, gc) : 0.0f;
  }
}

// The thread's 2 x 2 outputs gain the products of the staged slice's first `valid` columns.
__device__ __forceinline__ void AccumulateSlice(float (&acc)[2][2][16], const float (&xs)[kSM][kSK + 1],
                                                const float (&ws)[kSN][kSK + 1], int tr, int tc, int valid) {
#pragma unroll
  for (int l = 0; l < kSK; ++l) {
    if (l < valid) {
#pragma unroll
      for (int a = 0; a < 2; ++a)
#pragma unroll
        for (int b = 0; b < 2; ++b)
          acc[a][b][l] = __fadd_rn(acc[a][b][l], __fmul_rn(xs[tr + 16 * a][l], ws[tc + 16 * b][l]));
    }
  }
}

// The 16 partial sums folded as the CPU folds them: lanes l and l + 8, then + 4, + 2, + 1.
__device__ __forceinline__ float Tree16(float (&v)[16]) {
#pragma unroll
  for (int l = 0; l < 8; ++l) v[l] = __fadd_rn(v[l], v[l + 8]);
#pragma unroll
  for (int l = 0; l < 4; ++l) v[l] = __fadd_rn(v[l], v[l + 4]);
#pragma unroll
  for (int l = 0; l < 2; ++l) v[l] = __fadd_rn(v[l], v[l + 2]);
  return __fadd_rn(v[0], v[1]);
}

}  // namespace graft::cuda

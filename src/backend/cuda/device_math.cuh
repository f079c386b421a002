// Device helpers shared by the CUDA kernels: rounding to bf16 where the CPU reference rounds
// (backend/ops.h), and the fp32 activation functions with PyTorch's definitions. Every
// arithmetic step uses the explicit round-to-nearest intrinsics so that nvcc never fuses a
// multiply and an add the CPU reference keeps apart.
#pragma once

#include <cuda_bf16.h>

#include "backend/cuda/device_weight.h"
#include "backend/cuda/quant_weight.cuh"

namespace graft::cuda {

__device__ __forceinline__ float RoundAct(float v, bool bf16) {
  return bf16 ? __bfloat162float(__float2bfloat16_rn(v)) : v;
}
// A KV page value as a float: pages hold fp32 values in fp32 mode, bf16 in bf16 mode.
__device__ __forceinline__ float KvValue(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float KvValue(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ float SiluF(float u) { return __fdiv_rn(u, __fadd_rn(1.0f, expf(-u))); }
__device__ __forceinline__ float SigmoidF(float u) { return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-u))); }
__device__ __forceinline__ float SoftplusF(float u) { return u > 20.0f ? u : log1pf(expf(u)); }

// Σ_s partial[s * count + e] over a split product's slices in ascending s (`count` outputs each):
// every split sum's order (matmul.cu's sum kernels, GemmDecode's x made from slices), so each
// gives the same bits.
__device__ __forceinline__ float SumOfSlices(const float* __restrict__ partial, int64_t splits, int64_t count, int64_t e) {
  float sum = partial[e];
  for (int64_t z = 1; z < splits; ++z) sum = __fadd_rn(sum, partial[z * count + e]);
  return sum;
}
// Tile `id` of the persistent GEMMs' grouped visiting order over mtiles x ntiles tiles: groups of
// `group` row tiles, rows fastest inside a group, so that the tiles in flight share a few column
// tiles' operand through the L2 (gemm_wgmma.cu, gemm_wgmma_w4.cu). Only the speed depends on it.
__device__ __forceinline__ void GroupedTile(int id, int mtiles, int ntiles, int group, int& mt, int& nt) {
  const int per_group = group * ntiles, first = id / per_group * group;
  const int gsize = min(group, mtiles - first), in = id % per_group;
  mt = first + in % gsize;
  nt = in / gsize;
}
// SumOfSlices' order kept in registers: a slice's accumulators into the running sums of the
// slices before it (the first slice's are the sums, each later one added to them) — the split
// products summed inside a GEMM (gemm_wgmma.cu's summed form, gemm_wgmma_w4.cu).
template <int kN>
__device__ __forceinline__ void FoldSlice(float (&total)[kN], const float (&acc)[kN], bool first) {
#pragma unroll
  for (int i = 0; i < kN; ++i) total[i] = first ? acc[i] : __fadd_rn(total[i], acc[i]);
}

// The tensor-core attention kernels' softmax exponential (flash_attention.cu, flash_wgmma.cu):
// e^(x − base) as 2^(x·log2 e − base·log2 e), one fused multiply-add with base_l2 = AttnExpBase(base)
// and the hardware's ex2 (ex2.approx.ftz: ~2 ulp; results below 2^-126 flush to zero) — two
// instructions where expf takes about eight, on the path every score takes. Every bf16 attention
// kernel calls these two with the same arguments, so a row keeps the same bits whichever kernel
// runs it; against the CPU reference's std::exp the probabilities agree far inside the bf16
// rounding that P gets before P·V. x = −inf gives +0.
__device__ __forceinline__ float AttnExpBase(float base) { return __fmul_rn(base, 1.4426950408889634f); }
__device__ __forceinline__ float AttnExp(float x, float base_l2) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(__fmaf_rn(x, 1.4426950408889634f, -base_l2)));
  return y;
}
// The running output's rescale e^(old − base) when a row's max goes from `old` to `base`: 0 while
// the row has no score (old = −inf), exactly 1 where the max did not change — AttnExp(base) is
// 1 only up to the rounding of base·log2 e, and a tile past a row's last key must leave its sums
// as they are, whichever neighbour made its warp run it — else AttnExp.
__device__ __forceinline__ float AttnRescale(float old, float base, float base_l2) {
  return old == -INFINITY ? 0.0f : old == base ? 1.0f : AttnExp(old, base_l2);
}

// RoPE of one pair — x0 at column d, x1 at d + rot_dim / 2 of a head — at position pos with
// frequency inv_freq_d: Ops::Rope's arithmetic (cos and sin scaled and rounded first).
__device__ __forceinline__ void RopePair(float x0, float x1, int32_t pos, float inv_freq_d, float attn_scale, bool bf16,
                                         float& y0, float& y1) {
  const float ang = __fmul_rn(static_cast<float>(pos), inv_freq_d);
  const float c = RoundAct(__fmul_rn(cosf(ang), attn_scale), bf16);
  const float s = RoundAct(__fmul_rn(sinf(ang), attn_scale), bf16);
  y0 = RoundAct(__fadd_rn(RoundAct(__fmul_rn(x0, c), bf16), RoundAct(__fmul_rn(-x1, s), bf16)), bf16);
  y1 = RoundAct(__fadd_rn(RoundAct(__fmul_rn(x1, c), bf16), RoundAct(__fmul_rn(x0, s), bf16)), bf16);
}

// Element i of W as the matmul reads it (quantized formats: QuantAt).
__device__ __forceinline__ float WeightAt(const DevWeight& w, int64_t i) {
  if (w.format != DevFormat::kDense) return QuantAt(w, i / w.cols, i % w.cols);
  return w.bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(w.data)[i]) : static_cast<const float*>(w.data)[i];
}

// A Gated DeltaNet gate pair of value head h from the in-projection's b and a (Ops::GdnGates):
// beta = r(sigmoid(b)), g = -e^{A_log[h]} · softplus(a + dt_bias[h]). Shared by GdnGates and the
// token kernel that fuses them, so both have the same bits.
__device__ __forceinline__ float GdnBeta(float b, bool bf16) { return RoundAct(SigmoidF(b), bf16); }
__device__ __forceinline__ float GdnDecay(float a, const DevWeight& a_log, const DevWeight& dt_bias, int64_t h) {
  return __fmul_rn(-expf(WeightAt(a_log, h)), SoftplusF(__fadd_rn(a, WeightAt(dt_bias, h))));
}

// Σ term(i) over i < n in the CPU reference's order (one thread): 16 partial sums over
// i mod 16 for the whole 16-blocks, the tail into lanes 0.., then a fixed pairwise tree
// (backend/cpu/cpu_ops.h: DotF32). term(i) returns the already-rounded product.
template <typename Term>
__device__ __forceinline__ float Sum16(int64_t n, Term term) {
  float acc[16];
  for (int l = 0; l < 16; ++l) acc[l] = 0.0f;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; ++l) acc[l] = __fadd_rn(acc[l], term(i + l));
  for (int l = 0; i < n; ++i, ++l) acc[l] = __fadd_rn(acc[l], term(i));
  for (int s = 8; s > 0; s >>= 1)
    for (int l = 0; l < s; ++l) acc[l] = __fadd_rn(acc[l], acc[l + s]);
  return acc[0];
}

// Σ a[i]·b[i] over Sum16's 16 partial sums, tail and pairwise tree, each product fused into its
// partial sum (__fmaf_rn: one rounding a term): the Gated DeltaNet kernels' dot product (gdn.h).
__device__ __forceinline__ float Dot16Fma(const float* a, const float* b, int64_t n) {
  float acc[16];
  for (int l = 0; l < 16; ++l) acc[l] = 0.0f;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; ++l) acc[l] = __fmaf_rn(a[i + l], b[i + l], acc[l]);
  for (int l = 0; i < n; ++i, ++l) acc[l] = __fmaf_rn(a[i], b[i], acc[l]);
  for (int s = 8; s > 0; s >>= 1)
    for (int l = 0; l < s; ++l) acc[l] = __fadd_rn(acc[l], acc[l + s]);
  return acc[0];
}

// Dot16Fma(a1, b, n) and Dot16Fma(a2, b, n), each bit for bit, reading b once.
__device__ __forceinline__ void Dot16Fma2(const float* a1, const float* a2, const float* b, int64_t n, float& d1,
                                          float& d2) {
  float acc1[16], acc2[16];
  for (int l = 0; l < 16; ++l) acc1[l] = acc2[l] = 0.0f;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; ++l) {
      const float bv = b[i + l];
      acc1[l] = __fmaf_rn(a1[i + l], bv, acc1[l]);
      acc2[l] = __fmaf_rn(a2[i + l], bv, acc2[l]);
    }
  for (int l = 0; i < n; ++i, ++l) {
    acc1[l] = __fmaf_rn(a1[i], b[i], acc1[l]);
    acc2[l] = __fmaf_rn(a2[i], b[i], acc2[l]);
  }
  for (int s = 8; s > 0; s >>= 1)
    for (int l = 0; l < s; ++l) {
      acc1[l] = __fadd_rn(acc1[l], acc1[l + s]);
      acc2[l] = __fadd_rn(acc2[l], acc2[l + s]);
    }
  d1 = acc1[0];
  d2 = acc2[0];
}

// Sum16's value from a whole warp (every lane calls it; every lane gets the sum): lane l (and
// l + 16, a duplicate) accumulates Sum16's acc[l] — the same terms in the same order — and the
// pairwise tree runs through shuffles with Sum16's pairs (l with l + s, s = 8, 4, 2, 1). The
// same bits as Sum16, 16 loads in flight instead of one thread's.
template <typename Term>
__device__ __forceinline__ float WarpSum16(int64_t n, int lane, Term term) {
  const int l = lane & 15;
  float acc = 0.0f;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) acc = __fadd_rn(acc, term(i + l));
  if (i + l < n) acc = __fadd_rn(acc, term(i + l));
  for (int s = 8; s > 0; s >>= 1) acc = __fadd_rn(acc, __shfl_down_sync(0xffffffffu, acc, s));
  return __shfl_sync(0xffffffffu, acc, 0);
}

// a · b and a · w[base .. base + n) in that order.
__device__ __forceinline__ float Dot16(const float* a, const float* b, int64_t n) {
  return Sum16(n, [&](int64_t i) { return __fmul_rn(a[i], b[i]); });
}
__device__ __forceinline__ float DotWeight16(const float* a, const DevWeight& w, int64_t base, int64_t n) {
  return Sum16(n, [&](int64_t i) { return __fmul_rn(a[i], WeightAt(w, base + i)); });
}

// The outputs of a decode form that runs the weights as the A operand of an m16n8 mma and kNt
// tiles of 8 x rows as its N (gemm_decode_w4.cu): lane (g, t) holds d[nt][e]
// for x row 8 nt + 2t + e at output r_lo (row g of the 16) and d[nt][2 + e] at r_hi (row
// g + 8). Rows past m are dropped, and outputs whose flag is false (past N).
template <int kNt>
__device__ __forceinline__ void StoreWeightsAsAOutputs(const float (&d)[kNt][4], int t, int m, int64_t r_lo, bool lo_ok,
                                                       int64_t r_hi, bool hi_ok, float* y, int64_t ldy, bool round_bf16) {
#pragma unroll
  for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int r = 8 * nt + 2 * t + e;
      if (r >= m) continue;
      if (lo_ok) y[r * ldy + r_lo] = RoundAct(d[nt][e], round_bf16);
      if (hi_ok) y[r * ldy + r_hi] = RoundAct(d[nt][2 + e], round_bf16);
    }
}

}  // namespace graft::cuda

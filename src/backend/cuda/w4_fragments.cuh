// The 4-bit weights' A fragments for bf16 tensor cores (the W4A16 decode form, gemm_decode_w4.cu,
// and the prefill form, gemm_wgmma_w4.cu): what a lane loads of a 128-column stage of two rows
// (g and g + 8 of a 16-row tile) in the lane order of int4_lanes.h, and those words turned into
// the mma.sync m16n8k16 A fragments — the same registers a wgmma with A from registers takes
// (wgmma_ptx.cuh: WgmmaBf16Regs) — with QuantAt's values (quant_weight.cuh) bit for bit: int4
// by a mask-or-magic LOP3 and two bf16x2 FMAs a pair (bf16-valued scales) or QuantAt's fp32
// arithmetic, NVFP4 by byte permutes from the tensor's table (nvfp4_table.h).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/mma_ptx.cuh"
#include "backend/cuda/nvfp4_table.h"

namespace graft::cuda::w4 {

enum class W4Kind { kNvfp4, kInt4F32Scale, kInt4Bf16Scale };

// Weights are read once: no L1 allocation. A lane reads 64 bytes of its row a stage, the next
// 64 a stage later: L2 is asked to fetch the row's 256-byte segment at once (fewer, longer
// DRAM bursts).
__device__ __forceinline__ uint4 LdStream(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

template <int kSw>
__device__ __forceinline__ void LdWords(const uint32_t* p, uint32_t (&s)[kSw]) {
  if constexpr (kSw == 1) {
    s[0] = __ldg(p);
  } else if constexpr (kSw == 2) {
    const uint2 v = __ldg(reinterpret_cast<const uint2*>(p));
    s[0] = v.x, s[1] = v.y;
  } else {
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
    s[0] = v.x, s[1] = v.y, s[2] = v.z, s[3] = v.w;
  }
}

__device__ __forceinline__ uint32_t Word(const uint4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

__device__ __forceinline__ unsigned FmaBf16x2(unsigned a, unsigned b, unsigned c) {
  unsigned d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// The int4 pair in bits 0..3 and 16..19 of `bits` as (nibble - 8) · s in bf16, s2 = {s, s} a
// bf16 scale: one LOP3 makes 0x4300 | nibble, the bf16 128 + nibble; minus 136 is nibble - 8,
// exactly; the product rounded once to bf16 equals QuantAt's fp32 product (exact: 4 x 8
// significant bits) rounded to bf16. The -0 addend keeps a zero's sign as the fp32 product has it.
__device__ __forceinline__ unsigned Int4PairBf16(unsigned bits, unsigned s2) {
  unsigned biased;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(biased) : "r"(bits), "n"(0x000F000F), "n"(0x43004300));  // (a & b) | c
  const unsigned centred = FmaBf16x2(biased, 0x3F803F80u /* 1, 1 */, 0xC308C308u /* -136, -136 */);
  return FmaBf16x2(centred, s2, 0x80008000u /* -0, -0 */);
}

// The same pair with an fp32 scale, QuantAt's arithmetic: 2^23 + nibble as float bits, minus
// 2^23 + 8 (nibble - 8 exactly, without the quarter-rate int-to-float conversion), times s.
__device__ __forceinline__ unsigned Int4PairF32(unsigned bits, float s) {
  auto v = [&](unsigned nib) { return __fmul_rn(__fsub_rn(__int_as_float(0x4B000000 | (nib & 0xf)), 8388616.0f), s); };
  return PackBf16(v(bits), v(bits >> 16));
}

// What a lane holds of one stage: rows g and g + 8 (lo, hi), its four lane words (32-column
// steps b = 0..3) and the rows' scales — int4: kSw fp32 scales (one a group; groups of >= 128
// columns: the stage's one), NVFP4: kSw = 2 words of eight e4m3 codes (one a 16-column group).
template <int kSw>
struct Stage {
  uint4 lo, hi;
  uint32_t slo[kSw], shi[kSw];
};

// A step's A fragments: a[h] of K16 step h — rows g (a0, a2) and g + 8 (a1, a3) at K 2t, 2t + 1
// (a0, a1) and 2t + 8, 2t + 9 (a2, a3).
template <W4Kind kKind, int kSw>
__device__ __forceinline__ void Fragments(const Stage<kSw>& st, int b, const Nvfp4Entry* tab, unsigned (&a)[2][4]) {
  const unsigned wl = Word(st.lo, b), wh = Word(st.hi, b);
  if constexpr (kKind == W4Kind::kNvfp4) {
    // Step b is groups 2b and 2b + 1: code bytes 2b, 2b + 1 of the row's eight.
    const unsigned cl = (st.slo[b / 2] >> (16 * (b % 2))) & 0xffffu, ch = (st.shi[b / 2] >> (16 * (b % 2))) & 0xffffu;
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
    // (word >> 4(2h + q)) puts fragment q of step h in the pair's places (int4_lanes.h).
    const int sj = kSw == 1 ? 0 : b * kSw / 4;
    const float scl = __uint_as_float(st.slo[sj]), sch = __uint_as_float(st.shi[sj]);
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
}

}  // namespace graft::cuda::w4

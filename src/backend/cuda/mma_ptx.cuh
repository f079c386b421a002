// The warp-level PTX the bf16 GEMM kernels share (sm_80+ instructions, run on sm_90a): 16-byte
// cp.async copies into shared memory, ldmatrix, and mma.sync m16n8k16 bf16 → fp32 — the
// instruction WMMA's 16 x 16 x 16 bf16 step is built from, so that every tensor-core kernel
// gives an output the same bits for the same sequence of 16-wide K chunks.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace graft::cuda {

__device__ __forceinline__ unsigned SmemAddr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16 bytes global → shared, or 16 zero bytes when !valid (src is then never read).
__device__ __forceinline__ void CpAsync16(void* dst, const void* src, bool valid = true) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(SmemAddr(dst)), "l"(src), "r"(valid ? 16 : 0));
}
// 4 bytes global → shared (cached at all levels: small pieces such as a row's scales).
__device__ __forceinline__ void CpAsync4(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(SmemAddr(dst)), "l"(src));
}
// 8 bytes global → shared (cached at all levels; both 8-byte aligned).
__device__ __forceinline__ void CpAsync8(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(SmemAddr(dst)), "l"(src));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// Two floats as a bf16x2 register (round to nearest even; lo in the low half: the lower K of
// an mma fragment pair).
__device__ __forceinline__ unsigned PackBf16(float lo, float hi) {
  const __nv_bfloat162 p = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const unsigned*>(&p);
}

// Four 8 x 8 b16 matrices; lanes 8i .. 8i + 7 give the row addresses of matrix i.
__device__ __forceinline__ void LdMatrixX4(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddr(p)));
}
// As LdMatrixX4, each matrix transposed: lane (g, t) gets rows 2t, 2t + 1 of column g — the
// B operand from a [K][N] tile.
__device__ __forceinline__ void LdMatrixX4Trans(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddr(p)));
}
// Two 8 x 8 b16 matrices; lanes 0 .. 15 give the row addresses.
__device__ __forceinline__ void LdMatrixX2(unsigned& r0, unsigned& r1, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n" : "=r"(r0), "=r"(r1) : "r"(SmemAddr(p)));
}

// d += a · b for one 16 x 8 output fragment over 16 K values (bf16 in, fp32 accumulate). Lane
// (g = lane / 4, t = lane % 4) holds a: rows g, g + 8 at K 2t, 2t + 1 (a[0], a[1]) and 2t + 8,
// 2t + 9 (a[2], a[3]); b: output g at K 2t, 2t + 1 (b0) and 2t + 8, 2t + 9 (b1); d: rows g
// (d[0], d[1]) and g + 8 (d[2], d[3]) at outputs 2t, 2t + 1.
__device__ __forceinline__ void Mma16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace graft::cuda

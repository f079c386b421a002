// Device helpers every Gated DeltaNet kernel file shares (gdn.cu, gdn_chunk.cu, gdn_tc_*.cu): a
// call's chunk rows, L2 prefetches of a head's state, the gated norm's arithmetic.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/gdn.h"

namespace graft::cuda::gdn_kernels {

// Chunk c's rows of a call of n tokens whose open chunk already holds p0 rows: the first chunk
// continues the open one (its rows p0..), the others start at row 0; tokens [t0, t0 + pend −
// pstart) of the call are its rows [pstart, pend). False when the call has no chunk c.
__device__ __forceinline__ bool ChunkRows(int c, int p0, int n, int& t0, int& pstart, int& pend) {
  t0 = c == 0 ? 0 : (kGdnChunk - p0) + (c - 1) * kGdnChunk;
  pstart = c == 0 ? p0 : 0;
  if (t0 >= n) return false;
  pend = min(kGdnChunk, pstart + (n - t0));
  return true;
}
// Chunks a call of n tokens can touch, whatever the open chunk's row count.
__host__ __device__ inline int64_t MaxChunks(int64_t n) { return (n + kGdnChunk - 1) / kGdnChunk + 1; }

// A hint: [p, p + bytes) into L2 (a bulk prefetch; p 16-byte aligned, bytes a multiple of 16 —
// otherwise nothing is asked, the loads are the same either way).
__device__ __forceinline__ void PrefetchL2(const void* p, int64_t bytes) {
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0 || bytes % 16 != 0 || bytes <= 0 || bytes > (int64_t{1} << 30)) return;
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(p), "r"(static_cast<unsigned>(bytes)) : "memory");
}

// The head's state and the open chunk's key and value rows are read only after the norms and
// the coefficients: ask L2 for them at the kernel's start (bulk prefetches, nothing waits on
// them), so their loads wait on L2 rather than DRAM (the state of every layer is ~147 MB a step
// at Qwen3.5-27B: the weights stream evicts it between steps). Called before the kernel waits
// for its predecessor (pdl.cuh): this layer's state was last written by its own token kernel a
// step earlier, long complete, and a prefetch only hints — a stale `pending` (clamped to the
// chunk) can only fetch rows that go unused.
__device__ __forceinline__ void PrefetchHeadState(const DevGdnState& st, int dk, int dv, int hv, int pending, int h) {
  const int tid = threadIdx.x;
  if (tid == 0) PrefetchL2(st.S + int64_t{h} * dk * dv, int64_t{dk} * dv * 4);
  for (int m = tid; m < pending && m < kGdnChunk; m += blockDim.x) {
    PrefetchL2(st.pk + (int64_t{m} * hv + h) * dk, int64_t{dk} * 4);
    PrefetchL2(st.pvn + (int64_t{m} * hv + h) * dv, int64_t{dv} * 4);
  }
}

// The GdnCoreArgs of one sequence of a GdnCoreSeqs launch (its rows, the launch's shape).
__device__ __forceinline__ GdnCoreArgs SeqArgs(const GdnSeq& s, int hk, int hv, int dk, int dv, bool bf16) {
  GdnCoreArgs a{};
  a.qkv = s.qkv;
  a.beta = s.beta;
  a.g = s.g;
  a.n = s.n;
  a.hk = hk;
  a.hv = hv;
  a.dk = dk;
  a.dv = dv;
  a.bf16 = bf16;
  a.out = s.out;
  return a;
}

// Σ x[i]² in the CPU reference's 16-lane order (Sum16), by a whole warp.
__device__ __forceinline__ float WarpSumSquares16(const float* x, int d, int lane) {
  return WarpSum16(d, lane, [&](int64_t i) { return __fmul_rn(x[i], x[i]); });
}

// Ops::GatedRmsNorm's arithmetic for one value of a head's row: inv = 1 / sqrt(Σx² / dv + eps)
// from the row's sum of squares, then r(r(w · r(x · inv)) · silu(z)). Shared by GatedNormKernel
// and the token kernels that fuse the norm, so all have the same bits.
__device__ __forceinline__ float GatedNormInv(float sum_sq, int dv, float eps) {
  return 1.0f / sqrtf(__fadd_rn(__fdiv_rn(sum_sq, static_cast<float>(dv)), eps));
}
__device__ __forceinline__ float GatedNormed(float x, float inv, float w, float z, bool bf16) {
  return RoundAct(__fmul_rn(RoundAct(__fmul_rn(w, RoundAct(__fmul_rn(x, inv), bf16)), bf16), SiluF(z)), bf16);
}

}  // namespace graft::cuda::gdn_kernels

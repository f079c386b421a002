// Probe (not part of graft): how fast can a GPU read a 4-bit weight in the access pattern of the
// W4A16 decode kernel (src/backend/cuda/gemm_decode_w4.cu), with no arithmetic at all? Each
// kernel below reads every byte of an [N, K] int4 weight once and folds it into an XOR, so the
// time is the load pattern's alone; the ratio against a plain linear read says how much of the
// decode kernel's gap to the copy bandwidth is the pattern and how much is the kernel.
//
//   build/graft_probe_w4_loads (scripts/build builds it with the CUDA backend), or standalone:
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -cudart static
//        bench/probes/w4_load_pattern.cu -o w4_load_pattern   (one line)
//
// Patterns (grid and lanes as the decode kernel: blocks of 4 warps = 64 rows x one 1024-column
// slice; lane (g, t) reads rows g and g + 8 of its warp, 16 bytes each a 128-column stage):
//   linear        grid-stride 16-byte loads over the whole buffer (the ceiling)
//   w4-ring4      the decode kernel's ring: 4 stages in registers ahead
//   w4-ring8      all 8 stages of the slice issued at once
//   w4-ring4-256  ring4 with the L2::256B prefetch-size hint on each load
//   w4-tiled      ring4, the weight re-laid so each warp's stage is 1 KB of consecutive bytes
//   w4-8warps     ring4, blocks of 8 warps (128 rows)
// Several copies of the weight rotate so that L2 (50 MB) cannot serve a repeat.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "probe_check.h"

namespace {

enum Hint { kPlain, kL2_256 };

template <Hint kHint>
__device__ __forceinline__ uint4 Ld(const void* p) {
  uint4 v;
  if constexpr (kHint == kL2_256) {
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  } else {
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  }
  return v;
}

__device__ __forceinline__ unsigned Fold(const uint4& v) { return v.x ^ v.y ^ v.z ^ v.w; }

// Written only when the fold hits a value no weight gives: keeps the loads alive.
__device__ __forceinline__ void Keep(unsigned acc, unsigned* sink) {
  if (acc == 0x9e3779b9u) *sink = acc;
}

__global__ void LinearKernel(const uint4* w, int64_t n16, unsigned* sink) {
  unsigned acc = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n16; i += int64_t{gridDim.x} * blockDim.x) {
    acc ^= Fold(Ld<kPlain>(w + i));
  }
  Keep(acc, sink);
}

// Row-major [N, K / 2] bytes; the decode kernel's lanes. kDepth stages in registers ahead.
template <int kWarps, int kDepth, Hint kHint>
__global__ void RingKernel(const unsigned char* w, int64_t n, int64_t k, unsigned* sink) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t k0 = int64_t{blockIdx.y} * 1024, r0 = int64_t{blockIdx.x} * 16 * kWarps + 16 * warp;
  if (r0 >= n) return;
  const auto* lo = reinterpret_cast<const uint4*>(w + (r0 + g) * (k / 2) + k0 / 2) + t;
  const auto* hi = reinterpret_cast<const uint4*>(w + (r0 + 8 + g) * (k / 2) + k0 / 2) + t;
  constexpr int kStages = 8;
  uint4 rl[kDepth], rh[kDepth];
#pragma unroll
  for (int i = 0; i < kDepth; ++i) rl[i] = Ld<kHint>(lo + 4 * i), rh[i] = Ld<kHint>(hi + 4 * i);
  unsigned acc = 0;
#pragma unroll
  for (int s = 0; s < kStages; ++s) {
    const int i = s % kDepth;
    acc ^= Fold(rl[i]) ^ Fold(rh[i]);
    if (s + kDepth < kStages) rl[i] = Ld<kHint>(lo + 4 * (s + kDepth)), rh[i] = Ld<kHint>(hi + 4 * (s + kDepth));
  }
  Keep(acc, sink);
}

// The same lanes and ring over a re-laid weight: warp tile (row group, slice) is 8 KB of
// consecutive bytes, its stage s the 1 KB at 1024 s, lane l's two pieces at 32 l.
template <int kDepth>
__global__ void TiledKernel(const unsigned char* w, int64_t n, int64_t k, unsigned* sink) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t group = int64_t{blockIdx.x} * 4 + warp, slices = k / 1024;
  if (group * 16 >= n) return;
  const auto* p = reinterpret_cast<const uint4*>(w + (group * slices + blockIdx.y) * 8192) + 2 * lane;
  constexpr int kStages = 8;
  uint4 rl[kDepth], rh[kDepth];
#pragma unroll
  for (int i = 0; i < kDepth; ++i) rl[i] = Ld<kPlain>(p + 64 * i), rh[i] = Ld<kPlain>(p + 64 * i + 1);
  unsigned acc = 0;
#pragma unroll
  for (int s = 0; s < kStages; ++s) {
    const int i = s % kDepth;
    acc ^= Fold(rl[i]) ^ Fold(rh[i]);
    if (s + kDepth < kStages) rl[i] = Ld<kPlain>(p + 64 * (s + kDepth)), rh[i] = Ld<kPlain>(p + 64 * (s + kDepth) + 1);
  }
  Keep(acc, sink);
}

struct Shape {
  const char* name;
  int64_t n, k;
};

}  // namespace

int main() {
  const Shape shapes[] = {{"gate|up [34816, 5120]", 34816, 5120}, {"down [5120, 17408]", 5120, 17408}};
  constexpr int kCopies = 6, kReps = 30;
  unsigned* sink;
  CHECK(cudaMalloc(&sink, 4));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  std::printf("%-24s %-14s %10s %10s\n", "weight", "pattern", "us", "GB/s");
  for (const Shape& sh : shapes) {
    const int64_t bytes = sh.n * sh.k / 2;
    unsigned char* buf;
    CHECK(cudaMalloc(&buf, bytes * kCopies));
    CHECK(cudaMemset(buf, 0x5a, bytes * kCopies));
    const dim3 grid4(static_cast<unsigned>((sh.n + 63) / 64), static_cast<unsigned>(sh.k / 1024));
    const dim3 grid8(static_cast<unsigned>((sh.n + 127) / 128), static_cast<unsigned>(sh.k / 1024));
    auto time = [&](const char* pattern, auto launch) {
      for (int c = 0; c < kCopies; ++c) launch(buf + c * bytes);  // warm-up
      CHECK(cudaEventRecord(a));
      for (int r = 0; r < kReps; ++r) launch(buf + (r % kCopies) * bytes);
      CHECK(cudaEventRecord(b));
      CHECK(cudaEventSynchronize(b));
      CHECK(cudaGetLastError());
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, a, b));
      const double us = 1000.0 * ms / kReps;
      std::printf("%-24s %-14s %10.2f %10.1f\n", sh.name, pattern, us, bytes / us / 1e3);
    };
    time("linear", [&](unsigned char* w) {
      LinearKernel<<<sms * 8, 256>>>(reinterpret_cast<const uint4*>(w), bytes / 16, sink);
    });
    time("w4-ring4", [&](unsigned char* w) { RingKernel<4, 4, kPlain><<<grid4, 128>>>(w, sh.n, sh.k, sink); });
    time("w4-ring8", [&](unsigned char* w) { RingKernel<4, 8, kPlain><<<grid4, 128>>>(w, sh.n, sh.k, sink); });
    time("w4-ring4-256", [&](unsigned char* w) { RingKernel<4, 4, kL2_256><<<grid4, 128>>>(w, sh.n, sh.k, sink); });
    time("w4-tiled", [&](unsigned char* w) { TiledKernel<4><<<grid4, 128>>>(w, sh.n, sh.k, sink); });
    time("w4-8warps", [&](unsigned char* w) { RingKernel<8, 4, kPlain><<<grid8, 256>>>(w, sh.n, sh.k, sink); });
    CHECK(cudaFree(buf));
  }
  return 0;
}

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "backend/cuda/launched.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/rmsnorm.h"
#include "backend/cuda/row_norm.cuh"

namespace graft::cuda {
namespace {

constexpr int kThreads = kNormThreads;
constexpr int kCached = 24;  // values a thread keeps in registers: rows up to 6144 wide in one read

// Thread t owns the row's columns t, t + 256, ...: its sum of squares runs over them in
// ascending order, then a fixed tree over the block (shared memory down to 32 partial sums,
// then warp 0's shuffles: the same pairs). The first kCached columns of each thread are read
// once, all loads issued before any store (a single block on the critical path at batch 1 was
// latency-bound on one load at a time), their weights with them (read after the sum they were a
// second round trip to memory: 10 -> 4 us a call at batch 1 on the H200).
// kAdd: the row is first h = r(h + y), written back. out_b: null, or where the outputs also go as
// bf16 (their twin: bf16 values already when round_bf16).
template <bool kAdd>
__global__ void __launch_bounds__(kThreads) RmsNormKernel(const float* x, float* h, const float* __restrict__ y,
                                                          const float* __restrict__ w, int dim, float eps, int kind,
                                                          bool round_bf16, float* out, __nv_bfloat16* out_b) {
  __shared__ float partial[kThreads];
  const int64_t row = blockIdx.x;
  const int tid = threadIdx.x;
  const float* xr = kAdd ? h + row * dim : x + row * dim;
  float v[kCached], wv[kCached];  // the weights read with the row: their latency off the path after the sum
  // The norm's weights are uploaded by copies at load time, never written by a kernel: read them
  // before waiting for the kernel that wrote the row (pdl.cuh).
#pragma unroll
  for (int j = 0; j < kCached; ++j) wv[j] = tid + j * kThreads < dim ? w[tid + j * kThreads] : 0.0f;
  PdlBegin();
#pragma unroll
  for (int j = 0; j < kCached; ++j) v[j] = tid + j * kThreads < dim ? xr[tid + j * kThreads] : 0.0f;
  if constexpr (kAdd) {
    float yv[kCached];
#pragma unroll
    for (int j = 0; j < kCached; ++j) yv[j] = tid + j * kThreads < dim ? y[row * dim + tid + j * kThreads] : 0.0f;
#pragma unroll
    for (int j = 0; j < kCached; ++j) {
      if (tid + j * kThreads < dim) {
        v[j] = RoundAct(__fadd_rn(v[j], yv[j]), round_bf16);
        h[row * dim + tid + j * kThreads] = v[j];
      }
    }
  }
  float acc = 0.0f;
#pragma unroll
  for (int j = 0; j < kCached; ++j) {
    if (tid + j * kThreads < dim) acc = __fadd_rn(acc, __fmul_rn(v[j], v[j]));
  }
  for (int i = tid + kCached * kThreads; i < dim; i += kThreads) {  // wider rows: the rest, one at a time
    float u = xr[i];
    if constexpr (kAdd) {
      u = RoundAct(__fadd_rn(u, y[row * dim + i]), round_bf16);
      h[row * dim + i] = u;
    }
    acc = __fadd_rn(acc, __fmul_rn(u, u));
  }
  const float inv = InvRms(acc, dim, eps, partial);
  float* o = out + row * dim;
  __nv_bfloat16* ob = out_b != nullptr ? out_b + row * dim : nullptr;
#pragma unroll
  for (int j = 0; j < kCached; ++j) {
    const int i = tid + j * kThreads;
    if (i < dim) {
      const float r = Normed(v[j], inv, wv[j], kind, round_bf16);
      o[i] = r;
      if (ob != nullptr) ob[i] = __float2bfloat16_rn(r);
    }
  }
  for (int i = tid + kCached * kThreads; i < dim; i += kThreads) {
    const float r = Normed(xr[i], inv, w[i], kind, round_bf16);
    o[i] = r;
    if (ob != nullptr) ob[i] = __float2bfloat16_rn(r);
  }
}

// Rows up to kWarpRowMax wide (a head's q / k norm: 128 or 256 columns, n x heads rows) a warp
// each, eight rows a block: one 256-thread block a 128-column row left most of its threads idle
// and made the launch a quarter of a million blocks (4K tokens of Qwen3-32B: 0.7 ms a call). The
// same bits as RmsNormKernel: lane l holds columns l + 32 j (zeros past dim) — what threads
// l + 32 j held there — and WarpInvRms adds the same pairs in the same order.
constexpr int kWarpRowMax = 256, kRowsPerBlock = kThreads / 32;
static_assert(kWarpRowMax == kNormThreads, "a warp row mirrors the block tree's 256 partial sums");

__global__ void __launch_bounds__(kThreads) RmsNormWarpKernel(const float* x, const float* __restrict__ w, int64_t rows,
                                                              int dim, float eps, int kind, bool round_bf16, float* out,
                                                              __nv_bfloat16* out_b) {
  const int lane = threadIdx.x % 32;
  const int64_t row = int64_t{blockIdx.x} * kRowsPerBlock + threadIdx.x / 32;
  float wv[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) wv[j] = lane + 32 * j < dim ? w[lane + 32 * j] : 0.0f;  // weights: before the wait (pdl.cuh)
  PdlBegin();
  if (row >= rows) return;
  const float* xr = x + row * dim;
  float v[8], sq[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = lane + 32 * j < dim ? xr[lane + 32 * j] : 0.0f;
#pragma unroll
  for (int j = 0; j < 8; ++j) sq[j] = lane + 32 * j < dim ? __fadd_rn(0.0f, __fmul_rn(v[j], v[j])) : 0.0f;
  const float inv = WarpInvRms(sq, dim, eps);
  float* o = out + row * dim;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    if (lane + 32 * j < dim) {
      const float r = Normed(v[j], inv, wv[j], kind, round_bf16);
      o[lane + 32 * j] = r;
      if (out_b != nullptr) out_b[row * dim + lane + 32 * j] = __float2bfloat16_rn(r);
    }
  }
}

}  // namespace

Status RmsNorm(const float* x, const float* w, int64_t rows, int dim, float eps, NormKind kind, bool round_bf16,
               float* out, void* stream, uint16_t* out_bf16) {
  auto* ob = reinterpret_cast<__nv_bfloat16*>(out_bf16);
  if (rows < 0 || dim <= 0) return InvalidArgument("cuda RmsNorm: bad shape");
  if (rows == 0) return Status::Ok();
  if (rows > 0x7fffffff) return InvalidArgument("cuda RmsNorm: more than 2^31 rows");
  if (dim <= kWarpRowMax) {
    LaunchPdl(RmsNormWarpKernel, static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock), kThreads, 0,
              static_cast<cudaStream_t>(stream), x, w, rows, dim, eps, static_cast<int>(kind), round_bf16, out, ob);
    return Launched("RmsNorm");
  }
  LaunchPdl(RmsNormKernel<false>, static_cast<unsigned>(rows), kThreads, 0, static_cast<cudaStream_t>(stream), x,
            nullptr, nullptr, w, dim, eps, static_cast<int>(kind), round_bf16, out, ob);
  return Launched("RmsNorm");
}

Status AddRmsNorm(float* h, const float* y, const float* w, int64_t rows, int dim, float eps, NormKind kind,
                  bool round_bf16, float* out, void* stream, uint16_t* out_bf16) {
  if (rows < 0 || dim <= 0) return InvalidArgument("cuda AddRmsNorm: bad shape");
  if (rows == 0) return Status::Ok();
  if (rows > 0x7fffffff) return InvalidArgument("cuda AddRmsNorm: more than 2^31 rows");
  if (out == h || out == y) return InvalidArgument("cuda AddRmsNorm: out aliases h or y");
  LaunchPdl(RmsNormKernel<true>, static_cast<unsigned>(rows), kThreads, 0, static_cast<cudaStream_t>(stream), nullptr,
            h, y, w, dim, eps, static_cast<int>(kind), round_bf16, out, reinterpret_cast<__nv_bfloat16*>(out_bf16));
  return Launched("AddRmsNorm");
}

}  // namespace graft::cuda

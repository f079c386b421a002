#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/launched.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/lora.h"

namespace graft::cuda {
namespace {

constexpr int kThreads = 256;

// One half-warp per (output, row, module). kDown: t[r, mod, j] = r(x_r · A_j); otherwise
// y_r[off + n] = r(y + r(r(t_r · B_n) * scale)).
template <bool kDown>
__global__ void LoraHalfWarpKernel(LoraArgs a, int64_t row0) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  const int64_t r = row0 + blockIdx.y;
  const int slot = a.row_slot[r];
  if (slot <= 0 || slot >= a.num_slots) return;
  const int mi = a.slot_begin[slot] + static_cast<int>(blockIdx.z);
  if (mi >= a.slot_begin[slot + 1]) return;
  const DevLoraModule m = a.modules[mi];
  const int lane = threadIdx.x % 16;
  const int64_t out = blockIdx.x * int64_t{kThreads / 16} + threadIdx.x / 16;
  const bool active = out < (kDown ? int64_t{m.rank} : m.b.rows);
  float* t = a.scratch + (r * a.max_modules + blockIdx.z) * a.max_rank;
  const float* in = kDown ? a.x + r * a.k : t;
  const DevWeight& w = kDown ? m.a : m.b;
  const int64_t K = kDown ? a.k : m.rank, full = K / 16 * 16, base = out * K;
  // Lane l: the reference's acc[l] — its whole 16-blocks in order, then its tail element.
  float acc = 0.0f;
  if (active) {
    for (int64_t i = lane; i < full; i += 16) acc = __fadd_rn(acc, __fmul_rn(in[i], WeightAt(w, base + i)));
    if (full + lane < K) acc = __fadd_rn(acc, __fmul_rn(in[full + lane], WeightAt(w, base + full + lane)));
  }
  // The pairwise tree: acc[l] += acc[l + s] for s = 8, 4, 2, 1 (lane 0 ends with the sum).
  for (int s = 8; s > 0; s >>= 1) acc = __fadd_rn(acc, __shfl_down_sync(0xffffffffu, acc, s, 16));
  if (!active || lane != 0) return;
  if (kDown) {
    t[out] = RoundAct(acc, a.bf16);
  } else {
    float* yn = a.y + r * a.y_stride + m.row_offset + out;
    *yn = RoundAct(__fadd_rn(*yn, RoundAct(__fmul_rn(RoundAct(acc, a.bf16), m.scale), a.bf16)), a.bf16);
  }
}

__global__ void LoraScatterAddKernel(const float* u, int64_t m, int64_t cols, const int32_t* rows, float scale,
                                     int64_t row_offset, float* y, int64_t y_stride, bool bf16) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < m * cols; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = e / cols, n = e % cols;
    float* yn = y + int64_t{rows[t]} * y_stride + row_offset + n;
    *yn = RoundAct(__fadd_rn(*yn, RoundAct(__fmul_rn(u[e], scale), bf16)), bf16);
  }
}

}  // namespace

Status LoraScatterAdd(const float* u, int64_t m, int64_t cols, const int32_t* rows, float scale, int64_t row_offset,
                      float* y, int64_t y_stride, bool bf16, void* stream) {
  if (m < 0 || cols < 0) return InvalidArgument("cuda LoraScatterAdd: bad shape");
  if (m == 0 || cols == 0) return Status::Ok();
  const int64_t blocks = std::min<int64_t>((m * cols + kThreads - 1) / kThreads, 65535);
  LaunchPdl(LoraScatterAddKernel, static_cast<unsigned>(blocks), kThreads, 0, static_cast<cudaStream_t>(stream), u, m,
            cols, rows, scale, row_offset, y, y_stride, bf16);
  return Launched("LoraScatterAdd");
}

Status LoraAdd(const LoraArgs& a, void* stream) {
  if (a.m < 0 || a.k <= 0 || a.num_slots <= 0) return InvalidArgument("cuda LoraAdd: bad shape");
  if (a.max_rank < 1 || a.max_rank > kMaxLoraRank) {
    return InvalidArgument("cuda LoraAdd: rank " + std::to_string(a.max_rank) + " outside 1.." + std::to_string(kMaxLoraRank));
  }
  if (a.m == 0) return Status::Ok();
  if (a.m > 0x7fffffff) return InvalidArgument("cuda LoraAdd: too many rows");
  if (a.max_modules < 1 || a.max_modules > 65535 || a.max_out < 1 || a.scratch == nullptr) {
    return InvalidArgument("cuda LoraAdd: bad module count or output width, or no scratch");
  }
  const int64_t per_block = kThreads / 16;
  for (int64_t row0 = 0; row0 < a.m; row0 += 65535) {
    const unsigned rows = static_cast<unsigned>(std::min<int64_t>(65535, a.m - row0));
    const dim3 down(static_cast<unsigned>((a.max_rank + per_block - 1) / per_block), rows, a.max_modules);
    const dim3 up(static_cast<unsigned>((a.max_out + per_block - 1) / per_block), rows, a.max_modules);
    LaunchPdl(LoraHalfWarpKernel<true>, down, kThreads, 0, static_cast<cudaStream_t>(stream), a, row0);
    LaunchPdl(LoraHalfWarpKernel<false>, up, kThreads, 0, static_cast<cudaStream_t>(stream), a, row0);
  }
  return Launched("LoraAdd");
}

}  // namespace graft::cuda

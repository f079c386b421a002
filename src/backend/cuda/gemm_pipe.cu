#include "backend/cuda/gemm_pipe.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <string>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/gemm_wgmma.h"
#include "backend/cuda/launched.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/mma_ptx.cuh"

namespace graft::cuda {
namespace {

// Two shapes, the same arithmetic: Tile<4, 32, 4> is 128 x 128 outputs (warps 64 x 32, two
// blocks per multiprocessor), Tile<8, 64, 3> 128 x 256 (warps 64 x 64, one block per
// multiprocessor, half the shared-memory reads per product) for products big enough to fill the
// GPU with it.
template <int kWarpN8, int kBK, int kStages>
struct Tile {
  static constexpr int kM = 128, kN = 32 * kWarpN8, kThreads = 256;
  static constexpr int kLd = kBK + 8;  // rows 16 bytes longer: ldmatrix's eight row reads hit eight bank groups
  static constexpr int kPieces = kBK / 8;  // 16-byte pieces per row and slice
  static constexpr int kAPer = kM * kPieces / kThreads, kBPer = kN * kPieces / kThreads;
  static constexpr int kMinBlocks = kWarpN8 == 4 ? 2 : 1;
  struct Smem {
    __nv_bfloat16 a[kStages][kM][kLd];
    __nv_bfloat16 b[kStages][kN][kLd];
  };
};
using SmallTile = Tile<4, 32, 4>;
using BigTile = Tile<8, 64, 3>;
constexpr int kGroupM = 8;  // row tiles per group of the visiting order

template <int kWarpN8, int kBK, int kStages>
__global__ void __launch_bounds__(256, (Tile<kWarpN8, kBK, kStages>::kMinBlocks))
    GemmPipeKernel(const __nv_bfloat16* __restrict__ xb, int64_t m, const __nv_bfloat16* __restrict__ w, int64_t n,
                   int64_t k, float* __restrict__ y, int64_t ldy, bool round_bf16, int mtiles, int ntiles, int64_t kz,
                   int64_t split_stride, int64_t x_cols) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  using T = Tile<kWarpN8, kBK, kStages>;
  // This block's K range (blockIdx.y's slice of a split product, else all of K) and its output.
  const int64_t kb = int64_t{blockIdx.y} * kz, ke = min(k, kb + kz);
  y += int64_t{blockIdx.y} * split_stride;
  extern __shared__ __align__(128) unsigned char raw[];  // sizeof(T::Smem), dynamic
  typename T::Smem& sm = *reinterpret_cast<typename T::Smem*>(raw);
  // The visiting order: groups of kGroupM row tiles; within a group, rows fastest.
  const int per_group = kGroupM * ntiles, group = static_cast<int>(blockIdx.x) / per_group;
  const int first = group * kGroupM, gsize = min(kGroupM, mtiles - first), in_group = static_cast<int>(blockIdx.x) % per_group;
  const int64_t row0 = int64_t{first + in_group % gsize} * T::kM, col0 = int64_t{in_group / gsize} * T::kN;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, wm = warp / 4, wn = warp % 4;

  // Slice of K at k0 into stage st, 16 bytes a copy, zeros past m, N and K.
  // x's rows are x_cols long and repeat along K (x_cols == K, or a multiple of kBK dividing it).
  auto load = [&](int st, int64_t k0) {
    const int64_t xc0 = x_cols == k ? k0 : k0 % x_cols;
#pragma unroll
    for (int i = 0; i < T::kAPer; ++i) {
      const int c = tid + T::kThreads * i, r = c / T::kPieces, cc = (c % T::kPieces) * 8;
      const int64_t gr = row0 + r, gc = k0 + cc;
      const bool v = gr < m && gc < ke;
      CpAsync16(&sm.a[st][r][cc], v ? xb + gr * x_cols + xc0 + cc : xb, v);
    }
#pragma unroll
    for (int i = 0; i < T::kBPer; ++i) {
      const int c = tid + T::kThreads * i, r = c / T::kPieces, cc = (c % T::kPieces) * 8;
      const int64_t gr = col0 + r, gc = k0 + cc;
      const bool v = gr < n && gc < ke;
      CpAsync16(&sm.b[st][r][cc], v ? w + gr * k + gc : w, v);
    }
  };

  float acc[4][kWarpN8][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < kWarpN8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  const int64_t slices = (ke - kb + kBK - 1) / kBK;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < slices) load(s, kb + int64_t{s} * kBK);
    CpAsyncCommit();  // one group per slot, empty or not, so that the counts below hold
  }
  // ldmatrix row addresses: A as four 8 x 8 matrices (rows 0-7 / 8-15, K 0-7 / 8-15), B as two
  // 8-output blocks by two K halves.
  const int a_row = wm * 64 + lane % 16, a_col = (lane / 16) * 8;
  const int b_row = wn * 8 * kWarpN8 + lane % 8 + (lane / 16) * 8, b_col = ((lane / 8) % 2) * 8;
  for (int64_t t = 0; t < slices; ++t) {
    CpAsyncWait<kStages - 2>();  // slice t has landed (this thread's copies)
    __syncthreads();             // everyone's; and everyone is done with slice t - 1's stage
    if (t + kStages - 1 < slices) load(static_cast<int>((t + kStages - 1) % kStages), kb + (t + kStages - 1) * kBK);
    CpAsyncCommit();
    const int st = static_cast<int>(t % kStages);
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      if (kb + t * kBK + kk >= ke) break;  // a chunk wholly past K adds nothing (as in the decode forms)
      unsigned a[4][4], b[kWarpN8 / 2][4];
#pragma unroll
      for (int i = 0; i < 4; ++i) LdMatrixX4(a[i], &sm.a[st][a_row + 16 * i][kk + a_col]);
#pragma unroll
      for (int j = 0; j < kWarpN8 / 2; ++j) LdMatrixX4(b[j], &sm.b[st][b_row + 16 * j][kk + b_col]);
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < kWarpN8; ++j) Mma16816(acc[i][j], a[i], b[j / 2][(j % 2) * 2], b[j / 2][(j % 2) * 2 + 1]);
    }
  }
  CpAsyncWait<0>();
  // Each thread holds, per fragment, rows g and g + 8 (g = lane / 4) at columns 2 (lane % 4) + {0, 1}.
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < kWarpN8; ++j) {
      const int64_t r = row0 + wm * 64 + 16 * i + lane / 4, c = col0 + wn * 8 * kWarpN8 + 8 * j + 2 * (lane % 4);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t gr = r + (e / 2) * 8, gc = c + e % 2;
        if (gr < m && gc < n) y[gr * ldy + gc] = RoundAct(acc[i][j][e], round_bf16);
      }
    }
  }
}

__global__ void ToBf16Kernel(const float* __restrict__ x, int64_t count, __nv_bfloat16* __restrict__ out, bool vec4) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (vec4) {
    for (int64_t q = first; q < count / 4; q += stride) {
      const float4 v = reinterpret_cast<const float4*>(x)[q];
      __nv_bfloat162* o = reinterpret_cast<__nv_bfloat162*>(out + 4 * q);
      o[0] = __floats2bfloat162_rn(v.x, v.y);
      o[1] = __floats2bfloat162_rn(v.z, v.w);
    }
    for (int64_t i = count / 4 * 4 + first; i < count; i += stride) out[i] = __float2bfloat16_rn(x[i]);
  } else {
    for (int64_t i = first; i < count; i += stride) out[i] = __float2bfloat16_rn(x[i]);
  }
}

template <typename T, int kWarpN8, int kBK, int kStages>
Status Launch(const __nv_bfloat16* xb, int64_t m, const __nv_bfloat16* w, int64_t n, int64_t k, float* y, int64_t ldy,
              bool round_output, int64_t kz, int64_t x_cols, cudaStream_t s) {
  static const cudaError_t ready = cudaFuncSetAttribute(
      GemmPipeKernel<kWarpN8, kBK, kStages>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(sizeof(typename T::Smem)));
  if (ready != cudaSuccess) return Internal(std::string("cuda GemmPipe: shared memory: ") + cudaGetErrorString(ready));
  const int64_t mtiles = (m + T::kM - 1) / T::kM, ntiles = (n + T::kN - 1) / T::kN;
  if (mtiles * ntiles > (int64_t{1} << 31) - 1 || kGroupM * ntiles > (int64_t{1} << 30)) {
    return InvalidArgument("cuda GemmPipe: too many output tiles for one launch");
  }
  const dim3 grid(static_cast<unsigned>(mtiles * ntiles), static_cast<unsigned>((k + kz - 1) / kz));
  LaunchSerialized(GemmPipeKernel<kWarpN8, kBK, kStages>, grid, T::kThreads, sizeof(typename T::Smem), s, xb, m, w, n, k, y,
            ldy, round_output, static_cast<int>(mtiles), static_cast<int>(ntiles), kz, m * ldy, x_cols);
  return Launched("GemmPipe");
}

}  // namespace

Status ToBf16(const float* x, int64_t count, uint16_t* out, void* stream) {
  if (count <= 0) return Status::Ok();
  const bool vec4 = reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 8 == 0;
  const int64_t blocks = (count / (vec4 ? 4 : 1) + 255) / 256;
  LaunchSerialized(ToBf16Kernel, static_cast<unsigned>(blocks < 4096 ? (blocks > 0 ? blocks : 1) : 4096), 256, 0,
            static_cast<cudaStream_t>(stream), x, count, reinterpret_cast<__nv_bfloat16*>(out), vec4);
  return Launched("ToBf16");
}

Status GemmPipe(const uint16_t* xb, int64_t m, const uint16_t* w, int64_t n, int64_t k, float* y, int64_t ldy,
                bool round_output, void* stream, int64_t split_k, int64_t x_cols) {
  const bool plain = (split_k <= 0 || split_k >= k) && (x_cols <= 0 || x_cols == k);
  if (plain && GemmWgmmaFits(m, n, k, xb, w) && ldy >= n) return GemmWgmma(xb, m, w, n, k, y, ldy, round_output, stream);
  // A split of whole 64-column stages over x as it is (a LoRA A product): the wgmma split form.
  const bool split = split_k > 0 && split_k < k && split_k % 64 == 0 && (x_cols <= 0 || x_cols == k) && !round_output;
  if (split && GemmWgmmaFits(m, n, k, xb, w) && ldy >= n) return GemmWgmmaSplitK(xb, m, w, n, k, split_k, y, ldy, stream);
  return GemmPipeMmaSync(xb, m, w, n, k, y, ldy, round_output, stream, split_k, x_cols);
}

Status GemmPipeMmaSync(const uint16_t* xb, int64_t m, const uint16_t* w, int64_t n, int64_t k, float* y, int64_t ldy,
                       bool round_output, void* stream, int64_t split_k, int64_t x_cols) {
  const int64_t kz = split_k > 0 ? split_k : k, xc = x_cols > 0 ? x_cols : k;
  if (m <= 0 || n <= 0 || k <= 0 || k % 8 != 0 || ldy < n || reinterpret_cast<uintptr_t>(xb) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(w) % 16 != 0 || (kz % 16 != 0 && kz < k) || (k + kz - 1) / kz > 65535 ||
      (xc != k && (xc % kRepeatAlign != 0 || k % xc != 0 || kz % kRepeatAlign != 0))) {
    return InvalidArgument(
        "cuda GemmPipe: needs K % 8 == 0, 16-byte aligned operands, split slices a multiple of 16, a repeated x "
        "a multiple of 256 columns dividing K");
  }
  const auto* xp = reinterpret_cast<const __nv_bfloat16*>(xb);
  const auto* wp = reinterpret_cast<const __nv_bfloat16*>(w);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  // The big tile once it makes at least two waves of one block per multiprocessor (132 on the H200).
  const int64_t big_tiles = (m + BigTile::kM - 1) / BigTile::kM * ((n + BigTile::kN - 1) / BigTile::kN);
  if (big_tiles >= 264) return Launch<BigTile, 8, 64, 3>(xp, m, wp, n, k, y, ldy, round_output, kz, xc, s);
  return Launch<SmallTile, 4, 32, 4>(xp, m, wp, n, k, y, ldy, round_output, kz, xc, s);
}

}  // namespace graft::cuda

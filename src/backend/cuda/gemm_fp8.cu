#include "backend/cuda/gemm_fp8.h"

#include <cuda_runtime.h>

#include <string>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/mma_ptx.cuh"
#include "backend/cuda/wgmma_ptx.cuh"

namespace graft::cuda {
namespace {

// One kernel for every row count. The activation rows are wgmma's A operand — a warpgroup owns
// 64 of them, a block kWG warpgroups — and the weights its B: kBN outputs a block (wgmma's N).
// K streams through a ring of kStages stages of 128 columns — one 128-byte swizzled row per
// activation row and weight row (wgmma_ptx.cuh), copied by every thread with cp.async, with the
// stage's activation and weight scales beside it — and each output's chain is the same whatever
// the shape: wgmma m64nNk32 over the group's 32-column chunks in ascending order into `part`
// (the first chunk of a group starts it), then at the group's end total += part · (sx · sw).
// Rows past m or N are zeroed once and never copied (a decode step copies its few rows only).
constexpr int kBK = 128;  // K columns (bytes) a stage

template <int kWG, int kBN>
struct Tile {
  static constexpr int kThreads = 128 * kWG;
  static constexpr int kRowsA = 64 * kWG;                    // activation rows a block
  static constexpr int kRows = kRowsA + kBN;                 // stage rows: activations, then weights
  static constexpr int kStageBytes = kRows * kBK;            // a multiple of 1024: every tile swizzle-aligned
  static constexpr int kPer = (kRows * 8 + kThreads - 1) / kThreads;  // 16-byte copies a thread and stage
};

template <int kWG, int kBN, int kStages>
constexpr size_t SmemBytes() {
  using T = Tile<kWG, kBN>;
  return 1024 + size_t{kStages} * T::kStageBytes + (size_t{kStages} * (T::kRowsA + 1) + kBN) * sizeof(float);
}

template <int kWG, int kBN, int kStages>
__global__ void __launch_bounds__(Tile<kWG, kBN>::kThreads, 1)
    GemmFp8Kernel(const uint8_t* __restrict__ xq, const float* __restrict__ sx, int64_t m, DevWeight w, int64_t group,
                  float* __restrict__ y, int64_t ldy, bool round_bf16, int ttiles) {
  using T = Tile<kWG, kBN>;
  extern __shared__ unsigned char raw[];
  // The stages 1024-byte aligned (the swizzle's period); then each stage's activation scales
  // [kRowsA] and weight-block scale, then the per-channel weight scales [kBN].
  unsigned char* stages = raw + ((1024 - (SmemAddr(raw) & 1023)) & 1023);
  float* sxs = reinterpret_cast<float*>(stages + kStages * T::kStageBytes);
  float* wss = sxs + kStages * T::kRowsA;
  float* wch = wss + kStages;
  const int64_t n = w.rows, k = w.cols, groups = (k + group - 1) / group, kblocks = (k + w.group - 1) / w.group;
  const bool channel = w.format == DevFormat::kFp8Channel;
  const auto* wq = static_cast<const uint8_t*>(w.data);
  const int64_t tok0 = int64_t{static_cast<int>(blockIdx.x) % ttiles} * T::kRowsA,
                out0 = int64_t{static_cast<int>(blockIdx.x) / ttiles} * kBN;
  const int tid = threadIdx.x, wg = tid / 128, warp = (tid / 32) % 4, lane = tid % 32, g = lane / 4, t = lane % 4;

  // Rows past m or N: zeros in every stage, once (a generic-proxy store the tensor cores read).
  const int rows_a = static_cast<int>(min(int64_t{T::kRowsA}, m - tok0)), rows_b = static_cast<int>(min(int64_t{kBN}, n - out0));
  for (int i = tid; i < kStages * T::kRows * (kBK / 16); i += T::kThreads) {
    const int r = (i / (kBK / 16)) % T::kRows;
    if (r < T::kRowsA ? r >= rows_a : r - T::kRowsA >= rows_b) {
      *reinterpret_cast<uint4*>(stages + i * 16) = make_uint4(0, 0, 0, 0);
    }
  }
  if (channel) {
    for (int i = tid; i < kBN; i += T::kThreads) wch[i] = i < rows_b ? w.scale[out0 + i] : 0.0f;
  }
  FenceProxyAsync();

  // Copies: thread tid takes the 16-byte chunk tid % 8 of stage rows tid / 8, + kThreads / 8, ...
  // of the rows that exist; chunks past K zero-fill. Then the stage's scales: sx of each
  // activation row, and fp8-block's one weight scale (blocks are 128k wide, kBN <= 128 divides).
  const int chunk = tid % 8;
  const uint8_t* src[T::kPer];
  int dst[T::kPer];
#pragma unroll
  for (int i = 0; i < T::kPer; ++i) {
    const int r = tid / 8 + i * (T::kThreads / 8);
    const bool ok = r < T::kRowsA ? r < rows_a : r < T::kRows && r - T::kRowsA < rows_b;
    dst[i] = ok ? SwizzledOffset(r, chunk) : -1;
    src[i] = !ok ? xq : r < T::kRowsA ? xq + (tok0 + r) * k + chunk * 16 : wq + (out0 + r - T::kRowsA) * k + chunk * 16;
  }
  const float* sx_row = sx + (tok0 + min(tid, max(rows_a - 1, 0))) * groups;
  const float* ws_row = channel ? nullptr : w.scale + (out0 / w.group) * kblocks;
  auto load = [&](int st, int64_t k0) {
    unsigned char* base = stages + st * T::kStageBytes;
    const bool kin = k0 + chunk * 16 < k;
#pragma unroll
    for (int i = 0; i < T::kPer; ++i) {
      if (dst[i] >= 0) CpAsync16(base + dst[i], kin ? src[i] + k0 : src[i], kin);
    }
    if (tid < rows_a) CpAsync4(&sxs[st * T::kRowsA + tid], sx_row + k0 / group);
    if (tid == T::kThreads - 1 && !channel) CpAsync4(&wss[st], ws_row + k0 / w.group);
  };

  float part[kBN / 2], total[kBN / 2];
#pragma unroll
  for (int i = 0; i < kBN / 2; ++i) part[i] = total[i] = 0.0f;

  const int64_t slices = (k + kBK - 1) / kBK;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < slices) load(s, int64_t{s} * kBK);
    CpAsyncCommit();
  }
  const int r_lo = 64 * wg + 16 * warp + g, r_hi = r_lo + 8;  // this thread's activation rows in the block
  for (int64_t i = 0; i < slices; ++i) {
    CpAsyncWait<kStages - 2>();
    FenceProxyAsync();
    __syncthreads();  // stage i is in; every warpgroup is done with stage i - 1, which is refilled now
    if (i + kStages - 1 < slices) load(static_cast<int>((i + kStages - 1) % kStages), (i + kStages - 1) * kBK);
    CpAsyncCommit();
    const int st = static_cast<int>(i % kStages);
    const unsigned char* base = stages + st * T::kStageBytes;
    const uint64_t da = SwizzledTileDesc(base + wg * 64 * kBK), db = SwizzledTileDesc(base + T::kRowsA * kBK);
    const int64_t k0 = i * kBK;
    const bool starts = k0 % group == 0, ends = (k0 + kBK) % group == 0 || i + 1 == slices;
    WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < kBK / 32; ++kk) {  // columns past K are zeros in both tiles: they add 0
      WgmmaE4m3<kBN>(part, da + 2 * kk, db + 2 * kk, starts && kk == 0 ? 0 : 1);
    }
    WgmmaCommit();
    WgmmaWait<0>();
    FenceAccumulators(part);
    if (ends) {  // the group ends: total += part · (sx · sw)
      const float xs_lo = sxs[st * T::kRowsA + r_lo], xs_hi = sxs[st * T::kRowsA + r_hi];
      if (channel) {
#pragma unroll
        for (int j = 0; j < kBN / 8; ++j) {
          const float2 ws = *reinterpret_cast<const float2*>(wch + 8 * j + 2 * t);
          total[4 * j + 0] = __fadd_rn(total[4 * j + 0], __fmul_rn(part[4 * j + 0], __fmul_rn(xs_lo, ws.x)));
          total[4 * j + 1] = __fadd_rn(total[4 * j + 1], __fmul_rn(part[4 * j + 1], __fmul_rn(xs_lo, ws.y)));
          total[4 * j + 2] = __fadd_rn(total[4 * j + 2], __fmul_rn(part[4 * j + 2], __fmul_rn(xs_hi, ws.x)));
          total[4 * j + 3] = __fadd_rn(total[4 * j + 3], __fmul_rn(part[4 * j + 3], __fmul_rn(xs_hi, ws.y)));
        }
      } else {
        const float ws = wss[st], s_lo = __fmul_rn(xs_lo, ws), s_hi = __fmul_rn(xs_hi, ws);
#pragma unroll
        for (int j = 0; j < kBN / 8; ++j) {
          total[4 * j + 0] = __fadd_rn(total[4 * j + 0], __fmul_rn(part[4 * j + 0], s_lo));
          total[4 * j + 1] = __fadd_rn(total[4 * j + 1], __fmul_rn(part[4 * j + 1], s_lo));
          total[4 * j + 2] = __fadd_rn(total[4 * j + 2], __fmul_rn(part[4 * j + 2], s_hi));
          total[4 * j + 3] = __fadd_rn(total[4 * j + 3], __fmul_rn(part[4 * j + 3], s_hi));
        }
      }
    }
  }
  CpAsyncWait<0>();
  // d[4j + e]: activation row r_lo (e < 2) or r_hi, output 8j + 2t + e % 2.
#pragma unroll
  for (int j = 0; j < kBN / 8; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = e < 2 ? r_lo : r_hi, o = 8 * j + 2 * t + e % 2;
      if (r < rows_a && o < rows_b) y[(tok0 + r) * ldy + out0 + o] = RoundAct(total[4 * j + e], round_bf16);
    }
  }
}

template <int kWG, int kBN, int kStages>
Status Launch(const uint8_t* xq, const float* sx, int64_t m, const DevWeight& w, int64_t group, float* y, int64_t ldy,
              bool round_output, cudaStream_t s) {
  constexpr size_t smem = SmemBytes<kWG, kBN, kStages>();
  static const cudaError_t ready =
      cudaFuncSetAttribute(GemmFp8Kernel<kWG, kBN, kStages>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (ready != cudaSuccess) return Internal(std::string("cuda GemmFp8: shared memory: ") + cudaGetErrorString(ready));
  const int64_t ttiles = (m + Tile<kWG, kBN>::kRowsA - 1) / Tile<kWG, kBN>::kRowsA, otiles = (w.rows + kBN - 1) / kBN;
  if (ttiles * otiles > (int64_t{1} << 31) - 1) return InvalidArgument("cuda GemmFp8: too many output tiles for one launch");
  GemmFp8Kernel<kWG, kBN, kStages><<<static_cast<unsigned>(ttiles * otiles), Tile<kWG, kBN>::kThreads, smem, s>>>(
      xq, sx, m, w, group, y, ldy, round_output, static_cast<int>(ttiles));
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return Internal(std::string("cuda GemmFp8 launch: ") + cudaGetErrorString(err));
  return Status::Ok();
}

}  // namespace

bool GemmFp8Fits(const DevWeight& w, int64_t group) {
  if (!w.fp8() || w.rows <= 0 || w.cols <= 0 || w.cols % 16 != 0 || reinterpret_cast<uintptr_t>(w.data) % 16 != 0) {
    return false;
  }
  if (w.format == DevFormat::kFp8Channel) return group == w.cols;
  return group == w.group && group % kBK == 0;
}

Status GemmFp8(const uint8_t* xq, const float* sx, int64_t m, const DevWeight& w, int64_t group, float* y,
               int64_t ldy, bool round_output, void* stream) {
  if (!GemmFp8Fits(w, group) || m < 0 || ldy < w.rows || reinterpret_cast<uintptr_t>(xq) % 16 != 0) {
    return InvalidArgument("cuda GemmFp8: needs FP8 weights with K % 16 == 0, activation groups of 128k columns "
                           "(per channel: the row), 16-byte aligned codes");
  }
  if (m == 0) return Status::Ok();
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  // The same chain in every shape (above): the shape only sets how many rows and outputs share
  // a block — up to 64 rows (decode) narrow blocks of outputs, for many blocks streaming weights.
  if (m <= 64) return Launch<1, 32, 8>(xq, sx, m, w, group, y, ldy, round_output, s);
  return Launch<2, 128, 4>(xq, sx, m, w, group, y, ldy, round_output, s);
}

}  // namespace graft::cuda

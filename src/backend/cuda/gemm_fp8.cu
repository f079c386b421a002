#include "backend/cuda/gemm_fp8.h"

#include <cuda_runtime.h>

#include <string>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/mma_ptx.cuh"
#include "backend/cuda/wgmma_ptx.cuh"

namespace graft::cuda {
namespace {

// One kernel for every row count. The weights are wgmma's A operand: a warpgroup owns 64
// outputs, a block kWG warpgroups; the activation rows are its N, kBN a block (8 .. 128, by m).
// K streams through a ring of kStages stages of 128 columns — one 128-byte swizzled row per
// weight row and activation row (wgmma_ptx.h), copied by every thread with cp.async — and each
// output's chain is the same whatever the shape: wgmma m64nNk32 over the group's 32-column
// chunks in ascending order into `part` (the first chunk of a group starts it), then at the
// group's end total += part · (sx · sw).
constexpr int kBK = 128;  // K columns (bytes) a stage

template <int kWG, int kBN>
struct Tile {
  static constexpr int kThreads = 128 * kWG;
  static constexpr int kRowsA = 64 * kWG;
  static constexpr int kStageBytes = (kRowsA + kBN) * kBK;  // a multiple of 1024: every tile swizzle-aligned
  static constexpr int kCopies = (kRowsA + kBN) * (kBK / 16);
  static constexpr int kPer = (kCopies + kThreads - 1) / kThreads;  // 16-byte copies a thread and stage
};

template <int kWG, int kBN, int kStages>
constexpr size_t SmemBytes() {
  return 1024 + size_t{kStages} * Tile<kWG, kBN>::kStageBytes + size_t{kStages} * kBN * sizeof(float);
}

template <int kWG, int kBN, int kStages>
__global__ void __launch_bounds__(Tile<kWG, kBN>::kThreads, 1)
    GemmFp8Kernel(const uint8_t* __restrict__ xq, const float* __restrict__ sx, int64_t m, DevWeight w, int64_t group,
                  float* __restrict__ y, int64_t ldy, bool round_bf16, int ttiles) {
  using T = Tile<kWG, kBN>;
  extern __shared__ unsigned char raw[];
  // The stages 1024-byte aligned (the swizzle's period), then each stage's kBN activation scales.
  unsigned char* stages = raw + ((1024 - (SmemAddr(raw) & 1023)) & 1023);
  float* sxs = reinterpret_cast<float*>(stages + kStages * T::kStageBytes);
  const int64_t n = w.rows, k = w.cols, groups = (k + group - 1) / group;
  const auto* wq = static_cast<const uint8_t*>(w.data);
  const int64_t tok0 = int64_t{static_cast<int>(blockIdx.x) % ttiles} * kBN,
                out0 = int64_t{static_cast<int>(blockIdx.x) / ttiles} * T::kRowsA;
  const int tid = threadIdx.x, wg = tid / 128, warp = (tid / 32) % 4, lane = tid % 32, g = lane / 4, t = lane % 4;

  // Copies: thread tid takes the 16-byte chunk tid % 8 of stage rows tid / 8, + kThreads / 8, ...
  // (weight rows first, then activation rows); sources past N, m or K read nothing and zero-fill.
  const int chunk = tid % 8;
  const uint8_t* src[T::kPer];
  int dst[T::kPer];
  bool row_ok[T::kPer];
#pragma unroll
  for (int i = 0; i < T::kPer; ++i) {
    const int r = tid / 8 + i * (T::kThreads / 8);
    dst[i] = r < T::kRowsA + kBN ? SwizzledOffset(r, chunk) : -1;
    if (r < T::kRowsA) {
      row_ok[i] = out0 + r < n;
      src[i] = wq + (row_ok[i] ? (out0 + r) * k : 0) + chunk * 16;
    } else {
      row_ok[i] = tok0 + (r - T::kRowsA) < m;
      src[i] = xq + (row_ok[i] ? (tok0 + r - T::kRowsA) * k : 0) + chunk * 16;
    }
  }
  const bool sx_ok = tid < kBN && tok0 + tid < m;
  const float* sx_row = sx + (sx_ok ? (tok0 + tid) * groups : 0);
  auto load = [&](int st, int64_t k0) {
    unsigned char* base = stages + st * T::kStageBytes;
    const bool kin = k0 + chunk * 16 < k;
#pragma unroll
    for (int i = 0; i < T::kPer; ++i) {
      if (dst[i] >= 0) CpAsync16(base + dst[i], kin && row_ok[i] ? src[i] + k0 : src[i], kin && row_ok[i]);
    }
    if (tid < kBN) CpAsync4Zero(&sxs[st * kBN + tid], sx_row + (sx_ok ? k0 / group : 0), sx_ok);
  };

  // sw: fp8-block, one value for the warpgroup's 64 outputs a group (blocks are 128k wide);
  // per channel, one for each of this thread's two output rows.
  const int64_t o_lo = out0 + 64 * wg + 16 * warp + g, o_hi = o_lo + 8;
  const float* ws_block = w.format == DevFormat::kFp8Channel
                              ? nullptr
                              : w.scale + ((out0 + 64 * wg) / w.group) * ((k + w.group - 1) / w.group);
  const float ws_lo_ch = w.format == DevFormat::kFp8Channel && o_lo < n ? w.scale[o_lo] : 0.0f;
  const float ws_hi_ch = w.format == DevFormat::kFp8Channel && o_hi < n ? w.scale[o_hi] : 0.0f;

  float part[kBN / 2], total[kBN / 2];
#pragma unroll
  for (int i = 0; i < kBN / 2; ++i) part[i] = total[i] = 0.0f;

  const int64_t slices = (k + kBK - 1) / kBK;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < slices) load(s, int64_t{s} * kBK);
    CpAsyncCommit();
  }
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
    const float ws_block_g = ws_block != nullptr && ends ? ws_block[k0 / group] : 0.0f;
    WgmmaWait<0>();
    FenceAccumulators(part);
    if (ends) {  // the group ends: total += part · (sx · sw)
      const float ws_lo = ws_block != nullptr ? ws_block_g : ws_lo_ch, ws_hi = ws_block != nullptr ? ws_block_g : ws_hi_ch;
      const float* xs = sxs + st * kBN;
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j) {
        const float2 s = *reinterpret_cast<const float2*>(xs + 8 * j + 2 * t);
        total[4 * j + 0] = __fadd_rn(total[4 * j + 0], __fmul_rn(part[4 * j + 0], __fmul_rn(s.x, ws_lo)));
        total[4 * j + 1] = __fadd_rn(total[4 * j + 1], __fmul_rn(part[4 * j + 1], __fmul_rn(s.y, ws_lo)));
        total[4 * j + 2] = __fadd_rn(total[4 * j + 2], __fmul_rn(part[4 * j + 2], __fmul_rn(s.x, ws_hi)));
        total[4 * j + 3] = __fadd_rn(total[4 * j + 3], __fmul_rn(part[4 * j + 3], __fmul_rn(s.y, ws_hi)));
      }
    }
  }
  CpAsyncWait<0>();
#pragma unroll
  for (int j = 0; j < kBN / 8; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t r = tok0 + 8 * j + 2 * t + e % 2, o = e < 2 ? o_lo : o_hi;
      if (r < m && o < n) y[r * ldy + o] = RoundAct(total[4 * j + e], round_bf16);
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
  const int64_t ttiles = (m + kBN - 1) / kBN, otiles = (w.rows + 64 * kWG - 1) / (64 * kWG);
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
  // The same chain in every shape (above): the shape only sets how many rows share a block.
  if (m <= 8) return Launch<1, 8, 8>(xq, sx, m, w, group, y, ldy, round_output, s);
  if (m <= 16) return Launch<1, 16, 8>(xq, sx, m, w, group, y, ldy, round_output, s);
  if (m <= 32) return Launch<1, 32, 6>(xq, sx, m, w, group, y, ldy, round_output, s);
  if (m <= 64) return Launch<1, 64, 4>(xq, sx, m, w, group, y, ldy, round_output, s);
  return Launch<2, 128, 4>(xq, sx, m, w, group, y, ldy, round_output, s);
}

}  // namespace graft::cuda

#include "backend/cuda/gemm_fp8_prefill.h"

#include <cuda.h>
#include <cuda_runtime.h>

#include <string>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/gemm_fp8.h"
#include "backend/cuda/gemm_wgmma.h"
#include "backend/cuda/launched.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/tensor_map.h"
#include "backend/cuda/wgmma_ptx.cuh"

namespace graft::cuda {
namespace {

constexpr int kBM = 128;                         // activation rows a tile: two consumer warpgroups of 64
constexpr int kBN = 128;                         // outputs a tile: wgmma's N
constexpr int kBK = 128;                         // K columns (bytes) a stage: one swizzled row, one fp8-block group
constexpr int kABytes = kBM * kBK;               // 16 KB: a stage's activation tile (consumer c's half at c * 8 KB)
constexpr int kStageBytes = kABytes + kBN * kBK; // 32 KB (a multiple of 1024: the swizzle's period)
constexpr int kStages = 5;                       // 160 KB of ring
constexpr int kThreads = 384;                    // producer warpgroup + two consumers
constexpr int kProducerRegs = 40, kConsumerRegs = 232;
constexpr int kReleases = 8;                     // arrivals that free a slot: each consumer warp's lane 0
constexpr int kGroupM = 8;                       // row tiles a group of the visiting order
constexpr int kTotals = kBN / 2;                 // a consumer thread's outputs of a tile
constexpr size_t kFirstBytes = size_t{2} * 128 * kTotals * sizeof(float);  // the first halves' totals: 64 KB
constexpr size_t kSmem = 1024 + size_t{kStages} * kStageBytes + kFirstBytes + 2 * kStages * sizeof(uint64_t);

// kOneStage: every group one stage (fp8-block's 128-column groups), the two-part-set form; else a
// chain through one part set with promotions at group ends (per channel, wider groups). Two
// kernels, not one with both paths: ptxas spills registers where both are in one function.
template <bool kOneStage>
__global__ void __launch_bounds__(kThreads, 1)
    GemmFp8PrefillKernel(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_w,
                         const float* __restrict__ sx, int64_t m, DevWeight w, int64_t group, float* __restrict__ y,
                         int64_t ldy, bool round_bf16, int mtiles, int ntiles, bool halves) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  extern __shared__ unsigned char raw[];
  unsigned char* stages = raw + ((1024 - (SmemAddr(raw) & 1023)) & 1023);
  // Consumer thread i's (0..255) first-half total j at firsts[i + 256 j] (a warp on 32 banks).
  float* firsts = reinterpret_cast<float*>(stages + kStages * kStageBytes);
  uint64_t* full = reinterpret_cast<uint64_t*>(firsts + 2 * 128 * kTotals);  // a stage's two boxes landed
  uint64_t* empty = full + kStages;                                          // a slot read by both consumers
  const int tid = threadIdx.x, wg = tid / 128;
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) MbarInit(&full[s], 1), MbarInit(&empty[s], kReleases);
    FenceProxyAsync();
  }
  __syncthreads();
  const int64_t k = w.cols;
  const int slices = static_cast<int>((k + kBK - 1) / kBK), tiles = mtiles * ntiles;

  if (wg == 0) {  // the producer: a stage's activation and weight boxes
    SetMaxRegistersDec<kProducerRegs>();
    if (tid != 0) return;
    int it = 0;  // stages filled so far: slot it % kStages, its use it / kStages
    for (int id = blockIdx.x; id < tiles; id += gridDim.x) {
      int mt, nt;
      GroupedTile(id, mtiles, ntiles, kGroupM, mt, nt);
      for (int s = 0; s < slices; ++s, ++it) {
        const int slot = it % kStages;
        MbarWait(&empty[slot], ((it / kStages) & 1) ^ 1);  // the slot's previous use was read
        unsigned char* base = stages + slot * kStageBytes;
        MbarExpectTx(&full[slot], kStageBytes);
        TmaLoad2d(base, &map_x, s * kBK, mt * kBM, &full[slot]);
        TmaLoad2d(base + kABytes, &map_w, s * kBK, nt * kBN, &full[slot]);
      }
    }
    return;
  }

  SetMaxRegistersInc<kConsumerRegs>();
  const int c = wg - 1, warp = (tid % 128) / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int64_t n = w.rows, groups = (k + group - 1) / group;
  const bool channel = w.format == DevFormat::kFp8Channel;
  // Groups by countdown (gemm_fp8.cu): fp8-block's group is 128k columns, per channel the row.
  const int per_group = channel ? 0x7fffffff : static_cast<int>(group / kBK);
  // The stage K's second half starts at (Fp8KSplit's weights: gemm_fp8.cu's per_half); never without.
  const int second = halves ? (slices + 1) / 2 : slices + 1;
  float* my_first = firsts + (tid - 128);
  float total[kTotals];
  int it = 0;  // stages consumed before this tile (the producer's count)
  for (int id = blockIdx.x; id < tiles; id += gridDim.x, it += slices) {
    int mt, nt;
    GroupedTile(id, mtiles, ntiles, kGroupM, mt, nt);
    const int64_t tok0 = int64_t{mt} * kBM, out0 = int64_t{nt} * kBN;
    // This thread's activation rows and their scale rows (clamped to m - 1: rows past m are never
    // stored); fp8-block's weight scales: one a group for the tile (w.group is a multiple of kBN).
    const int r_lo = 64 * c + 16 * warp + g, r_hi = r_lo + 8;
    const float* sx_lo = sx + min(tok0 + r_lo, m - 1) * groups;
    const float* sx_hi = sx + min(tok0 + r_hi, m - 1) * groups;
    const float* ws_row = channel ? nullptr : w.scale + (out0 / w.group) * ((k + w.group - 1) / w.group);
#pragma unroll
    for (int i = 0; i < kTotals; ++i) total[i] = 0.0f;
    // total += part · (sx · sw) at a group's end: gemm_fp8.cu's promotion, the same operations.
    auto promote = [&](const float(&part)[kTotals], float xs_lo, float xs_hi, float ws) {
      if (channel) {
#pragma unroll
        for (int j = 0; j < kBN / 8; ++j) {
          const int64_t o = out0 + 8 * j + 2 * t;
          const float wx = o < n ? w.scale[o] : 0.0f, wy = o + 1 < n ? w.scale[o + 1] : 0.0f;
          total[4 * j + 0] = __fadd_rn(total[4 * j + 0], __fmul_rn(part[4 * j + 0], __fmul_rn(xs_lo, wx)));
          total[4 * j + 1] = __fadd_rn(total[4 * j + 1], __fmul_rn(part[4 * j + 1], __fmul_rn(xs_lo, wy)));
          total[4 * j + 2] = __fadd_rn(total[4 * j + 2], __fmul_rn(part[4 * j + 2], __fmul_rn(xs_hi, wx)));
          total[4 * j + 3] = __fadd_rn(total[4 * j + 3], __fmul_rn(part[4 * j + 3], __fmul_rn(xs_hi, wy)));
        }
      } else {
        const float s_lo = __fmul_rn(xs_lo, ws), s_hi = __fmul_rn(xs_hi, ws);
#pragma unroll
        for (int j = 0; j < kBN / 8; ++j) {
          total[4 * j + 0] = __fadd_rn(total[4 * j + 0], __fmul_rn(part[4 * j + 0], s_lo));
          total[4 * j + 1] = __fadd_rn(total[4 * j + 1], __fmul_rn(part[4 * j + 1], s_lo));
          total[4 * j + 2] = __fadd_rn(total[4 * j + 2], __fmul_rn(part[4 * j + 2], s_hi));
          total[4 * j + 3] = __fadd_rn(total[4 * j + 3], __fmul_rn(part[4 * j + 3], s_hi));
        }
      }
    };
    // The tile's stage i into part (the first chunk starts it when the stage starts a group),
    // issued once its boxes have landed; not waited for.
    auto issue = [&](float(&part)[kTotals], int i, bool starts) {
      const int u = it + i, slot = u % kStages;
      MbarWait(&full[slot], (u / kStages) & 1);
      const unsigned char* base = stages + slot * kStageBytes;
      const uint64_t da = SwizzledTileDesc(base + c * (kABytes / 2)), db = SwizzledTileDesc(base + kABytes);
      WgmmaFence();
#pragma unroll
      for (int kk = 0; kk < kBK / 32; ++kk) {  // columns past K are zeros in both tiles: they add 0
        WgmmaE4m3<kBN>(part, da + 2 * kk, db + 2 * kk, starts && kk == 0 ? 0 : 1);
      }
      WgmmaCommit();
    };
    // Stage i's products are in (the caller waited): this warp is done with its slot.
    auto release = [&](int i) {
      if (lane == 0) MbarArrive(&empty[(it + i) % kStages]);
    };

    if constexpr (kOneStage) {
      // Every stage a whole group: two part sets, stage i + 1's products on the tensor cores
      // while stage i's are promoted. K's second half (halves) starts its total from zero, the
      // first half's kept in shared memory until the end.
      float pa[kTotals], pb[kTotals];
      auto finish = [&](float(&part)[kTotals], int i, float xs_lo, float xs_hi, float ws) {
        FenceAccumulators(part);
        release(i);
        if (i == second) {
#pragma unroll
          for (int j = 0; j < kTotals; ++j) my_first[256 * j] = total[j], total[j] = 0.0f;
        }
        promote(part, xs_lo, xs_hi, ws);
      };
      float a_lo = sx_lo[0], a_hi = sx_hi[0], a_ws = ws_row[0], b_lo = 0.0f, b_hi = 0.0f, b_ws = 0.0f;
      issue(pa, 0, true);
      int i = 1;
      for (; i + 1 < slices; i += 2) {
        b_lo = sx_lo[i], b_hi = sx_hi[i], b_ws = ws_row[i];
        issue(pb, i, true);
        WgmmaWait<1>();
        finish(pa, i - 1, a_lo, a_hi, a_ws);
        a_lo = sx_lo[i + 1], a_hi = sx_hi[i + 1], a_ws = ws_row[i + 1];
        issue(pa, i + 1, true);
        WgmmaWait<1>();
        finish(pb, i, b_lo, b_hi, b_ws);
      }
      if (i < slices) {  // an even count: the last stage into pb
        b_lo = sx_lo[i], b_hi = sx_hi[i], b_ws = ws_row[i];
        issue(pb, i, true);
        WgmmaWait<1>();
        finish(pa, i - 1, a_lo, a_hi, a_ws);
        WgmmaWait<0>();
        finish(pb, i, b_lo, b_hi, b_ws);
      } else {
        WgmmaWait<0>();
        finish(pa, i - 1, a_lo, a_hi, a_ws);
      }
      if (halves) {  // first + second, once (gemm_fp8.cu's exchange between a cluster's two blocks)
#pragma unroll
        for (int j = 0; j < kTotals; ++j) total[j] = __fadd_rn(my_first[256 * j], total[j]);
      }
    } else {
      // Groups of several stages (per channel: the whole row): one chain through `part`; inside a
      // group stage i's products queue behind stage i - 1's and only stage i - 1 is waited for, to
      // free its slot; a group's end waits for all.
      float part[kTotals];
      int left = per_group, gi = 0;
      bool prev_open = false;  // stage i - 1 issued, its slot not yet released
      for (int i = 0; i < slices; ++i) {
        const bool starts = left == per_group, ends = left == 1 || i + 1 == slices;
        float xs_lo = 0.0f, xs_hi = 0.0f, ws = 0.0f;  // the scales this group ends with, loaded early
        if (ends) {
          xs_lo = sx_lo[gi];
          xs_hi = sx_hi[gi];
          if (!channel) ws = ws_row[gi];
        }
        issue(part, i, starts);
        if (ends) {
          WgmmaWait<0>();
          FenceAccumulators(part);
          if (prev_open) release(i - 1);
          release(i);
          promote(part, xs_lo, xs_hi, ws);
          prev_open = false;
          left = per_group;
          ++gi;
        } else {
          WgmmaWait<1>();
          if (prev_open) release(i - 1);
          prev_open = true;
          --left;
        }
      }
    }
    // total[4j + e]: activation row r_lo (e < 2) or r_hi, output 8j + 2t + e % 2.
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t r = tok0 + (e < 2 ? r_lo : r_hi), o = out0 + 8 * j + 2 * t + e % 2;
        if (r < m && o < n) y[r * ldy + o] = RoundAct(total[4 * j + e], round_bf16);
      }
    }
  }
}

}  // namespace

bool GemmFp8PrefillFits(int64_t m, const DevWeight& w, int64_t group) {
  return m >= 1 && m <= (int64_t{1} << 30) && w.rows <= (int64_t{1} << 30) && GemmFp8Fits(w, group) &&
         (w.format != DevFormat::kFp8Block || w.group % kBN == 0);
}

Status GemmFp8Prefill(const uint8_t* xq, const float* sx, int64_t m, const DevWeight& w, int64_t group, float* y,
                      int64_t ldy, bool round_output, void* stream) {
  if (!GemmFp8PrefillFits(m, w, group) || ldy < w.rows || y == nullptr || reinterpret_cast<uintptr_t>(xq) % 16 != 0) {
    return InvalidArgument("cuda GemmFp8Prefill: needs m >= 1, ldy >= N, FP8 weights with K % 16 == 0, activation "
                           "groups of 128k columns (per channel: the row), fp8-block weight blocks of 128k rows and "
                           "16-byte aligned codes");
  }
  const bool one_stage = w.format == DevFormat::kFp8Block && group == kBK;
  static const cudaError_t ready[2] = {
      cudaFuncSetAttribute(GemmFp8PrefillKernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmem)),
      cudaFuncSetAttribute(GemmFp8PrefillKernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmem))};
  if (ready[one_stage] != cudaSuccess) {
    return Internal(std::string("cuda GemmFp8Prefill: shared memory: ") + cudaGetErrorString(ready[one_stage]));
  }
  const int64_t mtiles = (m + kBM - 1) / kBM, ntiles = (w.rows + kBN - 1) / kBN;
  if (mtiles * ntiles > (int64_t{1} << 31) - 1 || kGroupM * ntiles > (int64_t{1} << 30)) {
    return InvalidArgument("cuda GemmFp8Prefill: too many tiles for one launch");
  }
  CUtensorMap map_x, map_w;
  GRAFT_RETURN_IF_ERROR(EncodeSwizzled128(&map_x, xq, 1, m, w.cols, kBK, kBM, "GemmFp8Prefill"));
  GRAFT_RETURN_IF_ERROR(EncodeSwizzled128(&map_w, w.data, 1, w.rows, w.cols, kBK, kBN, "GemmFp8Prefill"));
  const int sms = WgmmaMultiprocessors();
  const int64_t tiles = mtiles * ntiles;
  const unsigned grid = static_cast<unsigned>(sms > 0 && tiles > sms ? sms : tiles);
  LaunchSerialized(one_stage ? GemmFp8PrefillKernel<true> : GemmFp8PrefillKernel<false>, grid, kThreads, kSmem,
                   static_cast<cudaStream_t>(stream), map_x, map_w, sx, m, w, group, y, ldy, round_output,
                   static_cast<int>(mtiles), static_cast<int>(ntiles), Fp8KSplit(w, group));
  return Launched("GemmFp8Prefill");
}

}  // namespace graft::cuda

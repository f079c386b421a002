#include "backend/cuda/gemm_fp8_prefill.h"

#include <cuda.h>
#include <cuda_runtime.h>

#include <string>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/fp8_chain.cuh"
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
static_assert(kBK == 128, "fp8::StageChunks takes stages of four 32-column chunks");
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
    // total += part · (sx · sw) at a group's end (fp8_chain.cuh); per channel each output's scale.
    auto promote = [&](const float(&part)[kTotals], float xs_lo, float xs_hi, float ws) {
      if (channel) {
        fp8::PromoteChannel(total, part, xs_lo, xs_hi, [&](int j) {
          const int64_t o = out0 + 8 * j + 2 * t;
          return make_float2(o < n ? w.scale[o] : 0.0f, o + 1 < n ? w.scale[o + 1] : 0.0f);
        });
      } else {
        fp8::PromoteBlock(total, part, xs_lo, xs_hi, ws);
      }
    };
    // The tile's stage i into part (the first chunk starts it when the stage starts a group),
    // issued once its boxes have landed; not waited for.
    auto issue = [&](float(&part)[kTotals], int i, bool starts) {
      const int u = it + i, slot = u % kStages;
      MbarWait(&full[slot], (u / kStages) & 1);
      const unsigned char* base = stages + slot * kStageBytes;
      fp8::StageChunks(part, base + c * (kABytes / 2), base + kABytes, starts);
    };
    // Stage i's products are in (the caller waited): this warp is done with its slot.
    auto release = [&](int i) {
      if (lane == 0) MbarArrive(&empty[(it + i) % kStages]);
    };

    if constexpr (kOneStage) {
      // K's second half (halves) starts its total from zero, the first half's kept in shared
      // memory until the end.
      fp8::OneStageGroups<kTotals>(slices, sx_lo, sx_hi, ws_row, issue,
                                   [&](float(&part)[kTotals], int i, float xs_lo, float xs_hi, float ws) {
                                     FenceAccumulators(part);
                                     release(i);
                                     if (i == second) {
#pragma unroll
                                       for (int j = 0; j < kTotals; ++j) my_first[256 * j] = total[j], total[j] = 0.0f;
                                     }
                                     promote(part, xs_lo, xs_hi, ws);
                                   });
      if (halves) {  // first + second, once (gemm_fp8.cu's exchange between a cluster's two blocks)
#pragma unroll
        for (int j = 0; j < kTotals; ++j) total[j] = __fadd_rn(my_first[256 * j], total[j]);
      }
    } else {
      fp8::MultiStageGroups<kTotals>(slices, per_group, channel, sx_lo, sx_hi, ws_row, issue, release, promote);
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
  // GemmFp8Fits takes fp8-block only with groups of 128k columns and rows (w.group), so a tile's
  // 128 outputs share one block scale a group.
  static_assert(kBN == 128, "a tile's outputs inside one fp8-block weight block");
  return m >= 1 && m <= (int64_t{1} << 30) && w.rows <= (int64_t{1} << 30) && GemmFp8Fits(w, group);
}

Status GemmFp8Prefill(const uint8_t* xq, const float* sx, int64_t m, const DevWeight& w, int64_t group, float* y,
                      int64_t ldy, bool round_output, void* stream) {
  if (!GemmFp8PrefillFits(m, w, group) || ldy < w.rows || y == nullptr || reinterpret_cast<uintptr_t>(xq) % 16 != 0) {
    return InvalidArgument("cuda GemmFp8Prefill: needs m >= 1, ldy >= N, FP8 weights with K % 16 == 0, activation "
                           "groups of 128k columns (per channel: the row) and 16-byte aligned codes");
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

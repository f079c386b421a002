#include "backend/cuda/gemm_wgmma_w4.h"

#include <cuda.h>
#include <cuda_runtime.h>

#include <string>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/gemm_decode_w4.h"
#include "backend/cuda/gemm_wgmma.h"
#include "backend/cuda/int4_lanes.h"
#include "backend/cuda/launched.h"
#include "backend/cuda/nvfp4_table.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/tensor_map.h"
#include "backend/cuda/w4_fragments.cuh"
#include "backend/cuda/wgmma_ptx.cuh"

namespace graft::cuda {
namespace {

using w4::W4Kind;

constexpr int kTileRows = 128;                     // weight rows a tile: 64 a consumer warpgroup (wgmma's M)
constexpr int kTileX = 128;                        // rows of x a tile: wgmma's N
constexpr int kStageK = kInt4LaneBlock;            // K columns a stage: one lane-order block
constexpr int kBoxK = 64;                          // K columns a TMA box: one 128-byte swizzled row
constexpr int kBoxBytes = kTileX * kBoxK * 2;      // 16 KB (a multiple of 1024: the swizzle's period)
constexpr int kStageBytes = 2 * kBoxBytes;
constexpr int kStages = 5;                         // 160 KB of ring
constexpr int kThreads = 384;                      // producer warpgroup + two consumers
constexpr int kProducerRegs = 40, kConsumerRegs = 232;
constexpr int kReleases = 8;                       // arrivals that free a slot: each consumer warp's lane 0
constexpr int kDepth = 2;                          // weight stages a lane has in flight past the one it computes
constexpr int kGroupX = 8;                         // x tiles a group of the visiting order
constexpr int kSliceStages = static_cast<int>(kW4SliceColumns / kStageK);
static_assert(kW4SliceColumns % kStageK == 0 && kSliceStages % kDepth == 0, "a slice is whole stages, whole rings");
constexpr size_t kSmem = 1024 + size_t{kStages} * kStageBytes + 2 * kStages * sizeof(uint64_t) +
                         kNvfp4TableEntries * sizeof(Nvfp4Entry);

// Tile `id` of the grouped order (GroupedTile: groups of kGroupX x tiles, x fastest inside a
// group, so that the blocks in flight share a weight tile and a few x tiles through the L2).
__device__ __forceinline__ void TileOf(int id, int xtiles, int wtiles, int& x0, int& w0) {
  int xt, wt;
  GroupedTile(id, xtiles, wtiles, kGroupX, xt, wt);
  x0 = xt * kTileX;
  w0 = wt * kTileRows;
}

// A lane's two weight rows of a tile (rows past N read row N - 1: loaded, never written).
struct LaneRows {
  const uint4 *lo, *hi;        // the lane's 16 bytes of the first stage (lane words 4t .. 4t + 3)
  const uint32_t *slo, *shi;   // the rows' scale words from column 0
};

template <W4Kind kKind, int kSw>
__global__ void __launch_bounds__(kThreads, 1)
    GemmWgmmaW4Kernel(const __grid_constant__ CUtensorMap map_x, int64_t m, DevWeight dw, float* __restrict__ y,
                      int64_t ldy, bool round_bf16, int xtiles, int wtiles) {
  constexpr bool kFp4 = kKind == W4Kind::kNvfp4;
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  extern __shared__ unsigned char raw[];
  unsigned char* stages = raw + ((1024 - (SmemAddr(raw) & 1023)) & 1023);
  uint64_t* full = reinterpret_cast<uint64_t*>(stages + kStages * kStageBytes);  // x's boxes landed
  uint64_t* empty = full + kStages;                                             // slot read by both consumers
  Nvfp4Entry* tab = reinterpret_cast<Nvfp4Entry*>(empty + kStages);             // 16-byte aligned (2 kStages words)
  const int tid = threadIdx.x, wg = tid / 128;
  if constexpr (kFp4) {
    for (int i = tid; i < kNvfp4TableEntries; i += kThreads) tab[i] = dw.nvfp4_table[i];
  }
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) MbarInit(&full[s], 1), MbarInit(&empty[s], kReleases);
    FenceProxyAsync();
  }
  __syncthreads();
  const int64_t k = dw.cols;
  const int kstages = static_cast<int>(k / kStageK), tiles = xtiles * wtiles;

  if (wg == 0) {  // the producer: x's two boxes a stage
    SetMaxRegistersDec<kProducerRegs>();
    if (tid != 0) return;
    int it = 0;  // stages filled so far: slot it % kStages, its use it / kStages
    for (int id = blockIdx.x; id < tiles; id += gridDim.x) {
      int x0, w0;
      TileOf(id, xtiles, wtiles, x0, w0);
      for (int s = 0; s < kstages; ++s, ++it) {
        const int slot = it % kStages;
        MbarWait(&empty[slot], ((it / kStages) & 1) ^ 1);  // the slot's previous use was read
        unsigned char* base = stages + slot * kStageBytes;
        MbarExpectTx(&full[slot], kStageBytes);
        TmaLoad2d(base, &map_x, s * kStageK, x0, &full[slot]);
        TmaLoad2d(base + kBoxBytes, &map_x, s * kStageK + kBoxK, x0, &full[slot]);
      }
    }
    return;
  }

  SetMaxRegistersInc<kConsumerRegs>();
  const int c = wg - 1, warp = (tid % 128) / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int64_t n = dw.rows, last = n - 1;
  const int glog = kFp4 ? 4 : 31 - __clz(dw.group);
  auto rows_of = [&](int w0, LaneRows& r) {
    const int64_t base = int64_t{w0} + 64 * c + 16 * warp + g;
    const int64_t rl = base < last ? base : last, rh = base + 8 < last ? base + 8 : last;
    const auto* data = static_cast<const unsigned char*>(dw.data);
    r.lo = reinterpret_cast<const uint4*>(data + rl * (k / 2)) + t;
    r.hi = reinterpret_cast<const uint4*>(data + rh * (k / 2)) + t;
    if constexpr (kFp4) {
      r.slo = reinterpret_cast<const uint32_t*>(dw.scale_fp8 + rl * (k / 16));
      r.shi = reinterpret_cast<const uint32_t*>(dw.scale_fp8 + rh * (k / 16));
    } else {
      r.slo = reinterpret_cast<const uint32_t*>(dw.scale) + rl * (k >> glog);
      r.shi = reinterpret_cast<const uint32_t*>(dw.scale) + rh * (k >> glog);
    }
  };
  // Stage s of the rows: their 16 bytes at column 128 s, and the scale words of its columns
  // (NVFP4: eight e4m3 codes; int4: kSw scales, or with groups of >= 128 columns the group of the
  // stage's first column) — gemm_decode_w4.cu's loads.
  auto load = [&](w4::Stage<kSw>& st, const LaneRows& r, int s) {
    st.lo = w4::LdStream(r.lo + 4 * s);
    st.hi = w4::LdStream(r.hi + 4 * s);
    const int64_t off = kFp4 ? 2 * s : kSw > 1 ? int64_t{kSw} * s : (int64_t{kStageK} * s) >> glog;
    w4::LdWords<kSw>(r.slo + off, st.slo);
    w4::LdWords<kSw>(r.shi + off, st.shi);
  };

  // The ring holds stage s in ring[s % kDepth]. Where a tile's stages are a multiple of kDepth,
  // the loads past a tile's last stage are the next tile's first ones (the ring carries over);
  // otherwise each tile starts its ring afresh.
  const bool carry = kstages % kDepth == 0;
  w4::Stage<kSw> ring[kDepth];
  bool ring_ready = false;
  float acc[kTileX / 2], total[kTileX / 2];
  unsigned frag[2][2][4];  // two register sets of a 32-column step's A fragments (K16 steps h = 0, 1)
  int it = 0;              // stages consumed so far (the producer's count)
  for (int id = blockIdx.x; id < tiles; id += gridDim.x) {
    int x0, w0;
    TileOf(id, xtiles, wtiles, x0, w0);
    LaneRows cur, nxt{};
    rows_of(w0, cur);
    const int nid = id + static_cast<int>(gridDim.x);
    if (nid < tiles) {
      int nx0, nw0;
      TileOf(nid, xtiles, wtiles, nx0, nw0);
      rows_of(nw0, nxt);
    }
    if (!ring_ready) {
#pragma unroll
      for (int i = 0; i < kDepth; ++i) {
        if (i < kstages) load(ring[i], cur, i);
      }
    }
    ring_ready = carry && nid < tiles;
#pragma unroll
    for (int i = 0; i < kTileX / 2; ++i) acc[i] = 0.0f;
    int prev = -1;  // the slot whose products may still be in flight
    for (int s0 = 0; s0 < kstages; s0 += kSliceStages) {  // one slice: its chain from zero
      const int ns = min(kSliceStages, kstages - s0);
#pragma unroll
      for (int i = 0; i < kSliceStages; ++i) {
        if (i < ns) {
          const int s = s0 + i;
          const w4::Stage<kSw> st = ring[i % kDepth];  // s % kDepth == i % kDepth: slices are whole rings
          if (s + kDepth < kstages) {
            load(ring[i % kDepth], cur, s + kDepth);
          } else if (ring_ready) {
            load(ring[i % kDepth], nxt, s + kDepth - kstages);
          }
          const int slot = it % kStages;
          MbarWait(&full[slot], (it / kStages) & 1);
          const unsigned char* base = stages + slot * kStageBytes;
          const uint64_t d0 = SwizzledTileDesc(base), d1 = SwizzledTileDesc(base + kBoxBytes);
#pragma unroll
          for (int b = 0; b < 4; ++b) {
            // Columns 32 b .. 32 b + 31 of the stage: box b / 2, its 32-byte chunks 2 (b % 2) and + 1.
            unsigned(&a)[2][4] = frag[b % 2];
            w4::Fragments<kKind, kSw>(st, b, tab, a);
            const uint64_t db = (b < 2 ? d0 : d1) + 4 * (b % 2);
            WgmmaFence();
            WgmmaBf16Regs<kTileX>(acc, a[0], db);
            WgmmaBf16Regs<kTileX>(acc, a[1], db + 2);
            WgmmaCommit();
            WgmmaWait<1>();  // the step before is done: its register set is free again
            if (b == 0 && prev >= 0) {  // ... and with it the stage before: its slot goes back
              if (lane == 0) MbarArrive(&empty[prev]);
              prev = -1;
            }
          }
          prev = slot;
          ++it;
        }
      }
      // The slice's end: its chain into the running sum, the next slice's from zero.
      WgmmaWait<0>();
      FenceAccumulators(acc);
      if (prev >= 0) {
        if (lane == 0) MbarArrive(&empty[prev]);
        prev = -1;
      }
      FoldSlice(total, acc, s0 == 0);
#pragma unroll
      for (int i = 0; i < kTileX / 2; ++i) acc[i] = 0.0f;
    }
    // total[4j + e]: weight row 16 warp + g (e < 2) or + 8, x row 8j + 2t + e % 2 (wgmma_ptx.cuh).
    const int64_t r_lo = int64_t{w0} + 64 * c + 16 * warp + g, r_hi = r_lo + 8;
#pragma unroll
    for (int j = 0; j < kTileX / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int64_t xr = int64_t{x0} + 8 * j + 2 * t + e;
        if (xr >= m) continue;
        float* row = y + xr * ldy;
        if (r_lo <= last) row[r_lo] = RoundAct(total[4 * j + e], round_bf16);
        if (r_hi <= last) row[r_hi] = RoundAct(total[4 * j + 2 + e], round_bf16);
      }
    }
  }
}

template <W4Kind kKind, int kSw>
Status Launch(const CUtensorMap& map_x, int64_t m, const DevWeight& w, float* y, int64_t ldy, bool round_output,
              int xtiles, int wtiles, cudaStream_t s) {
  static const cudaError_t ready = cudaFuncSetAttribute(GemmWgmmaW4Kernel<kKind, kSw>,
                                                        cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmem));
  if (ready != cudaSuccess) return Internal(std::string("cuda GemmWgmmaW4: shared memory: ") + cudaGetErrorString(ready));
  const int sms = WgmmaMultiprocessors();
  const int64_t tiles = int64_t{xtiles} * wtiles;
  const unsigned grid = static_cast<unsigned>(sms > 0 && tiles > sms ? sms : tiles);
  LaunchSerialized(GemmWgmmaW4Kernel<kKind, kSw>, grid, kThreads, kSmem, s, map_x, m, w, y, ldy, round_output, xtiles,
                   wtiles);
  return Launched("GemmWgmmaW4");
}

}  // namespace

bool GemmWgmmaW4Fits(int64_t m, const DevWeight& w, const void* xb) {
  return m >= 1 && m <= (int64_t{1} << 31) - 1 && W4LanesFit(w) && w.rows <= (int64_t{1} << 31) - 1 &&
         reinterpret_cast<uintptr_t>(xb) % 16 == 0;
}

Status GemmWgmmaW4(const uint16_t* xb, int64_t m, const DevWeight& w, float* y, int64_t ldy, bool round_output,
                   void* stream) {
  if (!GemmWgmmaW4Fits(m, w, xb) || ldy < w.rows || y == nullptr) {
    return InvalidArgument("cuda GemmWgmmaW4: needs m >= 1, ldy >= N, a 4-bit weight in lane order (N % 8 == 0, "
                           "K % 128 == 0, symmetric int4 groups of 2^j >= 32 columns or NVFP4 with its table) and "
                           "16-byte aligned operands");
  }
  const int64_t xtiles = (m + kTileX - 1) / kTileX, wtiles = (w.rows + kTileRows - 1) / kTileRows;
  if (xtiles * wtiles > (int64_t{1} << 31) - 1 || kGroupX * wtiles > (int64_t{1} << 30)) {
    return InvalidArgument("cuda GemmWgmmaW4: too many tiles for one launch");
  }
  CUtensorMap map_x;
  GRAFT_RETURN_IF_ERROR(EncodeSwizzled128(&map_x, xb, 2, m, w.cols, kBoxK, kTileX, "GemmWgmmaW4"));
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const int xt = static_cast<int>(xtiles), wt = static_cast<int>(wtiles);
  if (w.format == DevFormat::kNvfp4) return Launch<W4Kind::kNvfp4, 2>(map_x, m, w, y, ldy, round_output, xt, wt, s);
  const int kw = w.group >= kStageK ? 1 : w.group == 64 ? 2 : 4;  // int4 scale words a stage
  if (w.scale_bf16) {
    return kw == 1   ? Launch<W4Kind::kInt4Bf16Scale, 1>(map_x, m, w, y, ldy, round_output, xt, wt, s)
           : kw == 2 ? Launch<W4Kind::kInt4Bf16Scale, 2>(map_x, m, w, y, ldy, round_output, xt, wt, s)
                     : Launch<W4Kind::kInt4Bf16Scale, 4>(map_x, m, w, y, ldy, round_output, xt, wt, s);
  }
  return kw == 1   ? Launch<W4Kind::kInt4F32Scale, 1>(map_x, m, w, y, ldy, round_output, xt, wt, s)
         : kw == 2 ? Launch<W4Kind::kInt4F32Scale, 2>(map_x, m, w, y, ldy, round_output, xt, wt, s)
                   : Launch<W4Kind::kInt4F32Scale, 4>(map_x, m, w, y, ldy, round_output, xt, wt, s);
}

}  // namespace graft::cuda

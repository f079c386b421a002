#include "backend/cuda/gemm_wgmma.h"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/launched.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/tensor_map.h"
#include "backend/cuda/wgmma_ptx.cuh"

namespace graft::cuda {
namespace {

constexpr int kBM = 128;                   // tile rows: two consumer warpgroups of 64
constexpr int kBK = 64;                    // K columns a stage: one 128-byte swizzled row
constexpr int kThreads = 384;              // producer warpgroup + two consumers
constexpr int kGroupM = 8;                 // row tiles per group of the visiting order
constexpr int kProducerRegs = 40, kConsumerRegs = 232;
constexpr int kABytes = kBM * kBK * 2;     // a stage's activation tile
constexpr int kHalfABytes = kABytes / 2;   // one consumer's 64 rows (a multiple of 1024)
constexpr int kReleases = 8;               // arrivals that free a slot: each consumer warp's lane 0

template <int kBN>
struct Shape {
  static constexpr int kBBytes = kBN * kBK * 2;
  static constexpr int kStageBytes = kABytes + kBBytes;  // a multiple of 1024 (the swizzle's period)
  static constexpr int kStages = kBN >= 256 ? 4 : kBN == 160 ? 5 : 6;  // 192 (200 at 272), 180, 192 KB of ring
  static constexpr size_t kSmem = 1024 + size_t{kStages} * kStageBytes + 2 * kStages * sizeof(uint64_t);
};

// The fused LoRA segments of a GemmWgmmaLora launch (a kernel parameter: the tensor maps must
// live in parameter, constant or global memory for TMA). t[i]: the rows' bf16 t [m, rank], boxes
// of 128 rows; b[i]: B [cols, rank], boxes of a tile's width; ksteps: rank's 64-wide stages.
struct LoraSegs {
  CUtensorMap t[kWgmmaMaxLoraSegments];
  CUtensorMap b[kWgmmaMaxLoraSegments];
  int col_begin[kWgmmaMaxLoraSegments], col_end[kWgmmaMaxLoraSegments], ksteps[kWgmmaMaxLoraSegments];
  float scale[kWgmmaMaxLoraSegments];
  int count;
  const int32_t* row_slot;  // null: every row takes the deltas; else those whose entry is `slot`
  int32_t slot;
};

// The segment holding the tile that starts at col0 (the host made every tile lie in one or none).
__device__ __forceinline__ int SegmentOf(const LoraSegs& l, int col0) {
  for (int i = 0; i < l.count; ++i) {
    if (col0 >= l.col_begin[i] && col0 < l.col_end[i]) return i;
  }
  return -1;
}

// Tile `id` of the grouped order: groups of kGroupM row tiles, rows fastest inside a group, so
// that the tiles in flight share a few weight tiles through the L2.
__device__ __forceinline__ void TileAt(int id, int mtiles, int ntiles, int& row0, int& col0, int bn) {
  const int per_group = kGroupM * ntiles, group = id / per_group, first = group * kGroupM;
  const int gsize = min(kGroupM, mtiles - first), in = id % per_group;
  row0 = (first + in % gsize) * kBM;
  col0 = (in / gsize) * bn;
}

// kSwiGlu (kBN 256 or 272): a tile's B rows are two boxes of kBN / 2 rows, gate rows [col0, col0 +
// kBN / 2) and up rows [up_row + col0, ...) of w (one wgmma over both at 256, one a box at 272), and the epilogue writes act[r][col0 + c] (bf16, ldy apart) =
// SiluMul's arithmetic on the two rounded outputs; n is then the activation's width (the up rows'
// offset). Otherwise y (fp32) gets the products as they are or rounded. kLora (round_bf16 then
// true): a tile inside a segment of `lora` runs the segment's rank stages after K's into a second
// accumulator and writes r(r(base) + r(r(delta) · scale)) (GemmWgmmaLora).
template <int kBN, bool kSwiGlu, bool kLora>
__global__ void __launch_bounds__(kThreads, 1)
    GemmWgmmaKernel(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_w, int64_t m,
                    int64_t n, int64_t k, void* __restrict__ yv, int64_t ldy, bool round_bf16, bool vec2, int mtiles,
                    int ntiles, const __grid_constant__ LoraSegs lora, int slice_steps) {
  static_assert(!kSwiGlu || kBN == 256 || kBN == 272, "the gated form pairs two 128- or 136-row boxes");
  static_assert(!(kSwiGlu && kLora), "the gated form takes no LoRA delta");
  constexpr int kColsOut = kSwiGlu ? kBN / 2 : kBN;  // output columns a tile
  using S = Shape<kBN>;
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  extern __shared__ unsigned char raw[];
  unsigned char* stages = raw + ((1024 - (SmemAddr(raw) & 1023)) & 1023);
  uint64_t* full = reinterpret_cast<uint64_t*>(stages + S::kStages * S::kStageBytes);  // copies landed
  uint64_t* empty = full + S::kStages;                                                  // slot read by both consumers
  const int tid = threadIdx.x, wg = tid / 128;
  if (tid == 0) {
    for (int s = 0; s < S::kStages; ++s) MbarInit(&full[s], 1), MbarInit(&empty[s], kReleases);
    FenceProxyAsync();
  }
  __syncthreads();
  // slice_steps > 0 (the split form): K in slices of that many stages, each tile of each slice
  // its own item (slice-major), its product from zero into its slice's outputs.
  const int tiles = mtiles * ntiles, all_steps = static_cast<int>((k + kBK - 1) / kBK);
  const int slices = slice_steps > 0 ? (all_steps + slice_steps - 1) / slice_steps : 1, items = tiles * slices;
  auto slice_of = [&](int id, int& kb0) {  // the item's tile, its first K stage and stage count
    const int sl = id / tiles;
    kb0 = slice_steps > 0 ? sl * slice_steps : 0;
    return slice_steps > 0 ? min(all_steps - kb0, slice_steps) : all_steps;
  };

  if (wg == 0) {
    SetMaxRegistersDec<kProducerRegs>();
    if (tid != 0) return;
    int it = 0;  // stages filled so far: slot it % kStages, its use (it / kStages)
    for (int id = blockIdx.x; id < items; id += gridDim.x) {
      int row0, col0, kb0;
      TileAt(id % tiles, mtiles, ntiles, row0, col0, kColsOut);
      const int ksteps = slice_of(id, kb0);
      const int seg = kLora ? SegmentOf(lora, col0) : -1, steps = ksteps + (seg >= 0 ? lora.ksteps[seg] : 0);
      for (int kb = 0; kb < steps; ++kb, ++it) {
        const int s = it % S::kStages;
        MbarWait(&empty[s], ((it / S::kStages) & 1) ^ 1);  // the slot's previous use was read
        unsigned char* base = stages + s * S::kStageBytes;
        MbarExpectTx(&full[s], S::kStageBytes);
        if (kLora && kb >= ksteps) {  // the delta's stages: t's rows and B's, rank chunk by chunk
          const int r0 = (kb - ksteps) * kBK;
          TmaLoad2d(base, &lora.t[seg], r0, row0, &full[s]);
          TmaLoad2d(base + kABytes, &lora.b[seg], r0, col0 - lora.col_begin[seg], &full[s]);
          continue;
        }
        const int kc = (kb0 + kb) * kBK;
        TmaLoad2d(base, &map_x, kc, row0, &full[s]);
        if constexpr (kSwiGlu) {
          TmaLoad2d(base + kABytes, &map_w, kc, col0, &full[s]);
          TmaLoad2d(base + kABytes + S::kBBytes / 2, &map_w, kc, static_cast<int>(n) + col0, &full[s]);
        } else {
          TmaLoad2d(base + kABytes, &map_w, kc, col0, &full[s]);
        }
      }
    }
    return;
  }

  SetMaxRegistersInc<kConsumerRegs>();
  const int c = wg - 1, warp = (tid % 128) / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  float acc[kBN / 2];
  unsigned based[kBN / 4];  // kLora: the base product's rounded outputs, bf16 pairs
  int it = 0;
  for (int id = blockIdx.x; id < items; id += gridDim.x) {
    int row0, col0, kb0;
    TileAt(id % tiles, mtiles, ntiles, row0, col0, kColsOut);
    const int ksteps = slice_of(id, kb0);
    const int seg = kLora ? SegmentOf(lora, col0) : -1, steps = ksteps + (seg >= 0 ? lora.ksteps[seg] : 0);
#pragma unroll
    for (int i = 0; i < kBN / 2; ++i) acc[i] = 0.0f;
    int prev = -1;  // the slot whose products are still in flight
    for (int kb = 0; kb < steps; ++kb, ++it) {
      if constexpr (kLora) {
        if (kb == ksteps) {  // the base product is done: keep it rounded, start the delta's chain at zero
          WgmmaWait<0>();
          FenceAccumulators(acc);
          if (lane == 0) MbarArrive(&empty[prev]);
          prev = -1;
#pragma unroll
          for (int i = 0; i < kBN / 4; ++i) based[i] = PackBf16(acc[2 * i], acc[2 * i + 1]);
#pragma unroll
          for (int i = 0; i < kBN / 2; ++i) acc[i] = 0.0f;
        }
      }
      const int s = it % S::kStages;
      MbarWait(&full[s], (it / S::kStages) & 1);
      const unsigned char* base = stages + s * S::kStageBytes;
      const uint64_t da = SwizzledTileDesc(base + c * kHalfABytes), db = SwizzledTileDesc(base + kABytes);
      // Columns past K are the copy engine's zeros: their products are zeros, which leave an
      // accumulator's bits as they are (it is never -0: it starts at +0, and a fused add that
      // sums to zero gives +0 unless every term is -0), so a chunk past K is the chunk not issued.
      WgmmaFence();
      if constexpr (kBN > 256) {  // kSwiGlu's 136-row boxes: gate outputs in acc's first half, up's in the second
        static_assert(kSwiGlu && kBN == 272, "past 256 columns only the gated form's two boxes");
        auto& gate = *reinterpret_cast<float(*)[kBN / 4]>(&acc[0]);
        auto& up = *reinterpret_cast<float(*)[kBN / 4]>(&acc[kBN / 4]);
        const uint64_t du = SwizzledTileDesc(base + kABytes + S::kBBytes / 2);
#pragma unroll
        for (int kk = 0; kk < kBK / 16; ++kk) {
          WgmmaBf16<kBN / 2>(gate, da + 2 * kk, db + 2 * kk);
          WgmmaBf16<kBN / 2>(up, da + 2 * kk, du + 2 * kk);
        }
      } else {
#pragma unroll
        for (int kk = 0; kk < kBK / 16; ++kk) WgmmaBf16<kBN>(acc, da + 2 * kk, db + 2 * kk);
      }
      WgmmaCommit();
      if (prev >= 0) {  // the stage before is done (the tensor cores keep the chain's order)
        WgmmaWait<1>();
        if (lane == 0) MbarArrive(&empty[prev]);
      }
      prev = s;
    }
    WgmmaWait<0>();
    FenceAccumulators(acc);
    if (lane == 0 && prev >= 0) MbarArrive(&empty[prev]);
    // acc[4j + e]: row 16 warp + g (e < 2) or + 8, output 8j + 2t + e % 2 (wgmma_ptx.cuh).
    const int64_t r_lo = int64_t{row0} + 64 * c + 16 * warp + g, r_hi = r_lo + 8;
    if constexpr (kSwiGlu) {
      // Gate output 8j + 2t + e and its up output kBN / 2 + 8j + 2t + e are in the same thread:
      // acc[4j + e'] and acc[4(j + kBN / 16) + e'] (at 272, the two boxes' wgmmas laid out so).
      auto* act = static_cast<__nv_bfloat16*>(yv);
#pragma unroll
      for (int j = 0; j < kBN / 16; ++j) {
        const int64_t col = int64_t{col0} + 8 * j + 2 * t;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t r = h == 0 ? r_lo : r_hi;
          if (r >= m) continue;
          float a[2];
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float gate = RoundAct(acc[4 * j + 2 * h + e], true);
            const float up = RoundAct(acc[4 * (j + kBN / 16) + 2 * h + e], true);
            a[e] = RoundAct(__fmul_rn(RoundAct(SiluF(gate), true), up), true);  // SiluMulKernel's
          }
          __nv_bfloat16* dst = act + r * ldy + col;
          if (vec2 && col + 1 < n) {
            *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(a[0], a[1]);
          } else {
            if (col < n) dst[0] = __float2bfloat16_rn(a[0]);
            if (col + 1 < n) dst[1] = __float2bfloat16_rn(a[1]);
          }
        }
      }
    } else if (kLora && seg >= 0) {
      // The rounded base output, plus the rounded delta scaled and rounded (LoraScatterAdd's).
      float* y = static_cast<float*>(yv);
      const float scale = lora.scale[seg];
      // A row of another slot keeps the rounded base output as it is (the plain product's).
      const bool take_lo = lora.row_slot == nullptr || (r_lo < m && lora.row_slot[r_lo] == lora.slot);
      const bool take_hi = lora.row_slot == nullptr || (r_hi < m && lora.row_slot[r_hi] == lora.slot);
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j) {
        const int64_t col = int64_t{col0} + 8 * j + 2 * t;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t r = h == 0 ? r_lo : r_hi;
          if (r >= m) continue;
          const unsigned packed = based[2 * j + h];
          const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&packed));
          const float d0 = RoundAct(__fmul_rn(RoundAct(acc[4 * j + 2 * h], true), scale), true);
          const float d1 = RoundAct(__fmul_rn(RoundAct(acc[4 * j + 2 * h + 1], true), scale), true);
          const bool takes = h == 0 ? take_lo : take_hi;
          const float v0 = takes ? RoundAct(__fadd_rn(b.x, d0), true) : b.x;
          const float v1 = takes ? RoundAct(__fadd_rn(b.y, d1), true) : b.y;
          float* dst = y + r * ldy + col;
          if (vec2 && col + 1 < n) {
            *reinterpret_cast<float2*>(dst) = make_float2(v0, v1);
          } else {
            if (col < n) dst[0] = v0;
            if (col + 1 < n) dst[1] = v1;
          }
        }
      }
    } else {
      float* y = static_cast<float*>(yv) + int64_t{id / tiles} * m * ldy;  // the split form: the slice's outputs
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j) {
        const int64_t col = int64_t{col0} + 8 * j + 2 * t;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t r = h == 0 ? r_lo : r_hi;
          if (r >= m) continue;
          const float v0 = RoundAct(acc[4 * j + 2 * h], round_bf16), v1 = RoundAct(acc[4 * j + 2 * h + 1], round_bf16);
          float* dst = y + r * ldy + col;
          if (vec2 && col + 1 < n) {
            *reinterpret_cast<float2*>(dst) = make_float2(v0, v1);
          } else {
            if (col < n) dst[0] = v0;
            if (col + 1 < n) dst[1] = v1;
          }
        }
      }
    }
  }
}

int Multiprocessors() {
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
    return 0;
  }
  return sms;
}

// n: the product's outputs, or with kSwiGlu the activation's width (w then has 2n rows).
// slice_steps > 0: the split form (K in slices of that many 64-wide stages; GemmWgmmaSplitK).
template <int kBN, bool kSwiGlu, bool kLora = false>
Status Launch(const uint16_t* xb, int64_t m, const uint16_t* w, int64_t n, int64_t k, void* y, int64_t ldy,
              bool round_output, int sms, cudaStream_t s, const LoraSegs* lora = nullptr, int slice_steps = 0) {
  using S = Shape<kBN>;
  constexpr int kColsOut = kSwiGlu ? kBN / 2 : kBN;
  static const cudaError_t ready = cudaFuncSetAttribute(
      GemmWgmmaKernel<kBN, kSwiGlu, kLora>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(S::kSmem));
  if (ready != cudaSuccess) return Internal(std::string("cuda GemmWgmma: shared memory: ") + cudaGetErrorString(ready));
  const int64_t mtiles = (m + kBM - 1) / kBM, ntiles = (n + kColsOut - 1) / kColsOut;
  if (mtiles * ntiles > (int64_t{1} << 31) - 1 || kGroupM * ntiles > (int64_t{1} << 30) || m > (int64_t{1} << 31) - 1 ||
      (kSwiGlu ? 2 * n : n) > (int64_t{1} << 31) - 1) {
    return InvalidArgument("cuda GemmWgmma: too many output tiles for one launch");
  }
  CUtensorMap map_x, map_w;
  GRAFT_RETURN_IF_ERROR(EncodeSwizzled128(&map_x, xb, 2, m, k, kBK, kBM, "GemmWgmma"));
  GRAFT_RETURN_IF_ERROR(EncodeSwizzled128(&map_w, w, 2, kSwiGlu ? 2 * n : n, k, kBK, kColsOut, "GemmWgmma"));
  const int64_t align = kSwiGlu ? 4 : 8;  // a pair of outputs: bf16x2 or float2
  const bool vec2 = ldy % 2 == 0 && reinterpret_cast<uintptr_t>(y) % align == 0;
  const int64_t ksteps = (k + kBK - 1) / kBK, slices = slice_steps > 0 ? (ksteps + slice_steps - 1) / slice_steps : 1;
  const int64_t items = mtiles * ntiles * slices;
  if (items > (int64_t{1} << 31) - 1) return InvalidArgument("cuda GemmWgmma: too many output tiles for one launch");
  const unsigned grid = static_cast<unsigned>(items < sms ? items : sms);
  static const LoraSegs kNone{};
  LaunchSerialized(GemmWgmmaKernel<kBN, kSwiGlu, kLora>, grid, kThreads, S::kSmem, s, map_x, map_w, m, n, k, y, ldy,
                   round_output, vec2, static_cast<int>(mtiles), static_cast<int>(ntiles), lora ? *lora : kNone,
                   slice_steps);
  return Launched(kSwiGlu ? "GemmWgmmaSwiGlu" : kLora ? "GemmWgmmaLora" : "GemmWgmma");
}

}  // namespace

WgmmaForm ChooseWgmmaForm(int64_t m, int64_t n, int multiprocessors) {
  const int64_t sms = multiprocessors > 0 ? multiprocessors : 1, mt = (m + kBM - 1) / kBM;
  // Tile-times of the busiest multiprocessor in tenths of a 128 x 128 tile's: a tile of width w
  // costs w / 128 of one, less what fewer B reads a product save — ~10% at 256 (measured at 4K
  // rows on the H200, 700-800 against 620-750 TFLOP/s), ~5% at 160 — so wider tiles win ties.
  auto time = [&](int64_t width, int64_t tenths) {
    const int64_t tiles = mt * ((n + width - 1) / width);
    return (tiles + sms - 1) / sms * tenths;
  };
  const int64_t t256 = time(256, 18), t160 = time(160, 12), t128 = time(128, 10);
  if (t256 <= t160 && t256 <= t128) return WgmmaForm::kTile128x256;
  return t160 <= t128 ? WgmmaForm::kTile128x160 : WgmmaForm::kTile128x128;
}

namespace {
int FormWidth(WgmmaForm form) {
  return form == WgmmaForm::kTile128x256 ? 256 : form == WgmmaForm::kTile128x160 ? 160 : 128;
}
}  // namespace

bool WgmmaLoraCovers(WgmmaForm form, int64_t n, int64_t col_begin, int64_t cols) {
  const int64_t w = FormWidth(form), end = col_begin + cols;
  return col_begin >= 0 && cols >= 1 && end <= n && col_begin % w == 0 && (end % w == 0 || end == n);
}

WgmmaForm ChooseWgmmaLoraForm(int64_t m, int64_t n, const int64_t (*spans)[2], int count, int multiprocessors,
                              unsigned* covered) {
  const WgmmaForm first = ChooseWgmmaForm(m, n, multiprocessors);
  const WgmmaForm order[4] = {first, WgmmaForm::kTile128x256, WgmmaForm::kTile128x128, WgmmaForm::kTile128x160};
  WgmmaForm best = first;
  unsigned best_mask = 0;
  int best_count = -1;
  for (WgmmaForm f : order) {
    unsigned mask = 0;
    int c = 0;
    for (int i = 0; i < count; ++i) {
      if (WgmmaLoraCovers(f, n, spans[i][0], spans[i][1])) mask |= 1u << i, ++c;
    }
    if (c > best_count) best = f, best_mask = mask, best_count = c;
  }
  if (covered) *covered = best_mask;
  return best;
}

int WgmmaMultiprocessors() { return Multiprocessors(); }

Status GemmWgmmaLora(const uint16_t* xb, int64_t m, const uint16_t* w, int64_t n, int64_t k, float* y, int64_t ldy,
                     const WgmmaLoraSegment* segs, int count, WgmmaForm form, void* stream,
                     const int32_t* row_slot, int32_t slot) {
  if (!GemmWgmmaFits(m, n, k, xb, w) || ldy < n) {
    return InvalidArgument("cuda GemmWgmmaLora: needs m, N >= 1, K % 8 == 0, ldy >= N and 16-byte aligned operands");
  }
  if (count < 1 || count > kWgmmaMaxLoraSegments) {
    return InvalidArgument("cuda GemmWgmmaLora: 1 to " + std::to_string(kWgmmaMaxLoraSegments) + " segments, not " +
                           std::to_string(count));
  }
  const int width = FormWidth(form);
  LoraSegs l{};
  l.count = count;
  l.row_slot = row_slot;
  l.slot = slot;
  for (int i = 0; i < count; ++i) {
    const WgmmaLoraSegment& g = segs[i];
    if (!WgmmaLoraCovers(form, n, g.col_begin, g.cols)) {
      return InvalidArgument("cuda GemmWgmmaLora: segment " + std::to_string(i) + " (columns " +
                             std::to_string(g.col_begin) + " + " + std::to_string(g.cols) + ") straddles " +
                             std::to_string(width) + "-wide tiles");
    }
    if (g.rank < 8 || g.rank % 8 != 0) {
      return InvalidArgument("cuda GemmWgmmaLora: rank " + std::to_string(g.rank) + " is not a positive multiple of 8");
    }
    for (int j = 0; j < i; ++j) {
      if (g.col_begin < segs[j].col_begin + segs[j].cols && segs[j].col_begin < g.col_begin + g.cols) {
        return InvalidArgument("cuda GemmWgmmaLora: segments overlap");
      }
    }
    GRAFT_RETURN_IF_ERROR(EncodeSwizzled128(&l.t[i], g.t, 2, m, g.rank, kBK, kBM, "GemmWgmmaLora"));
    GRAFT_RETURN_IF_ERROR(EncodeSwizzled128(&l.b[i], g.b, 2, g.cols, g.rank, kBK, width, "GemmWgmmaLora"));
    l.col_begin[i] = static_cast<int>(g.col_begin);
    l.col_end[i] = static_cast<int>(g.col_begin + g.cols);
    l.ksteps[i] = (g.rank + kBK - 1) / kBK;
    l.scale[i] = g.scale;
  }
  const int sms = Multiprocessors();
  if (sms <= 0) return Internal("cuda GemmWgmmaLora: no multiprocessor count for the current device");
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (form) {
    case WgmmaForm::kTile128x256: return Launch<256, false, true>(xb, m, w, n, k, y, ldy, true, sms, s, &l);
    case WgmmaForm::kTile128x160: return Launch<160, false, true>(xb, m, w, n, k, y, ldy, true, sms, s, &l);
    case WgmmaForm::kTile128x128: return Launch<128, false, true>(xb, m, w, n, k, y, ldy, true, sms, s, &l);
  }
  return Internal("cuda GemmWgmmaLora: unknown tile form");
}

const char* WgmmaFormName(WgmmaForm form) {
  switch (form) {
    case WgmmaForm::kTile128x256: return "wgmma 128x256";
    case WgmmaForm::kTile128x160: return "wgmma 128x160";
    case WgmmaForm::kTile128x128: return "wgmma 128x128";
  }
  return "wgmma ?";
}

bool GemmWgmmaFits(int64_t m, int64_t n, int64_t k, const void* xb, const void* w) {
  return m >= 1 && n >= 1 && k >= 1 && k % 8 == 0 && reinterpret_cast<uintptr_t>(xb) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

Status GemmWgmma(const uint16_t* xb, int64_t m, const uint16_t* w, int64_t n, int64_t k, float* y, int64_t ldy,
                 bool round_output, void* stream, const WgmmaForm* form) {
  if (!GemmWgmmaFits(m, n, k, xb, w) || ldy < n) {
    return InvalidArgument("cuda GemmWgmma: needs m, N >= 1, K % 8 == 0, ldy >= N and 16-byte aligned operands");
  }
  const int sms = Multiprocessors();
  if (sms <= 0) return Internal("cuda GemmWgmma: no multiprocessor count for the current device");
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (form != nullptr ? *form : ChooseWgmmaForm(m, n, sms)) {
    case WgmmaForm::kTile128x256: return Launch<256, false>(xb, m, w, n, k, y, ldy, round_output, sms, s);
    case WgmmaForm::kTile128x160: return Launch<160, false>(xb, m, w, n, k, y, ldy, round_output, sms, s);
    case WgmmaForm::kTile128x128: return Launch<128, false>(xb, m, w, n, k, y, ldy, round_output, sms, s);
  }
  return Internal("cuda GemmWgmma: unknown tile form");
}

Status GemmWgmmaSplitK(const uint16_t* xb, int64_t m, const uint16_t* w, int64_t n, int64_t k, int64_t split_k,
                       float* y, int64_t ldy, void* stream, const WgmmaForm* form) {
  if (!GemmWgmmaFits(m, n, k, xb, w) || ldy < n || split_k < kBK || split_k % kBK != 0) {
    return InvalidArgument("cuda GemmWgmmaSplitK: needs m, N >= 1, K % 8 == 0, ldy >= N, 16-byte aligned operands and "
                           "slices a positive multiple of 64 columns");
  }
  const int sms = Multiprocessors();
  if (sms <= 0) return Internal("cuda GemmWgmmaSplitK: no multiprocessor count for the current device");
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const int slice_steps = static_cast<int>(std::min<int64_t>(split_k, (k + kBK - 1) / kBK * kBK) / kBK);
  const int64_t slices = (k + split_k - 1) / split_k;
  // Each slice's tiles are items of their own: the form is chosen as for slices x m rows.
  switch (form != nullptr ? *form : ChooseWgmmaForm(m * slices, n, sms)) {
    case WgmmaForm::kTile128x256: return Launch<256, false>(xb, m, w, n, k, y, ldy, false, sms, s, nullptr, slice_steps);
    case WgmmaForm::kTile128x160: return Launch<160, false>(xb, m, w, n, k, y, ldy, false, sms, s, nullptr, slice_steps);
    case WgmmaForm::kTile128x128: return Launch<128, false>(xb, m, w, n, k, y, ldy, false, sms, s, nullptr, slice_steps);
  }
  return Internal("cuda GemmWgmmaSplitK: unknown tile form");
}

Status GemmWgmmaSwiGlu(const uint16_t* xb, int64_t m, const uint16_t* w, int64_t inter, int64_t k, uint16_t* act,
                       int64_t ld_act, void* stream, const SwiGluForm* form) {
  if (!GemmWgmmaFits(m, 2 * inter, k, xb, w) || ld_act < inter) {
    return InvalidArgument("cuda GemmWgmmaSwiGlu: needs m, inter >= 1, K % 8 == 0, ld_act >= inter and 16-byte aligned operands");
  }
  const int sms = Multiprocessors();
  if (sms <= 0) return Internal("cuda GemmWgmmaSwiGlu: no multiprocessor count for the current device");
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (form != nullptr ? *form : ChooseSwiGluForm(m, inter, sms)) {
    case SwiGluForm::kPairs128: return Launch<256, true>(xb, m, w, inter, k, act, ld_act, true, sms, s);
    case SwiGluForm::kPairs136: return Launch<272, true>(xb, m, w, inter, k, act, ld_act, true, sms, s);
  }
  return Internal("cuda GemmWgmmaSwiGlu: unknown tile form");
}

SwiGluForm ChooseSwiGluForm(int64_t m, int64_t inter, int multiprocessors) {
  const int64_t sms = multiprocessors > 0 ? multiprocessors : 1, mt = (m + kBM - 1) / kBM;
  // Waves of tiles times a tile's width (its time: the same K steps, proportionally more columns).
  auto cost = [&](int64_t width) { return (mt * ((inter + width - 1) / width) + sms - 1) / sms * width; };
  return cost(136) < cost(128) ? SwiGluForm::kPairs136 : SwiGluForm::kPairs128;
}

const char* SwiGluFormName(SwiGluForm form) {
  return form == SwiGluForm::kPairs136 ? "wgmma 128x(2x136)" : "wgmma 128x(2x128)";
}

}  // namespace graft::cuda

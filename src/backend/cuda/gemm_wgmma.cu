#include "backend/cuda/gemm_wgmma.h"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <vector>

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
// of 128 rows; b[i]: B [cols, rank], boxes of a tile's width; ksteps: rank's 64-wide stages; the
// rows [row_begin, row_end) that hold the slot's rows. The gated form: segments [0, gates) are on
// the gate, the rest on the up.
struct LoraSegs {
  CUtensorMap t[kWgmmaMaxLoraSegments];
  CUtensorMap b[kWgmmaMaxLoraSegments];
  int col_begin[kWgmmaMaxLoraSegments], col_end[kWgmmaMaxLoraSegments], ksteps[kWgmmaMaxLoraSegments];
  int row_begin[kWgmmaMaxLoraSegments], row_end[kWgmmaMaxLoraSegments];
  int32_t slot[kWgmmaMaxLoraSegments];
  float scale[kWgmmaMaxLoraSegments];
  int count, gates;
  const int32_t* row_slot;  // null: every row takes every segment; else a segment's slot's rows
};

// The summed split form's outputs (GemmWgmmaSplitKSum): block b's columns [starts[b], starts[b + 1])
// as a [m, width] bf16 array at y + m starts[b].
struct SumOut {
  int64_t starts[kWgmmaMaxSumBlocks + 1];
  int64_t rows, row0;  // BlockRows, resolved: the arrays' rows, the call's first among them
  int count;
  bool f32;  // instead: fp32 sums [m, ldy] at the kernel's y, rounded to bf16 values when round_bf16
};

// The segments a tile of outputs [row0, row0 + kBM) x [col0, col0 + width) overlaps, one bit each
// (the gated form: every segment covers its tile's columns).
template <bool kSwiGlu>
__device__ __forceinline__ unsigned SegmentsOf(const LoraSegs& l, int row0, int col0, int width) {
  unsigned mask = 0;
  for (int i = 0; i < l.count; ++i) {
    const bool cols = kSwiGlu || (l.col_begin[i] < col0 + width && l.col_end[i] > col0);
    if (cols && l.row_begin[i] < row0 + kBM && l.row_end[i] > row0) mask |= 1u << i;
  }
  return mask;
}

// The delta's stages a tile runs after K's, those of each segment it overlaps in segment order
// (the gated form: its gate segments', then its up segments'); `first`, `last`: only segments
// [first, last).
__device__ __forceinline__ int DeltaSteps(const LoraSegs& l, unsigned segs, int first = 0,
                                          int last = kWgmmaMaxLoraSegments) {
  int steps = 0;
  for (int i = first; i < l.count && i < last; ++i) steps += segs >> i & 1 ? l.ksteps[i] : 0;
  return steps;
}

// Delta stage d of a tile overlapping `segs`: its segment and that segment's stage.
__device__ __forceinline__ int DeltaStage(const LoraSegs& l, unsigned segs, int d, int& stage) {
  for (int i = 0; i < l.count; ++i) {
    if (!(segs >> i & 1)) continue;
    if (d < l.ksteps[i]) {
      stage = d;
      return i;
    }
    d -= l.ksteps[i];
  }
  stage = 0;
  return -1;
}

// The segments of `segs` a row takes: those of its slot (row_slot's entry; -1 without row_slot:
// every one; -2 past m: none).
__device__ __forceinline__ unsigned RowSegments(const LoraSegs& l, unsigned segs, int32_t row_slot) {
  if (row_slot == -1) return segs;
  unsigned mask = 0;
  for (int i = 0; i < l.count; ++i) {
    if ((segs >> i & 1) && l.slot[i] == row_slot) mask |= 1u << i;
  }
  return mask;
}

// The scale of the segment of `mine` (a row's segments) that holds column col, or false.
__device__ __forceinline__ bool ScaleAt(const LoraSegs& l, unsigned mine, int64_t col, float& scale) {
  for (; mine != 0; mine &= mine - 1) {
    const int i = __ffs(mine) - 1;
    if (col >= l.col_begin[i] && col < l.col_end[i]) {
      scale = l.scale[i];
      return true;
    }
  }
  scale = 0.0f;
  return false;
}

// A rounded base output plus its delta's sum as LoraScatterAdd adds it: r(base + r(r(delta) · scale)).
__device__ __forceinline__ float PlusDelta(float base, float delta, float scale) {
  return RoundAct(__fadd_rn(base, RoundAct(__fmul_rn(RoundAct(delta, true), scale), true)), true);
}

// kSwiGlu && kLora: folds one half of the delta accumulator (kHalf 0: the gate outputs, 1: the up
// outputs) into `based`: an output of a row that takes a delta there becomes r(r(base) + r(r(delta)
// · scale)) with its segment's scale (rows g and g + 8: _lo, _hi), repacked (a bf16 value: nothing
// lost). Folding the gate's chains before the up's start keeps one half of acc live beside `based`,
// not both.
template <int kBN, int kHalf>
__device__ __forceinline__ void FoldDeltaHalf(unsigned (&based)[kBN / 4], const float (&acc)[kBN / 2], float scale_lo,
                                              float scale_hi, bool take_lo, bool take_hi) {
#pragma unroll
  for (int j = kHalf * kBN / 16; j < (kHalf + 1) * kBN / 16; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (!(h == 0 ? take_lo : take_hi)) continue;
      const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&based[2 * j + h]));
      const float scale = h == 0 ? scale_lo : scale_hi;
      based[2 * j + h] = PackBf16(PlusDelta(b.x, acc[4 * j + 2 * h], scale), PlusDelta(b.y, acc[4 * j + 2 * h + 1], scale));
    }
  }
}

// Tile `id` of the grouped order (GroupedTile: groups of kGroupM row tiles, so that the tiles in
// flight share a few weight tiles through the L2).
__device__ __forceinline__ void TileAt(int id, int mtiles, int ntiles, int& row0, int& col0, int bn) {
  int mt, nt;
  GroupedTile(id, mtiles, ntiles, kGroupM, mt, nt);
  row0 = mt * kBM;
  col0 = nt * bn;
}

// kSwiGlu (kBN 256 or 272): a tile's B rows are two boxes of kBN / 2 rows, gate rows [col0, col0 +
// kBN / 2) and up rows [up_row + col0, ...) of w (one wgmma over both at 256, one a box at 272), and the epilogue writes act[r][col0 + c] (bf16, ldy apart) =
// SiluMul's arithmetic on the two rounded outputs; n is then the activation's width (the up rows'
// offset). Otherwise y (fp32) gets the products as they are or rounded. kLora (round_bf16 then
// true): a tile inside segments of `lora` (their columns and rows) runs their rank stages after K's
// into a second accumulator and writes r(r(base) + r(r(delta) · scale)) where a row takes a segment
// (its slot's) on the column (GemmWgmmaLora). Both (GemmWgmmaSwiGluLora): a tile runs its gate
// segments' rank stages into its gate half of that accumulator, then its up segments' into its up
// half (a stage: t's rows and one box of B's rows), then SiluMul's arithmetic on the two sums
// r(r(base) + r(r(delta) · scale)); a tile without segments keeps the plain rounded products.
// kSum (GemmWgmmaSplitKSum; slice_steps > 0): a tile runs all of K, its accumulator zeroed at
// every slice of slice_steps stages and folded into a running sum at the slice's end (FoldSlice),
// and the epilogue writes the sums rounded to bf16 into `sum_out`'s blocks — the split form's
// slices and SumSplitsBf16Blocks in one pass, no partials through memory — or, with sum_out.f32,
// as fp32 rows of y (GemmWgmmaSplitKSumF32: SumSplits' outputs).
template <int kBN, bool kSwiGlu, bool kLora, bool kSum = false>
__global__ void __launch_bounds__(kThreads, 1)
    GemmWgmmaKernel(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_w, int64_t m,
                    int64_t n, int64_t k, void* __restrict__ yv, int64_t ldy, bool round_bf16, bool vec2, int mtiles,
                    int ntiles, const __grid_constant__ LoraSegs lora, int slice_steps,
                    const __grid_constant__ SumOut sum_out) {
  static_assert(!kSwiGlu || kBN == 256 || kBN == 272, "the gated form pairs two 128- or 136-row boxes");
  static_assert(!kSum || (kBN == 128 && !kSwiGlu && !kLora), "the summed split form: 128-wide tiles, no epilogue extras");
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
  // kSum: a tile is one item over all of K (its slices summed as they end).
  const bool sliced_items = slice_steps > 0 && !kSum;
  const int tiles = mtiles * ntiles, all_steps = static_cast<int>((k + kBK - 1) / kBK);
  const int slices = sliced_items ? (all_steps + slice_steps - 1) / slice_steps : 1, items = tiles * slices;
  auto slice_of = [&](int id, int& kb0) {  // the item's tile, its first K stage and stage count
    const int sl = id / tiles;
    kb0 = sliced_items ? sl * slice_steps : 0;
    return sliced_items ? min(all_steps - kb0, slice_steps) : all_steps;
  };

  if (wg == 0) {
    SetMaxRegistersDec<kProducerRegs>();
    if (tid != 0) return;
    int it = 0;  // stages filled so far: slot it % kStages, its use (it / kStages)
    for (int id = blockIdx.x; id < items; id += gridDim.x) {
      int row0, col0, kb0;
      TileAt(id % tiles, mtiles, ntiles, row0, col0, kColsOut);
      const int ksteps = slice_of(id, kb0);
      const unsigned segs = kLora ? SegmentsOf<kSwiGlu>(lora, row0, col0, kColsOut) : 0u;
      const int steps = ksteps + (kLora ? DeltaSteps(lora, segs) : 0);
      for (int kb = 0; kb < steps; ++kb, ++it) {
        const int s = it % S::kStages;
        MbarWait(&empty[s], ((it / S::kStages) & 1) ^ 1);  // the slot's previous use was read
        unsigned char* base = stages + s * S::kStageBytes;
        if (kLora && kb >= ksteps) {  // the delta's stages: t's rows and B's, rank chunk by chunk
          int stage = 0;
          const int seg = DeltaStage(lora, segs, kb - ksteps, stage);
          if constexpr (kSwiGlu) {  // the gate's stages into the B stage's first box, then the up's into its second
            const int up = seg >= lora.gates ? 1 : 0;
            MbarExpectTx(&full[s], kABytes + S::kBBytes / 2);
            TmaLoad2d(base, &lora.t[seg], stage * kBK, row0, &full[s]);
            TmaLoad2d(base + kABytes + up * (S::kBBytes / 2), &lora.b[seg], stage * kBK, col0, &full[s]);
          } else {  // B's rows from the tile's first column (before a segment's start: the copy engine's zeros)
            MbarExpectTx(&full[s], S::kStageBytes);
            TmaLoad2d(base, &lora.t[seg], stage * kBK, row0, &full[s]);
            TmaLoad2d(base + kABytes, &lora.b[seg], stage * kBK, col0 - lora.col_begin[seg], &full[s]);
          }
          continue;
        }
        MbarExpectTx(&full[s], S::kStageBytes);
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
  float total[kSum ? kBN / 2 : 1];  // kSum: the slices' running sum
  int it = 0;
  for (int id = blockIdx.x; id < items; id += gridDim.x) {
    int row0, col0, kb0;
    TileAt(id % tiles, mtiles, ntiles, row0, col0, kColsOut);
    const int ksteps = slice_of(id, kb0);
    const unsigned segs = kLora ? SegmentsOf<kSwiGlu>(lora, row0, col0, kColsOut) : 0u;
    // kSwiGlu: the gate segments' stages, then the up segments'.
    const int delta_steps = kLora ? DeltaSteps(lora, segs) : 0;
    const int gate_steps = kLora && kSwiGlu ? DeltaSteps(lora, segs, 0, lora.gates) : 0, up_steps = delta_steps - gate_steps;
    const int steps = ksteps + delta_steps;
#pragma unroll
    for (int i = 0; i < kBN / 2; ++i) acc[i] = 0.0f;
    // acc[4j + e]: row 16 warp + g (e < 2) or + 8, output 8j + 2t + e % 2 (wgmma_ptx.cuh).
    const int64_t r_lo = int64_t{row0} + 64 * c + 16 * warp + g, r_hi = r_lo + 8;
    // kLora: the segments this thread's rows take (their slot's; a row that takes none keeps the
    // plain product's rounded output).
    unsigned mine_lo = 0, mine_hi = 0;
    if constexpr (kLora) {
      const bool all = lora.row_slot == nullptr;
      mine_lo = RowSegments(lora, segs, all ? -1 : r_lo < m ? lora.row_slot[r_lo] : -2);
      mine_hi = RowSegments(lora, segs, all ? -1 : r_hi < m ? lora.row_slot[r_hi] : -2);
    }
    // kSwiGlu: a row's gate (kHalf 0) or up (1) segment's scale, and whether it takes one.
    auto half_scale = [&](int half, unsigned mine, float& scale) {
      const unsigned in_half = mine & (half == 0 ? (1u << lora.gates) - 1 : ~((1u << lora.gates) - 1));
      scale = in_half != 0 ? lora.scale[__ffs(in_half) - 1] : 0.0f;
      return in_half != 0;
    };
    auto& gate_acc = *reinterpret_cast<float(*)[kBN / 4]>(&acc[0]);  // kSwiGlu: the gate outputs' half
    auto& up_acc = *reinterpret_cast<float(*)[kBN / 4]>(&acc[kBN / 4]);
    int prev = -1;  // the slot whose products are still in flight
    // One stage of the ring: `issue` runs its products (given the stage's address), then the stage
    // before goes back (the tensor cores keep the chain's order).
    auto stage = [&](auto issue) {
      const int s = it % S::kStages;
      MbarWait(&full[s], (it / S::kStages) & 1);
      WgmmaFence();
      issue(stages + s * S::kStageBytes);
      WgmmaCommit();
      if (prev >= 0) {
        WgmmaWait<1>();
        if (lane == 0) MbarArrive(&empty[prev]);
      }
      prev = s;
      ++it;
    };
    // Every product in flight done (its accumulators readable), the last stage back.
    auto drain = [&](auto& accs) {
      WgmmaWait<0>();
      FenceAccumulators(accs);
      if (lane == 0 && prev >= 0) MbarArrive(&empty[prev]);
      prev = -1;
    };
    // Columns past K are the copy engine's zeros: their products are zeros, which leave an
    // accumulator's bits as they are (it is never -0: it starts at +0, and a fused add that sums
    // to zero gives +0 unless every term is -0), so a chunk past K is the chunk not issued.
    // The base product's K steps; the delta's chains (kLora) each get a loop of their own, so that
    // `based` is never live beside the whole accumulator (kBN = 256 with kSwiGlu: 128 + 64
    // registers across one loop made ptxas serialize the wgmmas).
    for (int kb = 0; kb < ksteps; ++kb) {
      if constexpr (kSum) {
        if (kb > 0 && kb % slice_steps == 0) {  // a slice ends: into the sum; the next starts at zero
          drain(acc);
          FoldSlice(total, acc, kb == slice_steps);
#pragma unroll
          for (int i = 0; i < kBN / 2; ++i) acc[i] = 0.0f;
        }
      }
      stage([&](const unsigned char* base) {
        const uint64_t da = SwizzledTileDesc(base + c * kHalfABytes), db = SwizzledTileDesc(base + kABytes);
        if constexpr (kBN > 256) {  // kSwiGlu's 136-row boxes: gate outputs in acc's first half, up's in the second
          static_assert(kSwiGlu && kBN == 272, "past 256 columns only the gated form's two boxes");
          const uint64_t du = SwizzledTileDesc(base + kABytes + S::kBBytes / 2);
#pragma unroll
          for (int kk = 0; kk < kBK / 16; ++kk) {
            WgmmaBf16<kBN / 2>(gate_acc, da + 2 * kk, db + 2 * kk);
            WgmmaBf16<kBN / 2>(up_acc, da + 2 * kk, du + 2 * kk);
          }
        } else {
#pragma unroll
          for (int kk = 0; kk < kBK / 16; ++kk) WgmmaBf16<kBN>(acc, da + 2 * kk, db + 2 * kk);
        }
      });
    }
    drain(acc);
    if constexpr (kLora) {
      // The base product rounded (a row that takes no delta keeps it), then each delta's chain
      // from zero.
#pragma unroll
      for (int i = 0; i < kBN / 4; ++i) based[i] = PackBf16(acc[2 * i], acc[2 * i + 1]);
      if constexpr (kSwiGlu) {
        // The gate segments' stages (t's rows and B's first box) into the gate half, folded, then
        // the up segments' (B's second box) into the up half, folded.
        if (gate_steps > 0) {
#pragma unroll
          for (int i = 0; i < kBN / 4; ++i) gate_acc[i] = 0.0f;
          for (int kb = 0; kb < gate_steps; ++kb) {
            stage([&](const unsigned char* base) {
              const uint64_t da = SwizzledTileDesc(base + c * kHalfABytes), db = SwizzledTileDesc(base + kABytes);
#pragma unroll
              for (int kk = 0; kk < kBK / 16; ++kk) WgmmaBf16<kBN / 2>(gate_acc, da + 2 * kk, db + 2 * kk);
            });
          }
          drain(gate_acc);
          float sl, sh;
          const bool tl = half_scale(0, mine_lo, sl), th = half_scale(0, mine_hi, sh);
          FoldDeltaHalf<kBN, 0>(based, acc, sl, sh, tl, th);
        }
        if (up_steps > 0) {
#pragma unroll
          for (int i = 0; i < kBN / 4; ++i) up_acc[i] = 0.0f;
          for (int kb = 0; kb < up_steps; ++kb) {
            stage([&](const unsigned char* base) {
              const uint64_t da = SwizzledTileDesc(base + c * kHalfABytes);
              const uint64_t du = SwizzledTileDesc(base + kABytes + S::kBBytes / 2);
#pragma unroll
              for (int kk = 0; kk < kBK / 16; ++kk) WgmmaBf16<kBN / 2>(up_acc, da + 2 * kk, du + 2 * kk);
            });
          }
          drain(up_acc);
          float sl, sh;
          const bool tl = half_scale(1, mine_lo, sl), th = half_scale(1, mine_hi, sh);
          FoldDeltaHalf<kBN, 1>(based, acc, sl, sh, tl, th);
        }
      } else if (delta_steps > 0) {
#pragma unroll
        for (int i = 0; i < kBN / 2; ++i) acc[i] = 0.0f;
        for (int kb = 0; kb < delta_steps; ++kb) {
          stage([&](const unsigned char* base) {
            const uint64_t da = SwizzledTileDesc(base + c * kHalfABytes), db = SwizzledTileDesc(base + kABytes);
#pragma unroll
            for (int kk = 0; kk < kBK / 16; ++kk) WgmmaBf16<kBN>(acc, da + 2 * kk, db + 2 * kk);
          });
        }
        drain(acc);
      }
    }
    if constexpr (kSum) {
      FoldSlice(total, acc, steps <= slice_steps);  // the last slice (or the only one)
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int64_t col = int64_t{col0} + 8 * j + 2 * t + e;
          if (col >= n) continue;
          if (sum_out.f32) {  // fp32 rows of y
            auto* y = static_cast<float*>(yv);
            if (r_lo < m) y[r_lo * ldy + col] = RoundAct(total[4 * j + e], round_bf16);
            if (r_hi < m) y[r_hi * ldy + col] = RoundAct(total[4 * j + 2 + e], round_bf16);
            continue;
          }
          auto* y = static_cast<__nv_bfloat16*>(yv);  // bf16 into the column's block
          int b = 0;
          while (b + 1 < sum_out.count && col >= sum_out.starts[b + 1]) ++b;
          const int64_t lo = sum_out.starts[b], width = sum_out.starts[b + 1] - lo;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int64_t r = h == 0 ? r_lo : r_hi;
            if (r < m) {
              y[sum_out.rows * lo + (sum_out.row0 + r) * width + (col - lo)] = __float2bfloat16_rn(total[4 * j + 2 * h + e]);
            }
          }
        }
      }
      continue;
    }
    if constexpr (kSwiGlu) {
      // Gate output 8j + 2t + e and its up output kBN / 2 + 8j + 2t + e are in the same thread:
      // acc[4j + e'] and acc[4(j + kBN / 16) + e'] (at 272, the two boxes' wgmmas laid out so) —
      // with kLora their sums with the deltas, in `based`.
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
            float gate, up;
            if constexpr (kLora) {
              const float2 g2 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&based[2 * j + h]));
              const float2 u2 =
                  __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&based[2 * (j + kBN / 16) + h]));
              gate = e == 0 ? g2.x : g2.y;
              up = e == 0 ? u2.x : u2.y;
            } else {
              gate = RoundAct(acc[4 * j + 2 * h + e], true);
              up = RoundAct(acc[4 * (j + kBN / 16) + 2 * h + e], true);
            }
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
    } else if (kLora && segs != 0) {
      // The rounded base output, plus the rounded delta scaled and rounded (LoraScatterAdd's), in
      // a segment's columns; elsewhere the rounded base output as it is (its delta accumulator
      // holds only the other segments' zero products).
      float* y = static_cast<float*>(yv);
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j) {
        const int64_t col = int64_t{col0} + 8 * j + 2 * t;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t r = h == 0 ? r_lo : r_hi;
          if (r >= m) continue;
          // The row's segment's scale for each column (none: no delta is added there).
          const unsigned mine = h == 0 ? mine_lo : mine_hi;
          float scale0, scale1;
          const bool in0 = ScaleAt(lora, mine, col, scale0), in1 = ScaleAt(lora, mine, col + 1, scale1);
          const unsigned packed = based[2 * j + h];
          const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&packed));
          const float v0 = in0 ? PlusDelta(b.x, acc[4 * j + 2 * h], scale0) : b.x;
          const float v1 = in1 ? PlusDelta(b.y, acc[4 * j + 2 * h + 1], scale1) : b.y;
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
// kSum: the summed split form (`sum`: its output blocks; slice_steps > 0).
template <int kBN, bool kSwiGlu, bool kLora = false, bool kSum = false>
Status Launch(const uint16_t* xb, int64_t m, const uint16_t* w, int64_t n, int64_t k, void* y, int64_t ldy,
              bool round_output, int sms, cudaStream_t s, const LoraSegs* lora = nullptr, int slice_steps = 0,
              const SumOut* sum = nullptr) {
  using S = Shape<kBN>;
  constexpr int kColsOut = kSwiGlu ? kBN / 2 : kBN;
  static const cudaError_t ready = cudaFuncSetAttribute(
      GemmWgmmaKernel<kBN, kSwiGlu, kLora, kSum>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(S::kSmem));
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
  const int64_t ksteps = (k + kBK - 1) / kBK,
                slices = slice_steps > 0 && !kSum ? (ksteps + slice_steps - 1) / slice_steps : 1;
  const int64_t items = mtiles * ntiles * slices;
  if (items > (int64_t{1} << 31) - 1) return InvalidArgument("cuda GemmWgmma: too many output tiles for one launch");
  const unsigned grid = static_cast<unsigned>(items < sms ? items : sms);
  static const LoraSegs kNone{};
  static const SumOut kNoSum{};
  LaunchSerialized(GemmWgmmaKernel<kBN, kSwiGlu, kLora, kSum>, grid, kThreads, S::kSmem, s, map_x, map_w, m, n, k, y,
                   ldy, round_output, vec2, static_cast<int>(mtiles), static_cast<int>(ntiles), lora ? *lora : kNone,
                   slice_steps, sum ? *sum : kNoSum);
  return Launched(kSum      ? "GemmWgmmaSplitKSum"
                  : kSwiGlu ? (kLora ? "GemmWgmmaSwiGluLora" : "GemmWgmmaSwiGlu")
                  : kLora   ? "GemmWgmmaLora"
                            : "GemmWgmma");
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

int WgmmaMultiprocessors() { return Multiprocessors(); }

namespace {

// Checks a segment's rows and rank and fills entry i of l (its t map boxes of 128 rows, B's of
// `box` rows), `what` naming the op in errors.
Status AddSegment(LoraSegs& l, int i, const WgmmaLoraSegment& g, int64_t m, int box, const char* what) {
  const std::string op = std::string("cuda ") + what + ": segment " + std::to_string(i);
  if (g.t == nullptr || g.b == nullptr) return InvalidArgument(op + " has no t or no B");
  if (g.rank < 8 || g.rank % 8 != 0) {
    return InvalidArgument(op + "'s rank " + std::to_string(g.rank) + " is not a positive multiple of 8");
  }
  const int64_t row_end = g.row_end > 0 ? g.row_end : m;
  if (g.row_begin < 0 || g.row_begin >= row_end || row_end > m) {
    return InvalidArgument(op + "'s rows [" + std::to_string(g.row_begin) + ", " + std::to_string(row_end) +
                           ") are not inside the " + std::to_string(m) + " rows");
  }
  GRAFT_RETURN_IF_ERROR(EncodeSwizzled128(&l.t[i], g.t, 2, m, g.rank, kBK, kBM, what));
  GRAFT_RETURN_IF_ERROR(EncodeSwizzled128(&l.b[i], g.b, 2, g.cols, g.rank, kBK, box, what));
  l.col_begin[i] = static_cast<int>(g.col_begin);
  l.col_end[i] = static_cast<int>(g.col_begin + g.cols);
  l.row_begin[i] = static_cast<int>(g.row_begin);
  l.row_end[i] = static_cast<int>(row_end);
  l.ksteps[i] = (g.rank + kBK - 1) / kBK;
  l.slot[i] = g.slot;
  l.scale[i] = g.scale;
  return Status::Ok();
}

// Without row_slot every row takes every segment: they must all be one adapter's.
Status OneSlotWithoutRows(const WgmmaLoraSegment* segs, int count, const int32_t* row_slot, const char* what) {
  for (int i = 1; i < count && row_slot == nullptr; ++i) {
    if (segs[i].slot != segs[0].slot) {
      return InvalidArgument(std::string("cuda ") + what + ": segments of several adapters need row_slot");
    }
  }
  return Status::Ok();
}

}  // namespace

Status GemmWgmmaLora(const uint16_t* xb, int64_t m, const uint16_t* w, int64_t n, int64_t k, float* y, int64_t ldy,
                     const WgmmaLoraSegment* segs, int count, WgmmaForm form, void* stream, const int32_t* row_slot) {
  if (!GemmWgmmaFits(m, n, k, xb, w) || ldy < n) {
    return InvalidArgument("cuda GemmWgmmaLora: needs m, N >= 1, K % 8 == 0, ldy >= N and 16-byte aligned operands");
  }
  if (count < 1 || count > kWgmmaMaxLoraSegments) {
    return InvalidArgument("cuda GemmWgmmaLora: 1 to " + std::to_string(kWgmmaMaxLoraSegments) + " segments, not " +
                           std::to_string(count));
  }
  GRAFT_RETURN_IF_ERROR(OneSlotWithoutRows(segs, count, row_slot, "GemmWgmmaLora"));
  const int width = FormWidth(form);
  LoraSegs l{};
  l.count = count;
  l.gates = 0;
  l.row_slot = row_slot;
  for (int i = 0; i < count; ++i) {
    const WgmmaLoraSegment& g = segs[i];
    if (g.col_begin < 0 || g.cols < 1 || g.col_begin + g.cols > n) {
      return InvalidArgument("cuda GemmWgmmaLora: segment " + std::to_string(i) + " (columns " +
                             std::to_string(g.col_begin) + " + " + std::to_string(g.cols) + ") is not inside the " +
                             std::to_string(n) + " outputs");
    }
    for (int j = 0; j < i; ++j) {
      if (segs[j].slot == g.slot && g.col_begin < segs[j].col_begin + segs[j].cols &&
          segs[j].col_begin < g.col_begin + g.cols) {
        return InvalidArgument("cuda GemmWgmmaLora: segments " + std::to_string(j) + " and " + std::to_string(i) +
                               " of one adapter overlap");
      }
    }
    GRAFT_RETURN_IF_ERROR(AddSegment(l, i, g, m, width, "GemmWgmmaLora"));
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

Status GemmWgmmaSplitKSum(const uint16_t* xb, int64_t m, const uint16_t* w, int64_t n, int64_t k, int64_t split_k,
                          const int64_t* starts, int blocks, uint16_t* y, void* stream, BlockRows place) {
  if (!GemmWgmmaFits(m, n, k, xb, w) || split_k < kBK || split_k % kBK != 0) {
    return InvalidArgument("cuda GemmWgmmaSplitKSum: needs m, N >= 1, K % 8 == 0, 16-byte aligned operands and "
                           "slices a positive multiple of 64 columns");
  }
  if (blocks < 1 || blocks > kWgmmaMaxSumBlocks || starts[0] != 0 || starts[blocks] != n) {
    return InvalidArgument("cuda GemmWgmmaSplitKSum: 1 to " + std::to_string(kWgmmaMaxSumBlocks) +
                           " blocks from output 0 to N");
  }
  const int64_t rows = place.rows > 0 ? place.rows : m;
  if (place.row0 < 0 || place.row0 + m > rows) {
    return InvalidArgument("cuda GemmWgmmaSplitKSum: rows [" + std::to_string(place.row0) + ", " +
                           std::to_string(place.row0 + m) + ") are not inside arrays of " + std::to_string(rows));
  }
  SumOut out{};
  out.count = blocks;
  out.rows = rows;
  out.row0 = place.row0;
  for (int i = 0; i <= blocks; ++i) {
    if (i > 0 && starts[i] <= starts[i - 1]) return InvalidArgument("cuda GemmWgmmaSplitKSum: blocks out of order or empty");
    out.starts[i] = starts[i];
  }
  const int sms = Multiprocessors();
  if (sms <= 0) return Internal("cuda GemmWgmmaSplitKSum: no multiprocessor count for the current device");
  const int slice_steps = static_cast<int>(std::min<int64_t>(split_k, (k + kBK - 1) / kBK * kBK) / kBK);
  return Launch<128, false, false, true>(xb, m, w, n, k, y, n, false, sms, static_cast<cudaStream_t>(stream), nullptr,
                                         slice_steps, &out);
}

Status GemmWgmmaSplitKSumF32(const uint16_t* xb, int64_t m, const uint16_t* w, int64_t n, int64_t k, int64_t split_k,
                             float* y, int64_t ldy, bool round_output, void* stream) {
  if (!GemmWgmmaFits(m, n, k, xb, w) || split_k < kBK || split_k % kBK != 0 || ldy < n || y == nullptr) {
    return InvalidArgument("cuda GemmWgmmaSplitKSumF32: needs m, N >= 1, K % 8 == 0, ldy >= N, 16-byte aligned "
                           "operands and slices a positive multiple of 64 columns");
  }
  SumOut out{};
  out.f32 = true;
  const int sms = Multiprocessors();
  if (sms <= 0) return Internal("cuda GemmWgmmaSplitKSumF32: no multiprocessor count for the current device");
  const int slice_steps = static_cast<int>(std::min<int64_t>(split_k, (k + kBK - 1) / kBK * kBK) / kBK);
  return Launch<128, false, false, true>(xb, m, w, n, k, y, ldy, round_output, sms, static_cast<cudaStream_t>(stream),
                                         nullptr, slice_steps, &out);
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

Status GemmWgmmaSwiGluLora(const uint16_t* xb, int64_t m, const uint16_t* w, int64_t inter, int64_t k, uint16_t* act,
                           int64_t ld_act, const WgmmaLoraSegment* segs, int count, void* stream,
                           const int32_t* row_slot, const SwiGluForm* form) {
  if (!GemmWgmmaFits(m, 2 * inter, k, xb, w) || ld_act < inter) {
    return InvalidArgument("cuda GemmWgmmaSwiGluLora: needs m, inter >= 1, K % 8 == 0, ld_act >= inter and 16-byte "
                           "aligned operands");
  }
  if (count < 1 || count > kWgmmaMaxLoraSegments) {
    return InvalidArgument("cuda GemmWgmmaSwiGluLora: 1 to " + std::to_string(kWgmmaMaxLoraSegments) +
                           " segments, not " + std::to_string(count));
  }
  GRAFT_RETURN_IF_ERROR(OneSlotWithoutRows(segs, count, row_slot, "GemmWgmmaSwiGluLora"));
  const int sms = Multiprocessors();
  if (sms <= 0) return Internal("cuda GemmWgmmaSwiGluLora: no multiprocessor count for the current device");
  const SwiGluForm f = form != nullptr ? *form : ChooseSwiGluForm(m, inter, sms);
  const int box = f == SwiGluForm::kPairs136 ? 136 : 128;  // B's rows a box: the pairing's
  // The gate segments first, then the up segments, each in the order given.
  std::vector<const WgmmaLoraSegment*> order;
  for (int up = 0; up < 2; ++up) {
    for (int i = 0; i < count; ++i) {
      const WgmmaLoraSegment& g = segs[i];
      if (g.col_begin != up * inter) continue;
      if (g.cols != inter) {
        return InvalidArgument(std::string("cuda GemmWgmmaSwiGluLora: segment ") + std::to_string(i) + " must cover " +
                               (up ? "the up" : "the gate") + "'s columns " + std::to_string(up * inter) + " + " +
                               std::to_string(inter) + ", not " + std::to_string(g.col_begin) + " + " +
                               std::to_string(g.cols));
      }
      for (const WgmmaLoraSegment* o : order) {
        if (o->slot == g.slot && o->col_begin == g.col_begin) {
          return InvalidArgument(std::string("cuda GemmWgmmaSwiGluLora: two segments of one adapter on the ") +
                                 (up ? "up" : "gate"));
        }
      }
      order.push_back(&g);
    }
  }
  if (static_cast<int>(order.size()) != count) {
    return InvalidArgument("cuda GemmWgmmaSwiGluLora: a segment starts neither at the gate's column 0 nor at the up's " +
                           std::to_string(inter));
  }
  LoraSegs l{};
  l.count = count;
  l.row_slot = row_slot;
  l.gates = 0;
  for (int i = 0; i < count; ++i) {
    l.gates += order[i]->col_begin == 0 ? 1 : 0;
    WgmmaLoraSegment g = *order[i];
    g.cols = inter;  // B [inter, rank] either way
    GRAFT_RETURN_IF_ERROR(AddSegment(l, i, g, m, box, "GemmWgmmaSwiGluLora"));
  }
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  return f == SwiGluForm::kPairs128 ? Launch<256, true, true>(xb, m, w, inter, k, act, ld_act, true, sms, s, &l)
                                    : Launch<272, true, true>(xb, m, w, inter, k, act, ld_act, true, sms, s, &l);
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

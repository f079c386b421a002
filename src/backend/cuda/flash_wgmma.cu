#include "backend/cuda/flash_wgmma.h"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <string>
#include <type_traits>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/launched.h"
#include "backend/cuda/mma_ptx.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/tensor_map.h"
#include "backend/cuda/wgmma_ptx.cuh"

namespace graft::cuda {
namespace {

constexpr int kQ = 64, kKeys = 64, kHeads = 2;
constexpr int kThreads = 128 * (1 + kHeads);  // the producer warpgroup, then one consumer a head
constexpr int kProducerRegs = 40, kConsumerRegs = 232;
constexpr int kSubBytes = 64 * 128;           // a swizzled [64 rows][64 bf16] sub-tile
constexpr int kReleases = 4 * kHeads;         // arrivals that free a stage: each consumer warp's lane 0

// Shared memory (byte offsets from a 1024-aligned base): each head's Q tile (256-wide heads), then
// kStages stages of a K tile and a V tile, each [64 keys][head_dim] in sub-tiles of 64 columns
// (the copy engine's 128-byte swizzle): K-major for S = Q Kᵀ's B operand, MN-major for P V's.
// Then the stages' barriers. Head 256: 64 + 2 · 64 = 192 KB; 128: 4 · 32 = 128 KB; 64: 4 · 16.
template <int kHd>
struct Layout {
  static constexpr int kSubs = kHd / 64;
  // Heads up to 128 wide keep S's A operand (Q) in registers, so that S reads only K from shared
  // memory (with 64-key tiles an m64n64 product from shared memory reads as many bytes as the
  // tensor cores can take); 256-wide heads would need 64 more registers than there are.
  static constexpr bool kQRegs = kHd <= 128;
  static constexpr int kQBytes = kQRegs ? 0 : kSubs * kSubBytes, kTileBytes = kSubs * kSubBytes;
  static constexpr int kStages = kHd >= 256 ? 2 : 4;
  static constexpr int kStageBytes = 2 * kTileBytes;
  static constexpr int kQ0 = 0, kStage0 = kHeads * kQBytes, kBars = kStage0 + kStages * kStageBytes;
  static constexpr size_t kSmem = 1024 + kBars + 3 * kStages * sizeof(uint64_t);
};

// Row r, column c (< 64) of a swizzled sub-tile: 128-byte rows, 16-byte chunk c / 8 at chunk
// (c / 8) ^ (r % 8).
__device__ __forceinline__ int Swz(int r, int c) { return r * 128 + ((((c >> 3) ^ r) & 7) << 4) + (c & 7) * 2; }

// Four fp32 values as bf16 (exact for bf16-valued activations) at byte offset off of smem.
__device__ __forceinline__ void Put4(unsigned char* smem, int off, float4 v) {
  *reinterpret_cast<uint2*>(smem + off) = make_uint2(PackBf16(v.x, v.y), PackBf16(v.z, v.w));
}

// The named barrier (0 is __syncthreads') of a consumer's Q tile: 1 + the consumer.
constexpr int kQTileBar = 1;

// One block: query tile qb (64 rows) of query heads h0, h0 + 1, which share key-value head kvh.
// Warpgroup 0 is the producer: its first warp copies each 64-key tile's K and V rows from the pages
// into the next free stage by TMA (box_rows rows a copy: a page, or the 64 keys of a page of 64
// or more; a lane a box), as far ahead as the stages allow; that warp then zeroes the last
// tile's V rows at or past the block's keys once they land (the pages hold whatever was there, and
// a zero probability times a NaN would not be zero) and says so on `zeroed`.
// Warpgroups 1 and 2 are the consumers, one a head, each FlashRows' arithmetic on its head's 64
// queries at its own pace. Phase j of a consumer issues O += P V of tile j - 1 and S = Q Kᵀ of
// tile j together, waits for both, then runs tile j's softmax (one wait a tile, and the other
// consumer's products run beside this one's softmax). O is rescaled by tile j's factor after P V
// of tile j - 1 and before that of tile j, so every row's operations and their order are
// FlashRows'. (Making the two take strict turns at the tensor cores, FlashAttention-3's ping-pong,
// measured the same: bench/results/prefill.md § attention-tma.)
template <int kHd>
__global__ void __launch_bounds__(kThreads, 1)
    FlashWgmmaKernel(const __grid_constant__ CUtensorMap map_k, const __grid_constant__ CUtensorMap map_v, AttentionArgs a,
                     int box_rows) {
  using L = Layout<kHd>;
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  extern __shared__ unsigned char raw[];
  unsigned char* sm = raw + ((1024 - (SmemAddr(raw) & 1023)) & 1023);
  uint64_t* full_k = reinterpret_cast<uint64_t*>(sm + L::kBars);  // a stage's K rows landed
  uint64_t* full_v = full_k + L::kStages;                         // its V rows landed
  uint64_t* empty = full_v + L::kStages;                          // both consumers are done with it
  __shared__ uint64_t zeroed;                                     // the last tile's V rows past the keys are zeros
  __shared__ int block_len;
  const int qb = static_cast<int>(gridDim.x - 1 - blockIdx.x);  // the last query tiles (most keys) first
  const int t0 = qb * kQ, h0 = static_cast<int>(blockIdx.y) * kHeads;
  const int kvh = h0 / (a.num_heads / a.num_kv_heads);
  const int tid = threadIdx.x, wg = tid / 128, lane = tid % 32;
  if (tid == 0) {
    block_len = 0;
    for (int s = 0; s < L::kStages; ++s) MbarInit(&full_k[s], 1), MbarInit(&full_v[s], 1), MbarInit(&empty[s], kReleases);
    MbarInit(&zeroed, 1);
    FenceProxyAsync();
  }
  __syncthreads();
  if (tid < kQ && t0 + tid < a.n) atomicMax(&block_len, a.pos[t0 + tid] + 1);
  __syncthreads();
  const int len = block_len;
  const int tiles = (len + kKeys - 1) / kKeys;
  const int last_s = (tiles - 1) % L::kStages;
  const bool ragged = len % kKeys != 0;  // the last tile has keys past len

  if (wg == 0) {
    SetMaxRegistersDec<kProducerRegs>();
    if (tid >= 32) return;
    // Box b of a tile (b < its box count): lane b looks up its page and issues its copies, so the
    // page-table loads of a tile run side by side; the next tile's are loaded while this one waits.
    auto boxes_of = [&](int tile) { return (min(len - tile * kKeys, kKeys) + box_rows - 1) / box_rows; };
    auto row_of = [&](int tile) {
      const int j = tile * kKeys + lane * box_rows;
      return lane < boxes_of(tile) ? a.page_table[j / a.page_size] * a.page_size + j % a.page_size : 0;
    };
    int row = row_of(0);
    for (int tile = 0; tile < tiles; ++tile) {
      const int s = tile % L::kStages, boxes = boxes_of(tile);
      const int next = tile + 1 < tiles ? row_of(tile + 1) : 0;
      if (lane == 0) {
        MbarWait(&empty[s], ((tile / L::kStages) & 1) ^ 1);  // the stage's previous tile was read
        const unsigned bytes = static_cast<unsigned>(boxes * box_rows * 128 * L::kSubs);
        MbarExpectTx(&full_k[s], bytes);
        MbarExpectTx(&full_v[s], bytes);
      }
      __syncwarp();
      if (lane < boxes) {
        unsigned char* kt = sm + L::kStage0 + s * L::kStageBytes + lane * box_rows * 128;
        unsigned char* vt = kt + L::kTileBytes;
#pragma unroll
        for (int sub = 0; sub < L::kSubs; ++sub) TmaLoad3d(kt + sub * kSubBytes, &map_k, 64 * sub, kvh, row, &full_k[s]);
#pragma unroll
        for (int sub = 0; sub < L::kSubs; ++sub) TmaLoad3d(vt + sub * kSubBytes, &map_v, 64 * sub, kvh, row, &full_v[s]);
      }
      row = next;
    }
    __syncwarp();
    if (ragged) {  // 16-byte stores of zeros over the last tile's rows past len, once its copies landed
      unsigned char* vt = sm + L::kStage0 + last_s * L::kStageBytes + L::kTileBytes;
      MbarWait(&full_v[last_s], ((tiles - 1) / L::kStages) & 1);
      const int from = len - (tiles - 1) * kKeys, rows = kKeys - from;
      for (int e = lane; e < rows * 8 * L::kSubs; e += 32) {
        const int sub = e / (rows * 8), r = from + e / 8 % rows, q = e % 8;
        *reinterpret_cast<uint4*>(vt + sub * kSubBytes + r * 128 + q * 16) = make_uint4(0u, 0u, 0u, 0u);
      }
      FenceProxyAsync();
      __syncwarp();
      if (lane == 0) MbarArrive(&zeroed);
    }
    return;
  }

  SetMaxRegistersInc<kConsumerRegs>();
  const int c = wg - 1, ctid = tid % 128, warp = ctid / 32, g = lane / 4, t = lane % 4;
  const int h = h0 + c;
  // 256-wide heads: this head's Q tile, zeros past n.
  unsigned char* q_tile = sm + L::kQ0 + c * L::kQBytes;
  if constexpr (!L::kQRegs) {
    constexpr int kF4 = kHd / 4;  // float4s a row
    for (int e = ctid; e < kQ * kF4; e += 128) {
      const int r = e / kF4, col = e % kF4 * 4;
      const float4 v = t0 + r < a.n ? *reinterpret_cast<const float4*>(a.q + (int64_t{t0 + r} * a.num_heads + h) * kHd + col)
                                    : make_float4(0.f, 0.f, 0.f, 0.f);
      Put4(q_tile, (col >> 6) * kSubBytes + Swz(r, col & 63), v);
    }
    FenceProxyAsync();
    NamedBarrierSync(kQTileBar + c, 128);
  }

  // This thread's two query rows (g and g + 8 of its warp's 16) and their key counts (0: no query).
  const int row_a = t0 + warp * 16 + g, row_b = row_a + 8;
  const int len_a = row_a < a.n ? a.pos[row_a] + 1 : 0, len_b = row_b < a.n ? a.pos[row_b] + 1 : 0;
  // Heads up to 128 wide: Q's fragments (the mma.sync A layout, zeros past n), loaded once.
  unsigned qf[L::kQRegs ? kHd / 16 : 1][4];
  if constexpr (L::kQRegs) {
    auto pair = [&](int row, int k) {
      if (row >= a.n) return 0u;
      const float2 v = *reinterpret_cast<const float2*>(a.q + (int64_t{row} * a.num_heads + h) * kHd + k);
      return PackBf16(v.x, v.y);
    };
#pragma unroll
    for (int kc = 0; kc < kHd / 16; ++kc) {
      qf[kc][0] = pair(row_a, 16 * kc + 2 * t);
      qf[kc][1] = pair(row_b, 16 * kc + 2 * t);
      qf[kc][2] = pair(row_a, 16 * kc + 2 * t + 8);
      qf[kc][3] = pair(row_b, 16 * kc + 2 * t + 8);
    }
  }
  float acc[kHd / 2];  // acc[4 j + e]: FlashRows' acc[j][e]
#pragma unroll
  for (int i = 0; i < kHd / 2; ++i) acc[i] = 0.0f;
  float mx_a = -INFINITY, mx_b = -INFINITY, sum_a = 0.0f, sum_b = 0.0f;
  unsigned p[kKeys / 16][4];  // the previous tile's probabilities: P's fragment, straight from S's
  float sc[kKeys / 2];        // sc[4 nb + e]: FlashRows' s[nb][e]

  // Phase j: P V of tile j - 1 (kPv), S of tile j (kQk); the first phase has no P V, the last no S
  // (a template each, so that no product sits in a branch: the compiler would serialize them).
  auto phase = [&](auto pv, auto qk, int j) {
    constexpr bool kPv = decltype(pv)::value, kQk = decltype(qk)::value;
    const int s = j % L::kStages, ps = (j + L::kStages - 1) % L::kStages;
    if (kQk) MbarWait(&full_k[s], (j / L::kStages) & 1);
    if (kPv) {
      if (!kQk && ragged) {
        MbarWait(&zeroed, 0);
      } else {
        MbarWait(&full_v[ps], ((j - 1) / L::kStages) & 1);
      }
    }
#pragma unroll
    for (int i = 0; i < kKeys / 2; ++i) sc[i] = 0.0f;
    WgmmaFence();
    if constexpr (kPv) {  // O += P V, tile j - 1's 16-key chunks ascending (V MN-major: 64-column sub-tiles kSubBytes apart)
      const uint64_t dv = SwizzledMnDesc(sm + L::kStage0 + ps * L::kStageBytes + L::kTileBytes, kSubBytes);
#pragma unroll
      for (int kc = 0; kc < kKeys / 16; ++kc) WgmmaBf16Regs<kHd, 1>(acc, p[kc], dv + (16 * 128 >> 4) * kc);
    }
    if constexpr (kQk) {  // S = Q Kᵀ: head_dim's 16-wide chunks ascending, from zero
      const unsigned char* kt = sm + L::kStage0 + s * L::kStageBytes;
#pragma unroll
      for (int kc = 0; kc < kHd / 16; ++kc) {  // chunk kc: sub-tile kc / 4, its 32-byte step kc % 4
        const int sub = (kc / 4) * kSubBytes;
        if constexpr (L::kQRegs) {
          WgmmaBf16Regs<64>(sc, qf[kc], SwizzledTileDesc(kt + sub) + 2 * (kc % 4));
        } else {
          WgmmaBf16<64>(sc, SwizzledTileDesc(q_tile + sub) + 2 * (kc % 4), SwizzledTileDesc(kt + sub) + 2 * (kc % 4));
        }
      }
    }
    WgmmaCommit();
    WgmmaWait<0>();
    FenceAccumulators(acc);
    FenceAccumulators(sc);
    if (kPv && lane == 0) MbarArrive(&empty[ps]);  // tile j - 1's stage: its K and V read
  };
  // Tile j's softmax on its scores in sc; O rescaled; P packed for the next phase.
  auto softmax = [&](int j) {
    const int j0 = j * kKeys;
    // Scores as the CPU rounds them, masked past each row's position; the tile's row max.
    float tmax_a = -INFINITY, tmax_b = -INFINITY;
#pragma unroll
    for (int nb = 0; nb < kKeys / 8; ++nb) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = j0 + nb * 8 + 2 * t + e % 2;
        const bool ok = key < (e < 2 ? len_a : len_b);
        const float v = RoundAct(__fmul_rn(RoundAct(sc[4 * nb + e], a.bf16), a.scale), a.bf16);
        sc[4 * nb + e] = ok ? v : -INFINITY;
      }
      tmax_a = fmaxf(tmax_a, fmaxf(sc[4 * nb], sc[4 * nb + 1]));
      tmax_b = fmaxf(tmax_b, fmaxf(sc[4 * nb + 2], sc[4 * nb + 3]));
    }
#pragma unroll
    for (int o = 1; o <= 2; o <<= 1) {
      tmax_a = fmaxf(tmax_a, __shfl_xor_sync(0xffffffffu, tmax_a, o));
      tmax_b = fmaxf(tmax_b, __shfl_xor_sync(0xffffffffu, tmax_b, o));
    }
    const float new_a = fmaxf(mx_a, tmax_a), new_b = fmaxf(mx_b, tmax_b);
    // (new = -inf only for rows with no query: their values are never written.)
    const float base_a = new_a == -INFINITY ? 0.0f : new_a, base_b = new_b == -INFINITY ? 0.0f : new_b;
    const float l2_a = AttnExpBase(base_a), l2_b = AttnExpBase(base_b);
    const float res_a = AttnRescale(mx_a, base_a, l2_a);
    const float res_b = AttnRescale(mx_b, base_b, l2_b);
    float tsum_a = 0.0f, tsum_b = 0.0f;
#pragma unroll
    for (int nb = 0; nb < kKeys / 8; ++nb) {
      sc[4 * nb + 0] = AttnExp(sc[4 * nb + 0], l2_a);
      sc[4 * nb + 1] = AttnExp(sc[4 * nb + 1], l2_a);
      sc[4 * nb + 2] = AttnExp(sc[4 * nb + 2], l2_b);
      sc[4 * nb + 3] = AttnExp(sc[4 * nb + 3], l2_b);
      tsum_a = __fadd_rn(tsum_a, __fadd_rn(sc[4 * nb + 0], sc[4 * nb + 1]));
      tsum_b = __fadd_rn(tsum_b, __fadd_rn(sc[4 * nb + 2], sc[4 * nb + 3]));
    }
#pragma unroll
    for (int o = 1; o <= 2; o <<= 1) {
      tsum_a = __fadd_rn(tsum_a, __shfl_xor_sync(0xffffffffu, tsum_a, o));
      tsum_b = __fadd_rn(tsum_b, __shfl_xor_sync(0xffffffffu, tsum_b, o));
    }
    sum_a = __fadd_rn(__fmul_rn(sum_a, res_a), tsum_a);
    sum_b = __fadd_rn(__fmul_rn(sum_b, res_b), tsum_b);
    mx_a = new_a;
    mx_b = new_b;
#pragma unroll
    for (int i = 0; i < kHd / 8; ++i) {
      acc[4 * i + 0] = __fmul_rn(acc[4 * i + 0], res_a);
      acc[4 * i + 1] = __fmul_rn(acc[4 * i + 1], res_a);
      acc[4 * i + 2] = __fmul_rn(acc[4 * i + 2], res_b);
      acc[4 * i + 3] = __fmul_rn(acc[4 * i + 3], res_b);
    }
#pragma unroll
    for (int kc = 0; kc < kKeys / 16; ++kc) {
      p[kc][0] = PackBf16(sc[8 * kc + 0], sc[8 * kc + 1]);
      p[kc][1] = PackBf16(sc[8 * kc + 2], sc[8 * kc + 3]);
      p[kc][2] = PackBf16(sc[8 * kc + 4], sc[8 * kc + 5]);
      p[kc][3] = PackBf16(sc[8 * kc + 6], sc[8 * kc + 7]);
    }
  };
  using Yes = std::true_type;
  using No = std::false_type;
  phase(No{}, Yes{}, 0);
  softmax(0);
  for (int j = 1; j < tiles; ++j) {
    phase(Yes{}, Yes{}, j);
    softmax(j);
  }
  phase(Yes{}, No{}, tiles);
  // Rows g, g + 8 at columns 8 j + 2 t, + 1.
#pragma unroll
  for (int i = 0; i < kHd / 8; ++i) {
    const int col = 8 * i + 2 * t;
    if (row_a < a.n) {
      float* o = a.out + (int64_t{row_a} * a.num_heads + h) * kHd + col;
      o[0] = RoundAct(__fdiv_rn(acc[4 * i + 0], sum_a), a.bf16);
      o[1] = RoundAct(__fdiv_rn(acc[4 * i + 1], sum_a), a.bf16);
    }
    if (row_b < a.n) {
      float* o = a.out + (int64_t{row_b} * a.num_heads + h) * kHd + col;
      o[0] = RoundAct(__fdiv_rn(acc[4 * i + 2], sum_b), a.bf16);
      o[1] = RoundAct(__fdiv_rn(acc[4 * i + 3], sum_b), a.bf16);
    }
  }
}

// The copy's rows: a page where pages are shorter than a tile (they divide it), else the tile.
int BoxRows(int page_size) { return page_size < kKeys ? page_size : kKeys; }

template <int kHd>
Status Launch(const AttentionArgs& a, cudaStream_t s) {
  using L = Layout<kHd>;
  static const cudaError_t ready =
      cudaFuncSetAttribute(FlashWgmmaKernel<kHd>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(L::kSmem));
  if (ready != cudaSuccess) return Internal(std::string("cuda FlashWgmma: shared memory: ") + cudaGetErrorString(ready));
  const int box = BoxRows(a.page_size);
  CUtensorMap map_k, map_v;
  if (Status st = EncodeSwizzled128Heads(&map_k, a.k_pages, a.kv_rows, a.num_kv_heads, L::kSubs, box, "FlashWgmma K");
      !st.ok()) {
    return st;
  }
  if (Status st = EncodeSwizzled128Heads(&map_v, a.v_pages, a.kv_rows, a.num_kv_heads, L::kSubs, box, "FlashWgmma V");
      !st.ok()) {
    return st;
  }
  const dim3 grid(static_cast<unsigned>((a.n + kQ - 1) / kQ), static_cast<unsigned>(a.num_heads / kHeads));
  LaunchPdl(FlashWgmmaKernel<kHd>, grid, kThreads, L::kSmem, s, map_k, map_v, a, box);
  return Launched("FlashWgmma");
}

}  // namespace

bool FlashWgmmaFits(const AttentionArgs& a) {
  const bool pages = a.page_size > 0 && a.page_size % 8 == 0 && (kKeys % a.page_size == 0 || a.page_size % kKeys == 0) &&
                     a.kv_rows > 0 && a.kv_rows % a.page_size == 0 && a.kv_rows <= (int64_t{1} << 31);
  return FlashAttentionFits(a) && (a.head_dim == 64 || a.head_dim == 128 || a.head_dim == 256) && a.n > 1 && pages &&
         a.num_kv_heads > 0 && a.num_heads % a.num_kv_heads == 0 && (a.num_heads / a.num_kv_heads) % kHeads == 0;
}

Status FlashWgmma(const AttentionArgs& a, void* stream) {
  if (!FlashWgmmaFits(a)) {
    return InvalidArgument("cuda FlashWgmma: needs bf16, head_dim 64, 128 or 256, an even number of query heads a "
                           "key-value head, more than one row, aligned pointers, pages of a multiple of 8 tokens that "
                           "divide 64 or that 64 divides, and the pages' row count (kv_rows)");
  }
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (a.head_dim) {
    case 64: return Launch<64>(a, s);
    case 128: return Launch<128>(a, s);
    default: return Launch<256>(a, s);
  }
}

}  // namespace graft::cuda

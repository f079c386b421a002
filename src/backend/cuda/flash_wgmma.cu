#include "backend/cuda/flash_wgmma.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <string>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/launched.h"
#include "backend/cuda/mma_ptx.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/wgmma_ptx.cuh"

namespace graft::cuda {
namespace {

constexpr int kQ = 64, kKeys = 64, kHeads = 2, kThreads = 128 * kHeads;
constexpr int kSubBytes = 64 * 128;  // a swizzled [64 rows][64 bf16] sub-tile

// Shared memory (byte offsets from a 1024-aligned base): each head's Q tile and two buffers of
// the K tile, K-major in sub-tiles of 64 columns; two buffers of the V tile transposed ([head_dim
// rows][64 keys], K-major for P V's B operand). All in the 128-byte swizzle (wgmma_ptx.cuh).
// Head 256: 192 KB.
template <int kHd>
struct Layout {
  static constexpr int kSubs = kHd / 64;
  static constexpr int kQBytes = kSubs * kSubBytes, kKBytes = kSubs * kSubBytes, kVBytes = kHd * 128;
  static constexpr int kQ0 = 0, kK0 = kHeads * kQBytes, kV0 = kK0 + 2 * kKBytes, kEnd = kV0 + 2 * kVBytes;
  static constexpr size_t kSmem = 1024 + kEnd;
  static constexpr int kF4 = kHd / 4;                          // Q float4s a row
  static constexpr int kC8 = kHd / 8;                          // 16-byte items (8 bf16) of a K / V row
  static constexpr int kKPer = kKeys * kC8 / kThreads;         // K items a thread a tile (cp.async)
  static constexpr int kVPer = kC8 / 8;                        // V column groups a thread a tile (a key pair each)
  static_assert(kKPer * kThreads == kKeys * kC8 && kVPer * 8 * 32 == kC8 * 32, "whole items a thread");
};

// Row r, column c (< 64) of a swizzled sub-tile: 128-byte rows, 16-byte chunk c / 8 at chunk
// (c / 8) ^ (r % 8).
__device__ __forceinline__ int Swz(int r, int c) { return r * 128 + ((((c >> 3) ^ r) & 7) << 4) + (c & 7) * 2; }

// Four fp32 values as bf16 (exact for bf16-valued activations) at byte offset off of smem.
__device__ __forceinline__ void Put4(unsigned char* smem, int off, float4 v) {
  *reinterpret_cast<uint2*>(smem + off) = make_uint2(PackBf16(v.x, v.y), PackBf16(v.z, v.w));
}

// bf16 value d (0..7) of a's eight in the low half, of b's in the high half.
__device__ __forceinline__ unsigned PairBf16(const uint4& a, const uint4& b, int d) {
  const unsigned x = d < 2 ? a.x : d < 4 ? a.y : d < 6 ? a.z : a.w;
  const unsigned y = d < 2 ? b.x : d < 4 ? b.y : d < 6 ? b.z : b.w;
  return __byte_perm(x, y, d % 2 == 0 ? 0x5410 : 0x7632);
}

template <int kHd>
__global__ void __launch_bounds__(kThreads, 1) FlashWgmmaKernel(AttentionArgs a) {
  using L = Layout<kHd>;
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  extern __shared__ unsigned char raw[];
  unsigned char* sm = raw + ((1024 - (SmemAddr(raw) & 1023)) & 1023);
  __shared__ int block_len;
  __shared__ int64_t key_off[2][kKeys];  // a tile's keys' cache offsets (row · stride + head), by tile parity
  const int qb = static_cast<int>(gridDim.x - 1 - blockIdx.x);  // the last query tiles (most keys) first
  const int t0 = qb * kQ, h0 = static_cast<int>(blockIdx.y) * kHeads;
  const int kvh = h0 / (a.num_heads / a.num_kv_heads);
  const int tid = threadIdx.x, wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int h = h0 + wg;
  const int64_t kv_stride = int64_t{a.num_kv_heads} * kHd;
  const __nv_bfloat16* k_pages = static_cast<const __nv_bfloat16*>(a.k_pages);
  const __nv_bfloat16* v_pages = static_cast<const __nv_bfloat16*>(a.v_pages);

  if (tid == 0) block_len = 0;
  __syncthreads();
  if (tid < kQ && t0 + tid < a.n) atomicMax(&block_len, a.pos[t0 + tid] + 1);
  // Both heads' Q tiles, zeros past n.
  for (int e = tid; e < kHeads * kQ * L::kF4; e += kThreads) {
    const int qh = e / (kQ * L::kF4), r = e / L::kF4 % kQ, c = e % L::kF4 * 4;
    const float4 v = t0 + r < a.n ? *reinterpret_cast<const float4*>(a.q + (int64_t{t0 + r} * a.num_heads + h0 + qh) * kHd + c)
                                  : make_float4(0.f, 0.f, 0.f, 0.f);
    Put4(sm, L::kQ0 + qh * L::kQBytes + (c >> 6) * kSubBytes + Swz(r, c & 63), v);
  }
  __syncthreads();
  const int len = block_len;
  const int tiles = (len + kKeys - 1) / kKeys;

  // The next tile's keys and values (bf16 pages, attention.h; zeros at or past len: never read
  // from the cache). K: cp.async straight into buffer `buf`, 16 bytes an item (key e / kC8,
  // columns 8 (e % kC8) ..), into the swizzle. V, transposed, through registers: lane l holds
  // keys 2 l, 2 l + 1 at column group dq = kVPer · warp + i (8 columns), and stores their pairs
  // — a warp's store fills one 128-byte row of the transposed tile, no bank conflicts.
  // The keys' cache offsets are looked up (page table) two tiles ahead into key_off, by the first
  // 64 threads: a K / V load then costs one shared-memory read for its address, not a page-table
  // load, a division and 64-bit products (those were most of the kernel's instructions).
  const int wid = tid / 32;  // the block's warp 0..7
  uint4 vr[2 * L::kVPer];
  auto look_up = [&](int tile) {
    const int j = tile * kKeys + tid;
    if (tid < kKeys && j < len) {
      key_off[tile & 1][tid] =
          (int64_t{a.page_table[j / a.page_size]} * a.page_size + j % a.page_size) * kv_stride + int64_t{kvh} * kHd;
    }
  };
  auto fetch = [&](int tile, int buf) {
    const int j0 = tile * kKeys;
    const int64_t* off = key_off[tile & 1];
#pragma unroll
    for (int i = 0; i < L::kKPer; ++i) {
      const int e = tid + i * kThreads, r = e / L::kC8, c = e % L::kC8 * 8;
      const bool ok = j0 + r < len;
      CpAsync16(sm + L::kK0 + buf * L::kKBytes + (c >> 6) * kSubBytes + Swz(r, c & 63), ok ? k_pages + off[r] + c : k_pages,
                ok);
    }
    CpAsyncCommit();
#pragma unroll
    for (int i = 0; i < L::kVPer; ++i) {
      const int dq = L::kVPer * wid + i;
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int r = 2 * lane + u;
        vr[2 * i + u] = j0 + r < len ? *reinterpret_cast<const uint4*>(v_pages + off[r] + 8 * dq) : make_uint4(0u, 0u, 0u, 0u);
      }
    }
  };
  auto store_v = [&](int buf) {
#pragma unroll
    for (int i = 0; i < L::kVPer; ++i) {
      const int dq = L::kVPer * wid + i;
#pragma unroll
      for (int d = 0; d < 8; ++d) {
        *reinterpret_cast<unsigned*>(sm + L::kV0 + buf * L::kVBytes + Swz(8 * dq + d, 2 * lane)) =
            PairBf16(vr[2 * i], vr[2 * i + 1], d);
      }
    }
  };
  // The tile's K copies landed and every thread's V stores are done: visible to wgmma after the
  // barrier that follows.
  auto landed = [&]() {
    CpAsyncWait<0>();
    FenceProxyAsync();
  };

  // This thread's two query rows (g and g + 8 of its warp's 16) and their key counts (0: no query).
  const int row_a = t0 + warp * 16 + g, row_b = row_a + 8;
  const int len_a = row_a < a.n ? a.pos[row_a] + 1 : 0, len_b = row_b < a.n ? a.pos[row_b] + 1 : 0;
  float acc[kHd / 2];  // acc[4 j + e]: FlashRows' acc[j][e]
#pragma unroll
  for (int i = 0; i < kHd / 2; ++i) acc[i] = 0.0f;
  float mx_a = -INFINITY, mx_b = -INFINITY, sum_a = 0.0f, sum_b = 0.0f;
  look_up(0);
  look_up(1);
  __syncthreads();
  if (tiles > 0) {
    fetch(0, 0);
    store_v(0);
    landed();
  }
  __syncthreads();

  const unsigned char* q_tile = sm + L::kQ0 + wg * L::kQBytes;
  for (int tile = 0; tile < tiles; ++tile) {
    const int cur = tile & 1, j0 = tile * kKeys;
    // S = Q Kᵀ: head_dim's 16-wide chunks ascending, from zero.
    float s[kKeys / 2];  // s[4 nb + e]: FlashRows' s[nb][e]
#pragma unroll
    for (int i = 0; i < kKeys / 2; ++i) s[i] = 0.0f;
    WgmmaFence();
#pragma unroll
    for (int kc = 0; kc < kHd / 16; ++kc) {  // chunk kc: sub-tile kc / 4, its 32-byte step kc % 4
      const int sub = (kc / 4) * kSubBytes;
      WgmmaBf16<64>(s, SwizzledTileDesc(q_tile + sub) + 2 * (kc % 4),
                    SwizzledTileDesc(sm + L::kK0 + cur * L::kKBytes + sub) + 2 * (kc % 4));
    }
    WgmmaCommit();
    // The next tile's loads fly while the tensor cores work: its K buffer was last read by the
    // previous tile's S, its V buffer by the previous tile's P V, both waited for before the
    // barrier that ended it.
    if (tile + 1 < tiles) fetch(tile + 1, cur ^ 1);
    WgmmaWait<0>();
    FenceAccumulators(s);
    // Scores as the CPU rounds them, masked past each row's position; the tile's row max.
    float tmax_a = -INFINITY, tmax_b = -INFINITY;
#pragma unroll
    for (int nb = 0; nb < kKeys / 8; ++nb) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = j0 + nb * 8 + 2 * t + e % 2;
        const bool ok = j < (e < 2 ? len_a : len_b);
        const float sc = RoundAct(__fmul_rn(RoundAct(s[4 * nb + e], a.bf16), a.scale), a.bf16);
        s[4 * nb + e] = ok ? sc : -INFINITY;
      }
      tmax_a = fmaxf(tmax_a, fmaxf(s[4 * nb], s[4 * nb + 1]));
      tmax_b = fmaxf(tmax_b, fmaxf(s[4 * nb + 2], s[4 * nb + 3]));
    }
#pragma unroll
    for (int o = 1; o <= 2; o <<= 1) {
      tmax_a = fmaxf(tmax_a, __shfl_xor_sync(0xffffffffu, tmax_a, o));
      tmax_b = fmaxf(tmax_b, __shfl_xor_sync(0xffffffffu, tmax_b, o));
    }
    const float new_a = fmaxf(mx_a, tmax_a), new_b = fmaxf(mx_b, tmax_b);
    // (new = -inf only for rows with no query: their values are never written.)
    const float base_a = new_a == -INFINITY ? 0.0f : new_a, base_b = new_b == -INFINITY ? 0.0f : new_b;
    const float res_a = mx_a == -INFINITY ? 0.0f : expf(mx_a - base_a);
    const float res_b = mx_b == -INFINITY ? 0.0f : expf(mx_b - base_b);
    float tsum_a = 0.0f, tsum_b = 0.0f;
#pragma unroll
    for (int nb = 0; nb < kKeys / 8; ++nb) {
      s[4 * nb + 0] = expf(s[4 * nb + 0] - base_a);
      s[4 * nb + 1] = expf(s[4 * nb + 1] - base_a);
      s[4 * nb + 2] = expf(s[4 * nb + 2] - base_b);
      s[4 * nb + 3] = expf(s[4 * nb + 3] - base_b);
      tsum_a = __fadd_rn(tsum_a, __fadd_rn(s[4 * nb + 0], s[4 * nb + 1]));
      tsum_b = __fadd_rn(tsum_b, __fadd_rn(s[4 * nb + 2], s[4 * nb + 3]));
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
    for (int j = 0; j < kHd / 8; ++j) {
      acc[4 * j + 0] = __fmul_rn(acc[4 * j + 0], res_a);
      acc[4 * j + 1] = __fmul_rn(acc[4 * j + 1], res_a);
      acc[4 * j + 2] = __fmul_rn(acc[4 * j + 2], res_b);
      acc[4 * j + 3] = __fmul_rn(acc[4 * j + 3], res_b);
    }
    // O += P V, the tile's 16-key chunks ascending; P's fragment straight from S's.
    unsigned p[kKeys / 16][4];
#pragma unroll
    for (int kc = 0; kc < kKeys / 16; ++kc) {
      p[kc][0] = PackBf16(s[8 * kc + 0], s[8 * kc + 1]);
      p[kc][1] = PackBf16(s[8 * kc + 2], s[8 * kc + 3]);
      p[kc][2] = PackBf16(s[8 * kc + 4], s[8 * kc + 5]);
      p[kc][3] = PackBf16(s[8 * kc + 6], s[8 * kc + 7]);
    }
    WgmmaFence();
    const uint64_t dv = SwizzledTileDesc(sm + L::kV0 + cur * L::kVBytes);
#pragma unroll
    for (int kc = 0; kc < kKeys / 16; ++kc) WgmmaBf16Regs<kHd>(acc, p[kc], dv + 2 * kc);
    WgmmaCommit();
    if (tile + 1 < tiles) {
      store_v(cur ^ 1);
      landed();
    }
    // Tile + 2's offsets into the slot tile's used: every fetch from it was this tile's.
    look_up(tile + 2);
    WgmmaWait<0>();
    FenceAccumulators(acc);
    __syncthreads();
  }
  // Rows g, g + 8 at columns 8 j + 2 t, + 1.
#pragma unroll
  for (int j = 0; j < kHd / 8; ++j) {
    const int c = 8 * j + 2 * t;
    if (row_a < a.n) {
      float* o = a.out + (int64_t{row_a} * a.num_heads + h) * kHd + c;
      o[0] = RoundAct(__fdiv_rn(acc[4 * j + 0], sum_a), a.bf16);
      o[1] = RoundAct(__fdiv_rn(acc[4 * j + 1], sum_a), a.bf16);
    }
    if (row_b < a.n) {
      float* o = a.out + (int64_t{row_b} * a.num_heads + h) * kHd + c;
      o[0] = RoundAct(__fdiv_rn(acc[4 * j + 2], sum_b), a.bf16);
      o[1] = RoundAct(__fdiv_rn(acc[4 * j + 3], sum_b), a.bf16);
    }
  }
}

template <int kHd>
Status Launch(const AttentionArgs& a, cudaStream_t s) {
  using L = Layout<kHd>;
  static const cudaError_t ready =
      cudaFuncSetAttribute(FlashWgmmaKernel<kHd>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(L::kSmem));
  if (ready != cudaSuccess) return Internal(std::string("cuda FlashWgmma: shared memory: ") + cudaGetErrorString(ready));
  const dim3 grid(static_cast<unsigned>((a.n + kQ - 1) / kQ), static_cast<unsigned>(a.num_heads / kHeads));
  LaunchPdl(FlashWgmmaKernel<kHd>, grid, kThreads, L::kSmem, s, a);
  return Launched("FlashWgmma");
}

}  // namespace

bool FlashWgmmaFits(const AttentionArgs& a) {
  return FlashAttentionFits(a) && (a.head_dim == 64 || a.head_dim == 128 || a.head_dim == 256) && a.n > 1 && a.num_kv_heads > 0 &&
         a.num_heads % a.num_kv_heads == 0 && (a.num_heads / a.num_kv_heads) % kHeads == 0 && a.page_size > 0;
}

Status FlashWgmma(const AttentionArgs& a, void* stream) {
  if (!FlashWgmmaFits(a)) {
    return InvalidArgument("cuda FlashWgmma: needs bf16, head_dim 64, 128 or 256, an even number of query heads a "
                           "key-value head, more than one row and aligned pointers");
  }
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (a.head_dim) {
    case 64: return Launch<64>(a, s);
    case 128: return Launch<128>(a, s);
    default: return Launch<256>(a, s);
  }
}

}  // namespace graft::cuda

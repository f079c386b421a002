#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "backend/cuda/attention.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/launched.h"
#include "backend/cuda/pdl.cuh"

namespace graft::cuda {
namespace {

constexpr int kThreads = kAttnTile;  // one key per thread in a tile
constexpr int kMaxHeadDim = 256;

// Fixed-order tree reduction over the block (kThreads values in red[]).
template <typename Op>
__device__ float BlockReduce(float v, float* red, Op op) {
  red[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] = op(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  const float r = red[0];
  __syncthreads();
  return r;
}

// Query row t, head h: the whole block. KvT: the pages' type (attention.h).
template <typename KvT>
__device__ void AttentionRow(const AttentionArgs& a, int t, int h) {
  __shared__ float qs[kMaxHeadDim];
  __shared__ float p[kThreads];
  __shared__ float red[kThreads];
  const int hd = a.head_dim, kvh = h / (a.num_heads / a.num_kv_heads);
  const int64_t kv_stride = int64_t{a.num_kv_heads} * hd;
  const float* q = a.q + (int64_t{t} * a.num_heads + h) * hd;
  for (int d = threadIdx.x; d < hd; d += kThreads) qs[d] = q[d];
  __syncthreads();
  const int len = a.pos[t] + 1;
  // Each thread owns output dims d = threadIdx.x and threadIdx.x + kThreads.
  float acc0 = 0.0f, acc1 = 0.0f, mx = -INFINITY, sum = 0.0f;
  const int d0 = threadIdx.x, d1 = threadIdx.x + kThreads;
  for (int j0 = 0; j0 < len; j0 += kThreads) {
    const int j = j0 + threadIdx.x;
    float s = -INFINITY;
    if (j < len) {
      const int64_t row = int64_t{a.page_table[j / a.page_size]} * a.page_size + j % a.page_size;
      const KvT* kr = static_cast<const KvT*>(a.k_pages) + row * kv_stride + kvh * hd;
      float dot = 0.0f;
      for (int d = 0; d < hd; ++d) dot = __fadd_rn(dot, __fmul_rn(qs[d], KvValue(kr, d)));
      s = RoundAct(__fmul_rn(RoundAct(dot, a.bf16), a.scale), a.bf16);
    }
    const float tile_max = BlockReduce(s, red, [](float u, float v) { return fmaxf(u, v); });
    const float new_max = fmaxf(mx, tile_max);
    const float rescale = mx == -INFINITY ? 0.0f : expf(mx - new_max);
    const float e = j < len ? expf(s - new_max) : 0.0f;
    p[threadIdx.x] = e;
    const float tile_sum = BlockReduce(e, red, [](float u, float v) { return __fadd_rn(u, v); });
    sum = __fadd_rn(__fmul_rn(sum, rescale), tile_sum);
    acc0 = __fmul_rn(acc0, rescale);
    acc1 = __fmul_rn(acc1, rescale);
    const int count = min(kThreads, len - j0);
    for (int jj = 0; jj < count; ++jj) {
      const int jg = j0 + jj;
      const int64_t row = int64_t{a.page_table[jg / a.page_size]} * a.page_size + jg % a.page_size;
      const KvT* vr = static_cast<const KvT*>(a.v_pages) + row * kv_stride + kvh * hd;
      if (d0 < hd) acc0 = __fadd_rn(acc0, __fmul_rn(p[jj], KvValue(vr, d0)));
      if (d1 < hd) acc1 = __fadd_rn(acc1, __fmul_rn(p[jj], KvValue(vr, d1)));
    }
    mx = new_max;
    __syncthreads();
  }
  float* o = a.out + (int64_t{t} * a.num_heads + h) * hd;
  if (d0 < hd) o[d0] = RoundAct(__fdiv_rn(acc0, sum), a.bf16);
  if (d1 < hd) o[d1] = RoundAct(__fdiv_rn(acc1, sum), a.bf16);
}

template <typename KvT>
__global__ void __launch_bounds__(kThreads) AttentionKernel(AttentionArgs a) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  AttentionRow<KvT>(a, blockIdx.x / a.num_heads, blockIdx.x % a.num_heads);
}

// Block (h, y): head h of sequence y's one query row, as AttentionKernel.
template <typename KvT>
__global__ void __launch_bounds__(kThreads) AttentionSeqsKernel(AttentionArgs shape, const AttnSeq* seqs) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  AttentionRow<KvT>(PieceArgs(shape, seqs[blockIdx.y], 1), 0, blockIdx.x);
}

// The same arithmetic for kAttnGroup consecutive queries of one head per block: each key row
// of a tile is read once for all of them (instead of once per query), every query keeps its
// own running max, sum and output exactly as AttentionKernel does — the same dot order, the
// same reduction trees (run side by side), the same tiles from position 0 — and a query skips
// the tiles past its own position, so its bits are AttentionKernel's whoever shares its block.
constexpr int kAttnGroup = 16;

template <typename KvT>
__global__ void __launch_bounds__(kThreads) AttentionGroupKernel(AttentionArgs a) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  constexpr int G = kAttnGroup;
  __shared__ float qs[G][kMaxHeadDim];
  __shared__ float p[G][kThreads];
  __shared__ float red[G][kThreads];
  const int groups = (a.n + G - 1) / G;
  const int gi = blockIdx.x / a.num_heads, h = blockIdx.x % a.num_heads;
  const int t0 = gi * G, ng = min(G, a.n - t0);
  (void)groups;
  const int hd = a.head_dim, kvh = h / (a.num_heads / a.num_kv_heads);
  const int64_t kv_stride = int64_t{a.num_kv_heads} * hd;
  for (int e = threadIdx.x; e < G * hd; e += kThreads) {
    const int g = e / hd, d = e % hd;
    qs[g][d] = g < ng ? a.q[(int64_t{t0 + g} * a.num_heads + h) * hd + d] : 0.0f;
  }
  int len[G];
  int max_len = 0;
#pragma unroll
  for (int g = 0; g < G; ++g) {
    len[g] = g < ng ? a.pos[t0 + g] + 1 : 0;
    max_len = max(max_len, len[g]);
  }
  __syncthreads();
  float acc0[G], acc1[G], mx[G], sum[G];
#pragma unroll
  for (int g = 0; g < G; ++g) acc0[g] = 0.0f, acc1[g] = 0.0f, mx[g] = -INFINITY, sum[g] = 0.0f;
  const int d0 = threadIdx.x, d1 = threadIdx.x + kThreads;
  for (int j0 = 0; j0 < max_len; j0 += kThreads) {
    const int j = j0 + threadIdx.x;
    float sc[G];
    if (j < max_len) {
      const int64_t row = int64_t{a.page_table[j / a.page_size]} * a.page_size + j % a.page_size;
      const KvT* kr = static_cast<const KvT*>(a.k_pages) + row * kv_stride + kvh * hd;
      float dot[G];
#pragma unroll
      for (int g = 0; g < G; ++g) dot[g] = 0.0f;
      for (int d = 0; d < hd; ++d) {
        const float kd = KvValue(kr, d);
#pragma unroll
        for (int g = 0; g < G; ++g) dot[g] = __fadd_rn(dot[g], __fmul_rn(qs[g][d], kd));
      }
#pragma unroll
      for (int g = 0; g < G; ++g) {
        sc[g] = j < len[g] ? RoundAct(__fmul_rn(RoundAct(dot[g], a.bf16), a.scale), a.bf16) : -INFINITY;
      }
    } else {
#pragma unroll
      for (int g = 0; g < G; ++g) sc[g] = -INFINITY;
    }
    // Tile max per query: AttentionKernel's tree, for every query at once.
#pragma unroll
    for (int g = 0; g < G; ++g) red[g][threadIdx.x] = sc[g];
    __syncthreads();
    for (int st = kThreads / 2; st > 0; st >>= 1) {
      for (int idx = threadIdx.x; idx < G * st; idx += kThreads) {
        const int g = idx / st, i = idx % st;
        red[g][i] = fmaxf(red[g][i], red[g][i + st]);
      }
      __syncthreads();
    }
    float new_max[G], e[G];
#pragma unroll
    for (int g = 0; g < G; ++g) {
      new_max[g] = fmaxf(mx[g], red[g][0]);
      e[g] = j < len[g] ? expf(sc[g] - new_max[g]) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int g = 0; g < G; ++g) p[g][threadIdx.x] = e[g], red[g][threadIdx.x] = e[g];
    __syncthreads();
    for (int st = kThreads / 2; st > 0; st >>= 1) {
      for (int idx = threadIdx.x; idx < G * st; idx += kThreads) {
        const int g = idx / st, i = idx % st;
        red[g][i] = __fadd_rn(red[g][i], red[g][i + st]);
      }
      __syncthreads();
    }
#pragma unroll
    for (int g = 0; g < G; ++g) {
      if (j0 >= len[g]) continue;  // past this query's keys: its state stays as it is
      const float rescale = mx[g] == -INFINITY ? 0.0f : expf(mx[g] - new_max[g]);
      sum[g] = __fadd_rn(__fmul_rn(sum[g], rescale), red[g][0]);
      acc0[g] = __fmul_rn(acc0[g], rescale);
      acc1[g] = __fmul_rn(acc1[g], rescale);
      mx[g] = new_max[g];
    }
    const int count = min(kThreads, max_len - j0);
    for (int jj = 0; jj < count; ++jj) {
      const int jg = j0 + jj;
      const int64_t row = int64_t{a.page_table[jg / a.page_size]} * a.page_size + jg % a.page_size;
      const KvT* vr = static_cast<const KvT*>(a.v_pages) + row * kv_stride + kvh * hd;
      const float v0 = d0 < hd ? KvValue(vr, d0) : 0.0f, v1 = d1 < hd ? KvValue(vr, d1) : 0.0f;
#pragma unroll
      for (int g = 0; g < G; ++g) {
        if (jg >= len[g]) continue;
        acc0[g] = __fadd_rn(acc0[g], __fmul_rn(p[g][jj], v0));
        acc1[g] = __fadd_rn(acc1[g], __fmul_rn(p[g][jj], v1));
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int g = 0; g < G; ++g) {
    if (g >= ng) continue;
    float* o = a.out + (int64_t{t0 + g} * a.num_heads + h) * hd;
    if (d0 < hd) o[d0] = RoundAct(__fdiv_rn(acc0[g], sum[g]), a.bf16);
    if (d1 < hd) o[d1] = RoundAct(__fdiv_rn(acc1[g], sum[g]), a.bf16);
  }
}

}  // namespace

Status AttentionSeqs(const AttentionArgs& shape, const AttnSeq* seqs, int count, bool flash, void* stream) {
  const AttentionArgs& a = shape;
  if (count < 0 || count > 65535 || a.num_heads <= 0 || a.num_kv_heads <= 0 || a.num_heads % a.num_kv_heads != 0 ||
      a.head_dim <= 0 || a.head_dim > kMaxHeadDim || a.page_size <= 0 || (count > 0 && seqs == nullptr)) {
    return InvalidArgument("cuda AttentionSeqs: bad shape or count (head_dim 1..256, heads a multiple of kv heads, up "
                           "to 65535 sequences)");
  }
  if (count == 0) return Status::Ok();
  if (flash) return FlashAttentionSeqs(shape, seqs, count, stream);
  const dim3 grid(static_cast<unsigned>(a.num_heads), static_cast<unsigned>(count));
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (a.bf16) {
    LaunchPdl(AttentionSeqsKernel<__nv_bfloat16>, grid, kThreads, 0, s, shape, seqs);
  } else {
    LaunchPdl(AttentionSeqsKernel<float>, grid, kThreads, 0, s, shape, seqs);
  }
  return Launched("AttentionSeqs");
}

Status Attention(const AttentionArgs& a, void* stream) {
  if (a.n < 0 || a.num_heads <= 0 || a.num_kv_heads <= 0 || a.num_heads % a.num_kv_heads != 0 || a.head_dim <= 0 ||
      a.head_dim > kMaxHeadDim || a.page_size <= 0) {
    return InvalidArgument("cuda Attention: bad shape (head_dim must be 1..256, heads a multiple of kv heads)");
  }
  if (a.n == 0) return Status::Ok();
  if (FlashAttentionFits(a)) return FlashAttention(a, stream);
  if (a.n >= kAttnGroup) {  // prefill: queries share their key reads, same bits per query
    const int64_t blocks = int64_t{(a.n + kAttnGroup - 1) / kAttnGroup} * a.num_heads;
    if (blocks > 0x7fffffff) return InvalidArgument("cuda Attention: too many (row group, head) pairs");
    LaunchPdl(a.bf16 ? AttentionGroupKernel<__nv_bfloat16> : AttentionGroupKernel<float>, static_cast<unsigned>(blocks),
              kThreads, 0, static_cast<cudaStream_t>(stream), a);
  } else {
    const int64_t blocks = int64_t{a.n} * a.num_heads;
    if (blocks > 0x7fffffff) return InvalidArgument("cuda Attention: too many (row, head) pairs");
    LaunchPdl(a.bf16 ? AttentionKernel<__nv_bfloat16> : AttentionKernel<float>, static_cast<unsigned>(blocks), kThreads,
              0, static_cast<cudaStream_t>(stream), a);
  }
  return Launched("Attention");
}

}  // namespace graft::cuda

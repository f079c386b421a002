#include "backend/cuda/gemm_decode.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/gemm_pipe.h"
#include "backend/cuda/launched.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/mma_ptx.cuh"

namespace graft::cuda {
namespace {

// One shape of the decode form: kWarps warps a block, each owning 8 outputs for all rows (kMT
// tiles of 16), K streamed kDK columns a stage through a kStages-deep cp.async ring that holds
// the block's 8 kWarps weight rows and the m x rows, kDK + 8 elements apart (ldmatrix's eight
// row reads then land in eight different bank groups).
template <int kMT, int kWarps, int kDK, int kStages>
struct DecodeShape {
  static constexpr int kMT_ = kMT, kWarps_ = kWarps, kDK_ = kDK, kStages_ = kStages;
  static constexpr int kLd = kDK + 8;
  static constexpr int kPer = kDK / 8;                   // 16-byte pieces in a row of a full stage
  static constexpr int kWPieces = kPer / 4;              // weight pieces per thread per stage
  static constexpr int kThreads = 32 * kWarps;
  static int64_t SmemBytes(int64_t m) { return int64_t{kStages} * (8 * kWarps + m) * kLd * 2; }
};
// The shape is picked by the row count and the weight's outputs (a function of m and N, never
// of the bits: every shape sums each output's K chunks in the same order). More warps a block
// share each stage's x rows (x is read from L2 once a block: with a warp a block at 16 rows,
// twice the weight's bytes), fewer leave more blocks for weights with few outputs (a decode
// step's down and o projections: 5,120 outputs are 640 one-warp blocks but 80 eight-warp ones).
// Chosen by sweeping the H200 over Qwen3.5-27B's bf16 projections at 1-64 rows
// (bench/results/decode.md § attn-prep (2026-12-02)); "wide" is N >= kWideOutputs.
constexpr int64_t kWideOutputs = 8192;
// One row, few outputs (down, o, the GDN out-projection): two warps a block, six stages of 256
// columns — 24 KB of weights in flight a warp, 54 KB of shared memory a block, so 5,120 outputs'
// 320 blocks are all resident at once. Against one warp and four stages: down 61.7 -> 57.8 us,
// o / GDN out 26.9 -> 24.8 us (Qwen3.5-27B, 4-8%); one warp with six or eight stages, eight
// stages of 128 columns, four or six of 512: equal or slower
// (bench/results/decode.md § stream (2026-12-03)).
using Shape1 = DecodeShape<1, 2, 256, 6>;
// One row, wide (gate|up, the GDN in-projection, q|k|v, the head): four warps, three stages of
// 256 columns — 9-21% faster there, 15% slower on the down projection. (Four stages, eight
// warps, two warps, three stages of 512 columns: equal or slower, bench/results/decode.md § stream (2026-12-03).)
using Shape1Wide = DecodeShape<1, 4, 256, 3>;
// 2 to 16 rows: eight warps (wide) or six. The one-warp form ran 16 rows at 47% of the copy
// bandwidth (projections) and 37% (head); these at 63% and 87%.
using Shape16 = DecodeShape<1, 6, 128, 4>;
using Shape16Wide = DecodeShape<1, 8, 128, 4>;
// 17 to 32 rows: eight warps (+23% on the step's projections against four).
using Shape32 = DecodeShape<2, 8, 128, 4>;
// 33 to 64 rows: eight warps and three stages (wide; 64 rows' stages are large), else four
// warps and four stages.
using Shape64 = DecodeShape<4, 4, 128, 4>;
using Shape64Wide = DecodeShape<4, 8, 128, 3>;

// One product of a launch as a block sees it: GemmDecode's arguments, or its group's
// (GemmDecodeGroups). x row r is xb's row x_rows[r] (null: r), rows x_ld apart, repeating along K
// every x_cols columns; the product over K slice s (kz columns) lands at y + s m ldy.
struct Problem {
  const __nv_bfloat16* xb;
  const int32_t* x_rows;
  int64_t x_ld, x_cols;
  int m;
  const __nv_bfloat16* w;
  int64_t n, k, kz;
  float* y;
  int64_t ldy;
  const int32_t* add_rows;
  float add_scale;
  const float* x_partial;  // DecodeGroup::x_partial (null: x from xb)
  int64_t x_splits;
};
// Where each group's blocks start in a GemmDecodeGroups launch's one-dimensional grid.
struct GroupStarts {
  int count = 0;
  int32_t first[kMaxDecodeGroups + 1] = {};
};

// kGroups: a group launch (groups, starts); else the product `one`, x's rows in order.
template <class S, bool kGroups>
__global__ void __launch_bounds__(S::kThreads) GemmDecodeKernel(Problem one, const DecodeGroup* __restrict__ groups,
                                                                GroupStarts starts, bool round_bf16, bool add) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  constexpr int kDK = S::kDK_, kLd = S::kLd, kPer = S::kPer, kStages = S::kStages_, kT = S::kThreads;
  extern __shared__ __align__(16) __nv_bfloat16 sm[];
  // This block's product and its place in it: (output block, K slice) = (blockIdx.x, blockIdx.y),
  // or, in a group launch, its group's blocks in order (output blocks, then slices).
  Problem p = one;
  int64_t bx = blockIdx.x, by = blockIdx.y;
  if constexpr (kGroups) {
    int gi = 0;
    while (gi + 1 < starts.count && static_cast<int32_t>(blockIdx.x) >= starts.first[gi + 1]) ++gi;
    const DecodeGroup& g = groups[gi];
    p = Problem{reinterpret_cast<const __nv_bfloat16*>(g.xb), g.x_rows, g.x_ld, g.k, static_cast<int>(g.m),
                reinterpret_cast<const __nv_bfloat16*>(g.w), g.n, g.k, g.split_k > 0 ? g.split_k : g.k, g.y, g.ldy,
                g.y_rows, g.scale, g.x_partial, g.x_splits};
    const int64_t nbx = (g.n + 8 * S::kWarps_ - 1) / (8 * S::kWarps_), local = blockIdx.x - starts.first[gi];
    bx = local % nbx;
    by = local / nbx;
    round_bf16 = g.round;
  }
  const __nv_bfloat16* __restrict__ xb = p.xb;
  const __nv_bfloat16* __restrict__ w = p.w;
  const int m = p.m;
  const int64_t n = p.n, k = p.k, kz = p.kz, x_cols = p.x_cols, x_ld = kGroups ? p.x_ld : p.x_cols, ldy = p.ldy;
  const int32_t* __restrict__ x_rows = kGroups ? p.x_rows : nullptr;
  float* __restrict__ y = p.y;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
  const int rows = 8 * S::kWarps_ + m;  // smem rows a stage: weights, then x
  const int64_t nb = bx * 8 * S::kWarps_;
  // This block's K range (its slice of a split product, else all of K) and its output.
  const int64_t kb = by * kz, ke = min(k, kb + kz);
  y += by * m * ldy;
  // x row r's element offset in xb.
  auto x_row = [&](int r) { return int64_t{x_rows != nullptr ? x_rows[r] : r} * x_ld; };
  // This thread's weight pieces of every full stage: row r = e / kPer, piece e % kPer. Rows past
  // N (the last block's idle warps) read row N - 1; their outputs are never stored.
  const __nv_bfloat16* wsrc[S::kWPieces];
  int wdst[S::kWPieces];
#pragma unroll
  for (int i = 0; i < S::kWPieces; ++i) {
    const int e = tid + i * kT, r = e / kPer, c = (e % kPer) * 8;
    wsrc[i] = w + min(nb + r, n - 1) * k + c;
    wdst[i] = r * kLd + c;
  }
  // x's rows repeat along K every x_cols columns (x_cols == K, or a multiple of kDK dividing it).
  // With x_partial, x row r's 8 columns from column col are the slices' sums (SumOfSlices), rounded
  // to bf16 and stored (the stage is read only after the barrier that follows).
  const float* __restrict__ x_partial = kGroups ? p.x_partial : nullptr;
  auto x_sums = [&](__nv_bfloat16* dst, int r, int64_t col) {
    const int64_t count = int64_t{m} * k, e = r * k + col;
    float v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = SumOfSlices(x_partial, p.x_splits, count, e + j);
    *reinterpret_cast<uint4*>(dst) =
        make_uint4(PackBf16(v[0], v[1]), PackBf16(v[2], v[3]), PackBf16(v[4], v[5]), PackBf16(v[6], v[7]));
  };
  auto load = [&](int st, int64_t k0) {
    __nv_bfloat16* base = sm + st * rows * kLd;
    const __nv_bfloat16* xk = xb + (x_cols == k ? k0 : k0 % x_cols);
    if (ke - k0 >= kDK) {
#pragma unroll
      for (int i = 0; i < S::kWPieces; ++i) CpAsync16(base + wdst[i], wsrc[i] + k0);
      for (int e = tid; e < m * kPer; e += kT) {
        const int r = e / kPer, c = (e % kPer) * 8;
        if (x_partial != nullptr) {
          x_sums(base + (8 * S::kWarps_ + r) * kLd + c, r, k0 + c);
        } else {
          CpAsync16(base + (8 * S::kWarps_ + r) * kLd + c, xk + x_row(r) + c);
        }
      }
    } else {  // the last, partial stage
      const int per = static_cast<int>(ke - k0) / 8;
      for (int e = tid; e < rows * per; e += kT) {
        const int r = e / per, c = (e % per) * 8;
        if (r >= 8 * S::kWarps_ && x_partial != nullptr) {
          x_sums(base + r * kLd + c, r - 8 * S::kWarps_, k0 + c);
          continue;
        }
        const __nv_bfloat16* src = r < 8 * S::kWarps_ ? w + min(nb + r, n - 1) * k + k0 + c
                                                       : xk + x_row(r - 8 * S::kWarps_) + c;
        CpAsync16(base + r * kLd + c, src);
      }
    }
  };
  float acc[S::kMT_][4] = {};
  const int64_t slices = (ke - kb + kDK - 1) / kDK;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < slices) load(s, kb + int64_t{s} * kDK);
    CpAsyncCommit();
  }
  // ldmatrix row addresses (element offsets within a stage): the weights, two 16-column chunks
  // at a time (matrices: chunk c's K 0-7, 8-15, chunk c + 1's); x, one 16 x 16 tile (rows 0-7
  // and 8-15 at K 0-7, then at K 8-15), rows past m reading row m - 1 (their outputs unused).
  const int w_off = (8 * warp + lane % 8) * kLd + (lane / 8) * 8;
  const int w_off2 = (8 * warp + lane % 8) * kLd + ((lane / 8) % 2) * 8;  // one chunk (ldmatrix.x2)
  int x_off[S::kMT_];
#pragma unroll
  for (int mt = 0; mt < S::kMT_; ++mt) {
    const int r = min(16 * mt + lane % 16, m - 1);
    x_off[mt] = (8 * S::kWarps_ + r) * kLd + (lane / 16) * 8;
  }
  for (int64_t i = 0; i < slices; ++i) {
    CpAsyncWait<kStages - 2>();  // slice i has landed (this thread's copies) ...
    __syncthreads();             // ... and every thread's; all are done with slice i - 1's stage
    if (i + kStages - 1 < slices) load(static_cast<int>((i + kStages - 1) % kStages), kb + (i + kStages - 1) * kDK);
    CpAsyncCommit();
    const __nv_bfloat16* base = sm + static_cast<int>(i % kStages) * rows * kLd;
    const int span = static_cast<int>(min(static_cast<int64_t>(kDK), ke - kb - i * kDK));  // a multiple of 16
    auto chunk = [&](int kk, unsigned b0, unsigned b1) {
#pragma unroll
      for (int mt = 0; mt < S::kMT_; ++mt) {
        unsigned a[4];
        LdMatrixX4(a, base + x_off[mt] + kk);
        Mma16816(acc[mt], a, b0, b1);
      }
    };
    if (span == kDK) {
#pragma unroll
      for (int kk = 0; kk < kDK; kk += 32) {
        unsigned b[4];
        LdMatrixX4(b, base + w_off + kk);
        chunk(kk, b[0], b[1]);
        chunk(kk + 16, b[2], b[3]);
      }
    } else {
      for (int kk = 0; kk < span; kk += 16) {
        unsigned b0, b1;
        LdMatrixX2(b0, b1, base + w_off2 + kk);
        chunk(kk, b0, b1);
      }
    }
  }
  CpAsyncWait<0>();
  const int64_t c = nb + 8 * warp + 2 * t;
  if (c >= n) return;
  if (add) {  // GemmDecodeAddRows: LoraScatterAdd's arithmetic on the rounded outputs
#pragma unroll
    for (int mt = 0; mt < S::kMT_; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = 16 * mt + g + 8 * h;
        if (r >= m) continue;
        float* yr = y + int64_t{p.add_rows ? p.add_rows[r] : r} * ldy + c;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float d = RoundAct(__fmul_rn(RoundAct(acc[mt][2 * h + e], true), p.add_scale), true);
          yr[e] = RoundAct(__fadd_rn(yr[e], d), true);
        }
      }
    }
    return;
  }
#pragma unroll
  for (int mt = 0; mt < S::kMT_; ++mt) {
    const int r0 = 16 * mt + g, r1 = r0 + 8;
    if (r0 < m) {
      y[r0 * ldy + c] = RoundAct(acc[mt][0], round_bf16);
      y[r0 * ldy + c + 1] = RoundAct(acc[mt][1], round_bf16);
    }
    if (r1 < m) {
      y[r1 * ldy + c] = RoundAct(acc[mt][2], round_bf16);
      y[r1 * ldy + c + 1] = RoundAct(acc[mt][3], round_bf16);
    }
  }
}

// One launch of the kernel: a product alone (groups null: a grid of output blocks by K slices) or
// a group launch (groups on the device, host the same array here: each group's output blocks and
// slices one after another in a one-dimensional grid).
struct Launch1 {
  Problem one{};
  const DecodeGroup* groups = nullptr;
  const DecodeGroup* host = nullptr;
  int count = 0;
  int64_t max_m = 0;
  bool round = false, add = false;
};

template <class S, bool kGroups>
Status LaunchKernel(const Launch1& l, cudaStream_t s) {
  // The kernel needs no L1 cache (x travels with the weights through shared memory): all of the
  // unified memory as shared memory lets the most blocks sit on each multiprocessor.
  static const cudaError_t ready = [] {
    cudaError_t e = cudaFuncSetAttribute(GemmDecodeKernel<S, kGroups>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(S::SmemBytes(16 * S::kMT_)));
    if (e == cudaSuccess) {
      e = cudaFuncSetAttribute(GemmDecodeKernel<S, kGroups>, cudaFuncAttributePreferredSharedMemoryCarveout,
                               cudaSharedmemCarveoutMaxShared);
    }
    return e;
  }();
  if (ready != cudaSuccess) return Internal(std::string("cuda GemmDecode: shared memory: ") + cudaGetErrorString(ready));
  const int64_t per_block = 8 * S::kWarps_;
  auto blocks = [&](int64_t n, int64_t k, int64_t kz) { return (n + per_block - 1) / per_block * ((k + kz - 1) / kz); };
  GroupStarts starts;
  dim3 grid;
  if constexpr (!kGroups) {
    grid = dim3(static_cast<unsigned>((l.one.n + per_block - 1) / per_block), static_cast<unsigned>((l.one.k + l.one.kz - 1) / l.one.kz));
  } else {
    int64_t at = 0;
    starts.count = l.count;
    for (int i = 0; i < l.count; ++i) {
      starts.first[i] = static_cast<int32_t>(at);
      const DecodeGroup& g = l.host[i];
      at += blocks(g.n, g.k, g.split_k > 0 ? g.split_k : g.k);
    }
    if (at > 0x7fffffff) return InvalidArgument("cuda GemmDecodeGroups: too many blocks for one launch");
    starts.first[l.count] = static_cast<int32_t>(at);
    grid = dim3(static_cast<unsigned>(at));
  }
  LaunchPdl(GemmDecodeKernel<S, kGroups>, grid, S::kThreads, static_cast<size_t>(S::SmemBytes(l.max_m)), s, l.one, l.groups,
            starts, l.round, l.add);
  return Launched(kGroups ? "GemmDecodeGroups" : "GemmDecode");
}
template <class S>
Status Launch(const Launch1& l, cudaStream_t s) {
  return l.groups != nullptr ? LaunchKernel<S, true>(l, s) : LaunchKernel<S, false>(l, s);
}

// The shape for the launch's rows (the most any of its products has) and outputs.
Status LaunchShaped(const Launch1& l, bool wide, cudaStream_t s) {
  if (l.max_m == 1) return wide ? Launch<Shape1Wide>(l, s) : Launch<Shape1>(l, s);
  if (l.max_m <= 16) return wide ? Launch<Shape16Wide>(l, s) : Launch<Shape16>(l, s);
  if (l.max_m <= 32) return Launch<Shape32>(l, s);
  return wide ? Launch<Shape64Wide>(l, s) : Launch<Shape64>(l, s);
}

// GemmDecode's needs on one product (x_cols the repeat period, x_ld the row stride).
Status Check(int64_t m, const void* xb, int64_t x_ld, int64_t x_cols, const void* w, int64_t n, int64_t k,
             int64_t kz, int64_t ldy, const char* what) {
  if (m < 1 || m > kDecodeMaxRows || n <= 0 || n % 8 != 0 || k <= 0 || k % 16 != 0 || ldy < n ||
      reinterpret_cast<uintptr_t>(xb) % 16 != 0 || reinterpret_cast<uintptr_t>(w) % 16 != 0 || kz % 16 != 0 ||
      x_ld % 8 != 0 || x_ld < x_cols || (k + kz - 1) / kz > 65535 ||
      (x_cols != k && (x_cols % kRepeatAlign != 0 || k % x_cols != 0 || kz % kRepeatAlign != 0))) {
    return InvalidArgument(std::string("cuda ") + what +
                           ": needs 1..64 rows, N % 8 == 0, K % 16 == 0, aligned operands, split slices a multiple of 16, "
                           "a repeated x a multiple of 256 columns dividing K");
  }
  if (n / 8 > 0x7fffffff) return InvalidArgument(std::string("cuda ") + what + ": too many outputs for one launch");
  return Status::Ok();
}

Status Dispatch(const uint16_t* xb, int64_t m, const uint16_t* w, int64_t n, int64_t k, float* y, int64_t ldy,
                bool round_output, void* stream, int64_t split_k, int64_t x_cols, bool add, const int32_t* add_rows,
                float scale) {
  const int64_t kz = split_k > 0 ? split_k : k, xc = x_cols > 0 ? x_cols : k;
  GRAFT_RETURN_IF_ERROR(Check(m, xb, xc, xc, w, n, k, kz, ldy, "GemmDecode"));
  Launch1 l;
  l.one = Problem{reinterpret_cast<const __nv_bfloat16*>(xb), nullptr, xc, xc, static_cast<int>(m),
                  reinterpret_cast<const __nv_bfloat16*>(w), n, k, kz, y, ldy, add_rows, scale, nullptr, 0};
  l.max_m = m;
  l.round = round_output;
  l.add = add;
  return LaunchShaped(l, n >= kWideOutputs, static_cast<cudaStream_t>(stream));
}

}  // namespace

Status GemmDecode(const uint16_t* xb, int64_t m, const uint16_t* w, int64_t n, int64_t k, float* y, int64_t ldy,
                  bool round_output, void* stream, int64_t split_k, int64_t x_cols) {
  return Dispatch(xb, m, w, n, k, y, ldy, round_output, stream, split_k, x_cols, false, nullptr, 1.0f);
}

Status GemmDecodeAddRows(const uint16_t* xb, int64_t m, const uint16_t* w, int64_t n, int64_t k, float* y, int64_t ldy,
                         const int32_t* rows, float scale, void* stream) {
  return Dispatch(xb, m, w, n, k, y, ldy, true, stream, 0, 0, true, rows, scale);
}

Status GemmDecodeGroups(const DecodeGroup* groups, const DecodeGroup* host, int count, bool add, void* stream) {
  if (count < 0 || count > kMaxDecodeGroups) {
    return InvalidArgument("cuda GemmDecodeGroups: 0.." + std::to_string(kMaxDecodeGroups) + " products a launch");
  }
  if (count == 0) return Status::Ok();
  if (groups == nullptr || host == nullptr) return InvalidArgument("cuda GemmDecodeGroups: no products given");
  Launch1 l;
  l.groups = groups;
  l.host = host;
  l.count = count;
  l.round = add;
  l.add = add;
  bool wide = false;
  for (int i = 0; i < count; ++i) {
    const DecodeGroup& g = host[i];
    if (add && g.split_k > 0) return InvalidArgument("cuda GemmDecodeGroups: an added product is not split");
    if (g.x_partial != nullptr &&
        (!add || g.x_rows != nullptr || g.x_splits < 1 || reinterpret_cast<uintptr_t>(g.x_partial) % 16 != 0)) {
      return InvalidArgument("cuda GemmDecodeGroups: x from a split product's slices only for an added product, its rows "
                             "in order, one slice or more, 16-byte aligned");
    }
    GRAFT_RETURN_IF_ERROR(Check(g.m, g.xb, g.x_ld, g.k, g.w, g.n, g.k, g.split_k > 0 ? g.split_k : g.k, g.ldy,
                                "GemmDecodeGroups"));
    l.max_m = std::max(l.max_m, g.m);
    wide = wide || g.n >= kWideOutputs;
  }
  return LaunchShaped(l, wide, static_cast<cudaStream_t>(stream));
}

}  // namespace graft::cuda

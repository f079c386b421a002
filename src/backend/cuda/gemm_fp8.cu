#include "backend/cuda/gemm_fp8.h"

#include <cuda_runtime.h>

#include <string>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/mma_ptx.cuh"

namespace graft::cuda {
namespace {

// 128 x 128 outputs a block, 8 warps of 64 x 32, K in 128-byte (128-code) stages, four deep.
constexpr int kM = 128, kN = 128, kBK = 128, kStages = 4, kThreads = 256;
constexpr int kLd = kBK + 16;  // bytes between rows: ldmatrix's eight row reads in eight bank groups
constexpr int kPieces = kBK / 16;  // 16-byte copies per row and stage
constexpr int kPer = kM * kPieces / kThreads;

struct Smem {
  uint8_t a[kStages][kM][kLd];
  uint8_t b[kStages][kN][kLd];
};

// d += a · b over 32 K: e4m3 codes in, fp32 accumulate. The fragments hold four codes a
// register in the bytes the bf16 m16n8k16 fragments hold two bf16 in (lane (g, t): a rows g,
// g + 8 at K 4t..4t+3 and 16+4t..; b output g at K 4t.. and 16+4t..), so the bf16 forms'
// ldmatrix addressing, counted in bytes, loads them.
__device__ __forceinline__ void MmaE4m3(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__global__ void __launch_bounds__(kThreads, 1)
    GemmFp8Kernel(const uint8_t* __restrict__ xq, const float* __restrict__ sx, int64_t m, DevWeight w, int64_t group,
                  float* __restrict__ y, int64_t ldy, bool round_bf16, int mtiles) {
  extern __shared__ __align__(128) unsigned char raw[];
  Smem& sm = *reinterpret_cast<Smem*>(raw);
  const int64_t n = w.rows, k = w.cols, groups = (k + group - 1) / group;
  const auto* wq = static_cast<const uint8_t*>(w.data);
  const int64_t row0 = int64_t{static_cast<int>(blockIdx.x) % mtiles} * kM,
                col0 = int64_t{static_cast<int>(blockIdx.x) / mtiles} * kN;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, wm = warp / 4, wn = warp % 4;

  auto load = [&](int st, int64_t k0) {
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int c = tid + kThreads * i, r = c / kPieces, cc = (c % kPieces) * 16;
      const int64_t ga = row0 + r, gb = col0 + r, gc = k0 + cc;
      CpAsync16(&sm.a[st][r][cc], ga < m && gc < k ? xq + ga * k + gc : xq, ga < m && gc < k);
      CpAsync16(&sm.b[st][r][cc], gb < n && gc < k ? wq + gb * k + gc : wq, gb < n && gc < k);
    }
  };

  float total[4][4][4], part[4][4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) total[i][j][e] = part[i][j][e] = 0.0f;

  const int64_t slices = (k + kBK - 1) / kBK;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < slices) load(s, int64_t{s} * kBK);
    CpAsyncCommit();
  }
  const int a_row = wm * 64 + lane % 16, a_col = (lane / 16) * 16;
  const int b_row = wn * 32 + lane % 8 + (lane / 16) * 8, b_col = ((lane / 8) % 2) * 16;
  for (int64_t t = 0; t < slices; ++t) {
    CpAsyncWait<kStages - 2>();
    __syncthreads();
    if (t + kStages - 1 < slices) load(static_cast<int>((t + kStages - 1) % kStages), (t + kStages - 1) * kBK);
    CpAsyncCommit();
    const int st = static_cast<int>(t % kStages);
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 32) {
      if (t * kBK + kk >= k) break;  // a chunk wholly past K adds nothing
      unsigned a[4][4], b[2][4];
#pragma unroll
      for (int i = 0; i < 4; ++i) LdMatrixX4(a[i], &sm.a[st][a_row + 16 * i][kk + a_col]);
#pragma unroll
      for (int j = 0; j < 2; ++j) LdMatrixX4(b[j], &sm.b[st][b_row + 16 * j][kk + b_col]);
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) MmaE4m3(part[i][j], a[i], b[j / 2][(j % 2) * 2], b[j / 2][(j % 2) * 2 + 1]);
    }
    const int64_t k1 = (t + 1) * kBK;
    if (k1 % group == 0 || t + 1 == slices) {  // the group ends: total += dot · (sx · sw), dot restarts
      const int64_t g = t * kBK / group;
      // sw: fp8-block's is one value across the tile (its 128 columns sit in one weight block:
      // blocks are 128k wide and tiles start at multiples of 128); per channel, one a column.
      const float block_ws = w.format == DevFormat::kFp8Channel ? 0.0f : w.scale[(col0 / w.group) * ((k + w.group - 1) / w.group) + g];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t r = row0 + wm * 64 + 16 * i + lane / 4 + 8 * h;
          const float xs = r < m ? sx[r * groups + g] : 0.0f;
#pragma unroll
          for (int j = 0; j < 4; ++j) {
#pragma unroll
            for (int q = 0; q < 2; ++q) {
              const int64_t c = col0 + wn * 32 + 8 * j + 2 * (lane % 4) + q;
              const float ws = w.format == DevFormat::kFp8Channel ? (c < n ? w.scale[c] : 0.0f) : block_ws;
              float& p = part[i][j][2 * h + q];
              total[i][j][2 * h + q] = __fadd_rn(total[i][j][2 * h + q], __fmul_rn(p, __fmul_rn(xs, ws)));
              p = 0.0f;
            }
          }
        }
      }
    }
  }
  CpAsyncWait<0>();
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t r = row0 + wm * 64 + 16 * i + lane / 4 + (e / 2) * 8;
        const int64_t c = col0 + wn * 32 + 8 * j + 2 * (lane % 4) + e % 2;
        if (r < m && c < n) y[r * ldy + c] = RoundAct(total[i][j][e], round_bf16);
      }
    }
  }
}

// The decode form, 1..16 rows: a warp owns 16 outputs — the weights are the mma's A operand
// (16 rows) and the x rows its N (8 a tile, two tiles past 8 rows), so one m16n8k32 covers 16
// outputs where x-as-A covered 8 (batch 1 uses one N column either way) — and streams their
// codes and the x rows' codes through a four-stage cp.async ring of 256-column stages; per
// output the same chain as the tile kernel — four m16n8k32 chunks a 128-column group into
// `part`, then total += part · (sx · sw) — so a row has the same bits here as among a thousand
// (each output's 32 products sit in the same K places either way round).
constexpr int kDK = 256, kDStages = 4, kDLd = kDK + 16;  // bytes a stage and between rows
constexpr int kDRows = 16;                               // outputs a warp

template <int kNt>
__global__ void __launch_bounds__(32) GemmFp8DecodeKernel(const uint8_t* __restrict__ xq, const float* __restrict__ sx,
                                                          int m, DevWeight w, int64_t group, float* __restrict__ y,
                                                          int64_t ldy, bool round_bf16) {
  extern __shared__ __align__(16) unsigned char sm[];
  const int stage_bytes = (kDRows + m) * kDLd;  // 16 weight rows, then m x rows
  const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
  const int64_t n = w.rows, k = w.cols, groups = (k + group - 1) / group, n0 = int64_t{blockIdx.x} * kDRows;
  const auto* wq = static_cast<const uint8_t*>(w.data);
  // Copies: a stage row is 16 pieces of 16 bytes; lane copies piece lane % 16 of rows lane / 16,
  // + 2, ... (8 of the 16 weight rows, then the x rows alike); zeros past N and K.
  const int pc = (lane % 16) * 16, pr = lane / 16;
  auto load = [&](int st, int64_t k0) {
    unsigned char* base = sm + st * stage_bytes;
    const int64_t gc = k0 + pc;
    const bool kin = gc < k;
#pragma unroll
    for (int i = 0; i < kDRows / 2; ++i) {
      const int r = pr + 2 * i;
      const bool v = kin && n0 + r < n;
      CpAsync16(base + r * kDLd + pc, v ? wq + (n0 + r) * k + gc : wq, v);
    }
    for (int r = pr; r < m; r += 2) CpAsync16(base + (kDRows + r) * kDLd + pc, kin ? xq + int64_t{r} * k + gc : xq, kin);
  };
  float total[kNt][4] = {}, part[kNt][4] = {};
  const int64_t slices = (k + kDK - 1) / kDK;
#pragma unroll
  for (int s = 0; s < kDStages - 1; ++s) {
    if (s < slices) load(s, int64_t{s} * kDK);
    CpAsyncCommit();
  }
  // ldmatrix rows: the 16 weight rows as A (matrix i: rows 8 (i % 2) .., bytes 16 (i / 2) ..: a0
  // .. a3 of one 32-column chunk), x as B (matrix i: bytes 16i .., so b0, b1 of two chunks; rows
  // past m read row m - 1, their outputs dropped).
  const int w_row = lane % 8 + 8 * ((lane / 8) % 2), w_col = (lane / 16) * 16;
  int x_row[kNt];
#pragma unroll
  for (int nt = 0; nt < kNt; ++nt) x_row[nt] = kDRows + min(8 * nt + lane % 8, m - 1);
  const int x_col = (lane / 8) * 16;
  // sw: one value for the 16 outputs per group (fp8-block: 16 | 128), or one per output row.
  const int64_t r_lo = n0 + g, r_hi = n0 + 8 + g;
  // The group ends every group / 64 steps (groups of 128k columns), or only at K's end (a
  // per-channel group, K long): a countdown, not a 64-bit modulo each step.
  const int steps_per_group = group % 64 == 0 && group < k ? static_cast<int>(group / 64) : 0x7fffffff;
  int countdown = steps_per_group;
  int64_t gi = 0;
  const float* wscale_block = w.format == DevFormat::kFp8Channel ? nullptr : w.scale + (n0 / w.group) * ((k + w.group - 1) / w.group);
  for (int64_t i = 0; i < slices; ++i) {
    CpAsyncWait<kDStages - 2>();
    __syncwarp();
    if (i + kDStages - 1 < slices) load(static_cast<int>((i + kDStages - 1) % kDStages), (i + kDStages - 1) * kDK);
    CpAsyncCommit();
    const unsigned char* base = sm + static_cast<int>(i % kDStages) * stage_bytes;
#pragma unroll
    for (int kk = 0; kk < kDK; kk += 64) {  // two 32-column chunks a step
      unsigned a0[4], a1[4], b[kNt][4];
      LdMatrixX4(a0, base + w_row * kDLd + kk + w_col);
      LdMatrixX4(a1, base + w_row * kDLd + kk + 32 + w_col);
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt) LdMatrixX4(b[nt], base + x_row[nt] * kDLd + kk + x_col);
      const int64_t kabs = i * kDK + kk;
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt) {
        if (kabs < k) MmaE4m3(part[nt], a0, b[nt][0], b[nt][1]);
        if (kabs + 32 < k) MmaE4m3(part[nt], a1, b[nt][2], b[nt][3]);
      }
      if (kabs >= k) break;  // a step wholly past K: the last group ended with the step before
      if (--countdown == 0 || kabs + 64 >= k) {  // the group ends, once
        countdown = steps_per_group;
        const float ws_lo = w.format == DevFormat::kFp8Channel ? (r_lo < n ? w.scale[r_lo] : 0.0f) : wscale_block[gi];
        const float ws_hi = w.format == DevFormat::kFp8Channel ? (r_hi < n ? w.scale[r_hi] : 0.0f) : ws_lo;
#pragma unroll
        for (int nt = 0; nt < kNt; ++nt) {
          // d: output rows g (d0, d1) and g + 8 (d2, d3), x rows 8 nt + 2t and + 1.
          const int x0 = 8 * nt + 2 * t;
          const float xs0 = x0 < m ? sx[x0 * groups + gi] : 0.0f, xs1 = x0 + 1 < m ? sx[(x0 + 1) * groups + gi] : 0.0f;
          total[nt][0] = __fadd_rn(total[nt][0], __fmul_rn(part[nt][0], __fmul_rn(xs0, ws_lo)));
          total[nt][1] = __fadd_rn(total[nt][1], __fmul_rn(part[nt][1], __fmul_rn(xs1, ws_lo)));
          total[nt][2] = __fadd_rn(total[nt][2], __fmul_rn(part[nt][2], __fmul_rn(xs0, ws_hi)));
          total[nt][3] = __fadd_rn(total[nt][3], __fmul_rn(part[nt][3], __fmul_rn(xs1, ws_hi)));
          part[nt][0] = part[nt][1] = part[nt][2] = part[nt][3] = 0.0f;
        }
        ++gi;
      }
    }
  }
  CpAsyncWait<0>();
  StoreWeightsAsAOutputs<kNt>(total, t, m, r_lo, r_lo < n, r_hi, r_hi < n, y, ldy, round_bf16);
}

template <int kNt>
Status LaunchFp8Decode(const uint8_t* xq, const float* sx, int64_t m, const DevWeight& w, int64_t group, float* y,
                       int64_t ldy, bool round_output, cudaStream_t s) {
  static const cudaError_t ready = cudaFuncSetAttribute(GemmFp8DecodeKernel<kNt>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                        kDStages * (kDRows + 16) * kDLd);
  if (ready != cudaSuccess) return Internal(std::string("cuda GemmFp8: shared memory: ") + cudaGetErrorString(ready));
  GemmFp8DecodeKernel<kNt><<<static_cast<unsigned>((w.rows + kDRows - 1) / kDRows), 32,
                             static_cast<size_t>(kDStages * (kDRows + m) * kDLd), s>>>(xq, sx, static_cast<int>(m), w,
                                                                                      group, y, ldy, round_output);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return Internal(std::string("cuda GemmFp8 decode launch: ") + cudaGetErrorString(err));
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
  if (m <= 16) {  // the decode form: the same chains, a warp per 16 outputs
    return m <= 8 ? LaunchFp8Decode<1>(xq, sx, m, w, group, y, ldy, round_output, s)
                  : LaunchFp8Decode<2>(xq, sx, m, w, group, y, ldy, round_output, s);
  }
  static const cudaError_t ready =
      cudaFuncSetAttribute(GemmFp8Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(sizeof(Smem)));
  if (ready != cudaSuccess) return Internal(std::string("cuda GemmFp8: shared memory: ") + cudaGetErrorString(ready));
  const int64_t mtiles = (m + kM - 1) / kM, ntiles = (w.rows + kN - 1) / kN;
  if (mtiles * ntiles > (int64_t{1} << 31) - 1) return InvalidArgument("cuda GemmFp8: too many output tiles for one launch");
  GemmFp8Kernel<<<static_cast<unsigned>(mtiles * ntiles), kThreads, sizeof(Smem), s>>>(
      xq, sx, m, w, group, y, ldy, round_output, static_cast<int>(mtiles));
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return Internal(std::string("cuda GemmFp8 launch: ") + cudaGetErrorString(err));
  return Status::Ok();
}

}  // namespace graft::cuda

#include "backend/cuda/gemm_fp8.h"

#include <cuda.h>
#include <cuda_runtime.h>

#include <cooperative_groups.h>
#include <string>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/fp8_chain.cuh"
#include "backend/cuda/gemm_fp8_prefill.h"
#include "backend/cuda/launched.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/mma_ptx.cuh"
#include "backend/cuda/tensor_map.h"
#include "backend/cuda/wgmma_ptx.cuh"

namespace graft::cuda {
namespace {

// One kernel for every row count. The activation rows are wgmma's A operand — a block owns 64
// of them (one warpgroup) — and the weights its B: kBN outputs a block (wgmma's N). K streams
// through a ring of kStages stages of 128 columns: thread 0 starts each stage's two tile copies
// on the copy engine (TMA: 128-byte swizzled rows, zeros past m, N and K), which complete on the
// stage's mbarrier. Each output's chain is the same whatever the shape: wgmma m64nNk32 over the
// group's 32-column chunks in ascending order into `part` (the first chunk of a group starts it),
// then at the group's end total += part · (sx · sw).
//
// A stage holds the activation tile's first a_rows rows (a_rows: 64, or m rounded up to 8 when
// m < 64: only those are copied) and then the weight tile; wgmma reads 64 activation rows from
// the stage's start, so rows past a_rows are whatever follows (the weight tile, the next stage)
// — they only reach accumulator rows past m, which are never stored (a product row depends on
// its own activation row alone).
constexpr int kBK = 128;     // K columns (bytes) a stage: one swizzled row
constexpr int kRowsA = 64;   // activation rows a block: wgmma's M
constexpr int kThreads = 128;
constexpr int kTileA = kRowsA * kBK;  // the bytes wgmma reads from a stage's start
static_assert(kBK == 128, "fp8::StageChunks takes stages of four 32-column chunks");

template <int kBN>
__host__ __device__ constexpr int StageBytes(int a_rows) { return a_rows * kBK + kBN * kBK; }  // a multiple of 1024

template <int kBN, int kStages>
size_t SmemBytes(int a_rows) {
  const int ring = kStages * StageBytes<kBN>(a_rows);
  const int tail = StageBytes<kBN>(a_rows) < kTileA ? kTileA - StageBytes<kBN>(a_rows) : 0;
  return 1024 + size_t(ring) + size_t(tail) + kStages * sizeof(uint64_t) + kBN * sizeof(float);
}

template <int kBN, int kStages>
__global__ void __launch_bounds__(kThreads, 1)
    GemmFp8Kernel(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_w,
                  const float* __restrict__ sx, int64_t m, DevWeight w, int64_t group, float* __restrict__ y, int64_t ldy,
                  bool round_bf16, int ttiles, int a_rows, int halves) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  extern __shared__ unsigned char raw[];
  // The stages 1024-byte aligned (the swizzle's period; the last one followed by enough bytes
  // for wgmma's 64-row read), then their mbarriers and the per-channel weight scales [kBN].
  const int stage_bytes = StageBytes<kBN>(a_rows), a_bytes = a_rows * kBK;
  unsigned char* stages = raw + ((1024 - (SmemAddr(raw) & 1023)) & 1023);
  const int tail = stage_bytes < kTileA ? kTileA - stage_bytes : 0;
  uint64_t* full = reinterpret_cast<uint64_t*>(stages + kStages * stage_bytes + tail);
  float* wch = reinterpret_cast<float*>(full + kStages);
  const int64_t n = w.rows, k = w.cols, groups = (k + group - 1) / group;
  const bool channel = w.format == DevFormat::kFp8Channel;
  // halves == 2 (KSplit): blocks 2b and 2b + 1 are one cluster, tile b's first and second half of
  // K's stages (each a whole group); the second hands its totals to the first at the end.
  const int half = halves == 2 ? static_cast<int>(blockIdx.x) % 2 : 0, tile = static_cast<int>(blockIdx.x) / halves;
  const int tok0 = tile % ttiles * kRowsA, out0 = tile / ttiles * kBN;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int rows_b = static_cast<int>(min(int64_t{kBN}, n - out0));
  const int all_slices = static_cast<int>((k + kBK - 1) / kBK), per_half = (all_slices + halves - 1) / halves;
  const int s0 = half * per_half, slices = min(per_half, all_slices - s0);  // this block's stages: s0 + [0, slices)
  auto load = [&](int st, int slice) {
    unsigned char* base = stages + st * stage_bytes;
    MbarExpectTx(&full[st], stage_bytes);
    TmaLoad2d(base, &map_x, (s0 + slice) * kBK, tok0, &full[st]);
    TmaLoad2d(base + a_bytes, &map_w, (s0 + slice) * kBK, out0, &full[st]);
  };
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) MbarInit(&full[s], 1);
    FenceProxyAsync();
    for (int s = 0; s < kStages && s < slices; ++s) load(s, s);
  }
  // (A split block's groups start at s0: stages are groups when it splits.)
  const float* ws_row = channel ? nullptr : w.scale + (out0 / w.group) * ((k + w.group - 1) / w.group) + s0;
  if (channel) {
    for (int i = tid; i < kBN; i += kThreads) wch[i] = i < rows_b ? w.scale[out0 + i] : 0.0f;
  }
  __syncthreads();

  // This thread's activation rows (r_lo, r_hi) and their scale rows (clamped to m - 1: rows past
  // m are never stored); fp8-block's weight scales: one per group for the block (blocks are 128k
  // wide and kBN divides 128).
  const int r_lo = 16 * warp + g, r_hi = r_lo + 8;
  const float* sx_lo = sx + min(int64_t{tok0 + r_lo}, m - 1) * groups + s0;
  const float* sx_hi = sx + min(int64_t{tok0 + r_hi}, m - 1) * groups + s0;
  // Groups by countdown, not a 64-bit division a stage: fp8-block's group is 128k columns;
  // per channel it is the row, ending only with K.
  const int per_group = channel ? 0x7fffffff : static_cast<int>(group / kBK);
  float total[kBN / 2];
#pragma unroll
  for (int i = 0; i < kBN / 2; ++i) total[i] = 0.0f;
  // total += part · (sx · sw): the group of `part` ends (xs_lo, xs_hi its rows' scales, ws the
  // block's weight scale; per channel the outputs' own, from wch) — fp8_chain.cuh.
  auto promote = [&](const float(&part)[kBN / 2], float xs_lo, float xs_hi, float ws) {
    if (channel) {
      fp8::PromoteChannel(total, part, xs_lo, xs_hi,
                          [&](int j) { return *reinterpret_cast<const float2*>(wch + 8 * j + 2 * t); });
    } else {
      fp8::PromoteBlock(total, part, xs_lo, xs_hi, ws);
    }
  };
  // Stage i's four chunks into part (the first starts it when the stage starts a group), issued
  // after its copy has landed; not waited for.
  auto issue = [&](float(&part)[kBN / 2], int i, bool starts) {
    const int st = i % kStages;
    MbarWait(&full[st], (i / kStages) & 1);
    const unsigned char* base = stages + st * stage_bytes;
    fp8::StageChunks(part, base, base + a_bytes, starts);
  };
  // Stage i's products are in (the caller waited): every warpgroup done with its slot, which
  // takes stage i + kStages.
  auto release = [&](int i) {
    __syncthreads();
    if (tid == 0 && i + kStages < slices) load(i % kStages, i + kStages);
  };

  if (per_group == 1) {
    fp8::OneStageGroups<kBN / 2>(slices, sx_lo, sx_hi, ws_row, issue,
                                 [&](float(&part)[kBN / 2], int i, float xs_lo, float xs_hi, float ws) {
                                   FenceAccumulators(part);
                                   release(i);
                                   promote(part, xs_lo, xs_hi, ws);
                                 });
  } else {
    fp8::MultiStageGroups<kBN / 2>(slices, per_group, channel, sx_lo, sx_hi, ws_row, issue, release, promote);
  }
  if (halves == 2) {
    // The second half's totals into the first's, through distributed shared memory (the ring
    // is idle: every copy landed, every wgmma waited for). One add, t_first + t_second: the
    // same bits whichever half finished first.
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    float* xch = reinterpret_cast<float*>(stages);
    __syncthreads();
    FenceProxyAsync();
    if (half == 1) {
#pragma unroll
      for (int i = 0; i < kBN / 2; ++i) xch[i * kThreads + tid] = total[i];
    }
    cluster.sync();
    if (half == 0) {
      const float* peer = cluster.map_shared_rank(xch, 1);
#pragma unroll
      for (int i = 0; i < kBN / 2; ++i) total[i] = __fadd_rn(total[i], peer[i * kThreads + tid]);
    }
    cluster.sync();  // the second block's shared memory stays until the first has read it
    if (half == 1) return;
  }
  // d[4j + e]: activation row r_lo (e < 2) or r_hi, output 8j + 2t + e % 2.
#pragma unroll
  for (int j = 0; j < kBN / 8; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t r = tok0 + (e < 2 ? r_lo : r_hi);
      const int o = 8 * j + 2 * t + e % 2;
      if (r < m && o < rows_b) y[r * ldy + out0 + o] = RoundAct(total[4 * j + e], round_bf16);
    }
  }
}

// The tensor map of a row-major [rows, k] e4m3 array for boxes of 128 columns x box_rows rows
// in the 128-byte swizzle, zeros past the edges.
Status EncodeCodes(CUtensorMap* map, const uint8_t* codes, int64_t rows, int64_t k, int box_rows) {
  return EncodeSwizzled128(map, codes, 1, rows, k, kBK, box_rows, "GemmFp8");
}

template <int kBN, int kStages>
Status Launch(const uint8_t* xq, const float* sx, int64_t m, const DevWeight& w, int64_t group, float* y, int64_t ldy,
              bool round_output, cudaStream_t s) {
  static const cudaError_t ready = cudaFuncSetAttribute(GemmFp8Kernel<kBN, kStages>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                        static_cast<int>(SmemBytes<kBN, kStages>(kRowsA)));
  if (ready != cudaSuccess) return Internal(std::string("cuda GemmFp8: shared memory: ") + cudaGetErrorString(ready));
  const int64_t ttiles = (m + kRowsA - 1) / kRowsA, otiles = (w.rows + kBN - 1) / kBN;
  if (ttiles * otiles > (int64_t{1} << 31) - 1 || m > (int64_t{1} << 30) || w.rows > (int64_t{1} << 30)) {
    return InvalidArgument("cuda GemmFp8: too many rows or outputs for one launch");
  }
  // Only the activation rows there are, rounded up to 8 (the swizzle's period), are copied.
  const int a_rows = m < kRowsA ? static_cast<int>((m + 7) / 8 * 8) : kRowsA;
  CUtensorMap map_x, map_w;
  if (Status st = EncodeCodes(&map_x, xq, m, w.cols, a_rows); !st.ok()) return st;
  if (Status st = EncodeCodes(&map_w, static_cast<const uint8_t*>(w.data), w.rows, w.cols, kBN); !st.ok()) return st;
  if (Fp8KSplit(w, group)) {
    if (ttiles * otiles * 2 > (int64_t{1} << 31) - 1) return InvalidArgument("cuda GemmFp8: too many tiles for one launch");
    LaunchPdlCluster(GemmFp8Kernel<kBN, kStages>, static_cast<unsigned>(ttiles * otiles * 2), kThreads,
                     SmemBytes<kBN, kStages>(a_rows), s, dim3(2, 1, 1), map_x, map_w, sx, m, w, group, y, ldy,
                     round_output, static_cast<int>(ttiles), a_rows, 2);
  } else {
    LaunchPdl(GemmFp8Kernel<kBN, kStages>, static_cast<unsigned>(ttiles * otiles), kThreads,
              SmemBytes<kBN, kStages>(a_rows), s, map_x, map_w, sx, m, w, group, y, ldy, round_output,
              static_cast<int>(ttiles), a_rows, 1);
  }
  return Launched("GemmFp8");
}

}  // namespace

// Few outputs (at batch 1 their 64-output blocks leave multiprocessors idle, and each block's
// chain of stages, not the bytes, sets the pace) and a long K.
constexpr int64_t kSplitMaxOutputs = 8192, kSplitMinColumns = 4096;
bool Fp8KSplit(const DevWeight& w, int64_t group) {
  return w.format == DevFormat::kFp8Block && group == kBK && w.rows <= kSplitMaxOutputs && w.cols >= kSplitMinColumns;
}

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
  // The same chain in every shape (above): the shape only sets how many rows and outputs share
  // a block — up to 64 rows (decode) narrow blocks of outputs, for many blocks streaming weights.
  // Measured on the H200 at the Qwen3.5-27B dimensions (bench/results/quantized.md § fp8-wgmma (2026-12-01)):
  // 64 outputs a block beat 32 and 16 up to 64 rows (fewer, longer blocks: a stage's fixed cost
  // is spread over more bytes). Copying only the activation rows there are (a_rows) took batch
  // 1's gate|up from 90 to 68 us and its down from 62 to 44 us: 64-row boxes of mostly zeros were
  // the copy engine's work and the shared memory that kept a third block off each SM. Preloading
  // the block's scales into shared memory, 4 or 8 stages, and 32 or 128 outputs a block were no
  // faster.
  if (m <= 64) return Launch<64, 6>(xq, sx, m, w, group, y, ldy, round_output, s);
  // Beyond, this file's 64 x 128 blocks (two an SM) up to kPrefillMinRows, and the persistent
  // warp-specialized kernel past it (gemm_fp8_prefill.h; the same chain). On an H100 at the
  // Qwen3.5-27B dimensions (§ fp8-prefill (2026-12-08s)) the blocks were faster at 128 rows (all
  // projections 17.8 against 20.3 ms: 128 x 128 tiles leave multiprocessors idle at N <= 6144)
  // and the persistent kernel at 1024 and 2048 (76.1 against 91.1 ms, 138.8 against 171.6 ms);
  // between, not measured.
  constexpr int64_t kPrefillMinRows = 257;
  if (m >= kPrefillMinRows && GemmFp8PrefillFits(m, w, group)) {
    return GemmFp8Prefill(xq, sx, m, w, group, y, ldy, round_output, stream);
  }
  return Launch<128, 4>(xq, sx, m, w, group, y, ldy, round_output, s);
}

}  // namespace graft::cuda

#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/gemm_fp8.h"
#include "backend/cuda/launched.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/matmul.h"
#include "backend/cuda/simt_tile.cuh"

namespace graft::cuda {
namespace {

// One warp per (row, activation group): the group's amax (a max: exact in any order), its
// scale amax / 448 (1 when all zero) and the e4m3 codes of x / scale (round to nearest even,
// saturating at 448: the CPU's FloatToFp8E4M3) — stored decoded as floats for the SIMT GEMM, or
// as the codes themselves for the tensor cores (kCodes). With kVec (k and the group multiples
// of 4, x 16-byte aligned) a lane reads four columns at a time and stores their four codes as
// one word. (It was a 128-thread block per group with a shared-memory tree: 68 us for a
// 1024 x 5120 activation, the largest cost of an FP8 prefill after the GEMMs and the GDN.)
constexpr int kQuantWarps = 8;  // groups a 256-thread block
template <bool kCodes, bool kVec>
__global__ void __launch_bounds__(32 * kQuantWarps) Fp8QuantizeActKernel(const float* __restrict__ x, int64_t m, int64_t k,
                                                                         int64_t group, int64_t groups,
                                                                         void* __restrict__ out, float* __restrict__ sx) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  const int64_t id = int64_t{blockIdx.x} * kQuantWarps + threadIdx.x / 32;
  if (id >= m * groups) return;
  const int lane = threadIdx.x % 32;
  const int64_t r = id / groups, g = id % groups;
  const int64_t c0 = g * group, c1 = min(k, c0 + group);
  const float* xr = x + r * k;
  float amax = 0.0f;
  if constexpr (kVec) {
    for (int64_t c = c0 + 4 * lane; c < c1; c += 128) {
      const float4 v = *reinterpret_cast<const float4*>(xr + c);
      amax = fmaxf(fmaxf(amax, fmaxf(fabsf(v.x), fabsf(v.y))), fmaxf(fabsf(v.z), fabsf(v.w)));
    }
  } else {
    for (int64_t c = c0 + lane; c < c1; c += 32) amax = fmaxf(amax, fabsf(xr[c]));
  }
  for (int sh = 16; sh > 0; sh >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, sh));
  const float scale = amax > 0.0f ? __fdiv_rn(amax, 448.0f) : 1.0f;
  if (lane == 0) sx[r * groups + g] = scale;
  auto code = [&](float v) {
    return static_cast<uint8_t>(__nv_cvt_float_to_fp8(__fdiv_rn(v, scale), __NV_SATFINITE, __NV_E4M3));
  };
  if constexpr (kVec) {
    for (int64_t c = c0 + 4 * lane; c < c1; c += 128) {
      const float4 v = *reinterpret_cast<const float4*>(xr + c);
      const uint8_t q0 = code(v.x), q1 = code(v.y), q2 = code(v.z), q3 = code(v.w);
      if constexpr (kCodes) {
        *reinterpret_cast<uint32_t*>(static_cast<uint8_t*>(out) + r * k + c) =
            uint32_t{q0} | uint32_t{q1} << 8 | uint32_t{q2} << 16 | uint32_t{q3} << 24;
      } else {
        *reinterpret_cast<float4*>(static_cast<float*>(out) + r * k + c) =
            make_float4(E4m3ToFloat(q0), E4m3ToFloat(q1), E4m3ToFloat(q2), E4m3ToFloat(q3));
      }
    }
  } else {
    for (int64_t c = c0 + lane; c < c1; c += 32) {
      const uint8_t q = code(xr[c]);
      if constexpr (kCodes) static_cast<uint8_t*>(out)[r * k + c] = q;
      else static_cast<float*>(out)[r * k + c] = E4m3ToFloat(q);
    }
  }
}

// Launches the quantization of x [m, k] in groups (codes or decoded floats into out, scales into sx).
template <bool kCodes>
Status QuantizeActivations(const float* x, int64_t m, int64_t k, int64_t group, int64_t groups, void* out, float* sx,
                           cudaStream_t s) {
  const auto blocks = static_cast<unsigned>((m * groups + kQuantWarps - 1) / kQuantWarps);
  const bool vec = k % 4 == 0 && group % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(out) % 16 == 0;
  if (vec)
    LaunchPdl(Fp8QuantizeActKernel<kCodes, true>, blocks, 32 * kQuantWarps, 0, s, x, m, k, group, groups, out, sx);
  else
    LaunchPdl(Fp8QuantizeActKernel<kCodes, false>, blocks, 32 * kQuantWarps, 0, s, x, m, k, group, groups, out, sx);
  return Launched("MatMulFp8 quantize");
}

// y = Σ_g dot_g(xq, wq) · (sx · sw) as weights/quantized.h defines FP8's W8A8, tiled like the
// SIMT GEMM (matmul.cu): 32 rows x 32 outputs per block, each thread 2 x 2 outputs with the 16
// partial sums of the CPU order per output, reduced by the same pairwise tree at the end of
// every activation group (group % 16 == 0, so 16-column slices never straddle one) and added,
// scaled, to a running fp32 total — the CPU reference's bits (simt_tile.cuh).

__global__ void __launch_bounds__(256) GemmFp8Kernel(const float* __restrict__ xq, const float* __restrict__ sx,
                                                     int64_t m, DevWeight w, int64_t group, int64_t groups,
                                                     float* __restrict__ y, int64_t ldy, bool round_bf16) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  __shared__ float xs[kSM][kSK + 1];
  __shared__ float ws[kSN][kSK + 1];
  const int64_t n = w.rows, k = w.cols;
  const uint8_t* codes = static_cast<const uint8_t*>(w.data);
  const int64_t row0 = int64_t{blockIdx.y} * kSM, col0 = int64_t{blockIdx.x} * kSN;
  const int tr = threadIdx.x / 16, tc = threadIdx.x % 16;
  float acc[2][2][16], total[2][2];
#pragma unroll
  for (int a = 0; a < 2; ++a)
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      total[a][b] = 0.0f;
#pragma unroll
      for (int l = 0; l < 16; ++l) acc[a][b][l] = 0.0f;
    }
  for (int64_t k0 = 0; k0 < k; k0 += kSK) {
    StageSlice(xs, ws, row0, col0, k0, m, n, k, [&](int64_t r, int64_t c) { return xq[r * k + c]; },
               [&](int64_t j, int64_t c) { return E4m3ToFloat(codes[j * k + c]); });
    __syncthreads();
    AccumulateSlice(acc, xs, ws, tr, tc, static_cast<int>(min(static_cast<int64_t>(kSK), k - k0)));
    __syncthreads();
    const int64_t g = k0 / group;
    if (k0 + kSK >= k || (k0 + kSK) % group == 0) {  // the group ends: reduce, scale, add, restart
#pragma unroll
      for (int a = 0; a < 2; ++a) {
#pragma unroll
        for (int b = 0; b < 2; ++b) {
          const float dot = Tree16(acc[a][b]);
          const int64_t gr = row0 + tr + 16 * a, gc = col0 + tc + 16 * b;
          if (gr < m && gc < n) {
            const float sw = w.format == DevFormat::kFp8Channel ? w.scale[gc]
                                                               : w.scale[(gc / w.group) * ((k + w.group - 1) / w.group) + g];
            total[a][b] = __fadd_rn(total[a][b], __fmul_rn(dot, __fmul_rn(sx[gr * groups + g], sw)));
          }
#pragma unroll
          for (int l = 0; l < 16; ++l) acc[a][b][l] = 0.0f;
        }
      }
    }
  }
#pragma unroll
  for (int a = 0; a < 2; ++a)
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      const int64_t gr = row0 + tr + 16 * a, gc = col0 + tc + 16 * b;
      if (gr < m && gc < n) y[gr * ldy + gc] = RoundAct(total[a][b], round_bf16);
    }
}

}  // namespace

int64_t Fp8ActGroup(const DevWeight& w) { return w.format == DevFormat::kFp8Block ? w.group : w.cols; }

int64_t Fp8ScratchFloats(int64_t m, const DevWeight& w) {
  const int64_t group = Fp8ActGroup(w);
  return m * w.cols + m * ((w.cols + group - 1) / group);
}

Status MatMulFp8(const float* x, int64_t m, const DevWeight& w, float* scratch, float* y, int64_t ldy,
                 bool round_output, bool bf16, void* stream) {
  if (m < 0 || w.rows <= 0 || w.cols <= 0 || ldy < w.rows || !w.fp8()) return InvalidArgument("cuda MatMulFp8: bad arguments");
  const int64_t group = Fp8ActGroup(w), groups = (w.cols + group - 1) / group;
  if (group % 16 != 0 && groups > 1) {
    return Unsupported("cuda MatMulFp8: FP8 block size " + std::to_string(group) + " is not a multiple of 16");
  }
  if (m == 0) return Status::Ok();
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  float* xq = scratch;
  float* sx = scratch + m * w.cols;
  if ((m * groups + kQuantWarps - 1) / kQuantWarps > 2147483647) {
    return InvalidArgument("cuda MatMulFp8: too many activation groups in one call");
  }
  if (bf16 && GemmFp8Fits(w, group)) {  // the tensor cores (gemm_fp8.h): codes, one byte each, then the GEMM
    GRAFT_RETURN_IF_ERROR(QuantizeActivations<true>(x, m, w.cols, group, groups, xq, sx, s));
    return GemmFp8(reinterpret_cast<const uint8_t*>(xq), sx, m, w, group, y, ldy, round_output, stream);
  }
  GRAFT_RETURN_IF_ERROR(QuantizeActivations<false>(x, m, w.cols, group, groups, xq, sx, s));
  const int64_t gy = (m + kSM - 1) / kSM;
  if (gy > 65535) return InvalidArgument("cuda MatMulFp8: more than 65535 * 32 rows in one call");
  const dim3 grid(static_cast<unsigned>((w.rows + kSN - 1) / kSN), static_cast<unsigned>(gy));
  LaunchPdl(GemmFp8Kernel, grid, 256, 0, s, xq, sx, m, w, group, groups, y, ldy, round_output && bf16);
  return Launched("MatMulFp8");
}

}  // namespace graft::cuda

#include "backend/cuda/gemm_decode.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <string>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/mma_ptx.cuh"

namespace graft::cuda {
namespace {

constexpr int kDK = 256;
constexpr int kLd = kDK + 8;  // 528-byte rows: ldmatrix's eight row reads land in eight bank groups
// Stages of the ring: four (12 KB of weights in flight per warp). Eight, for one or two rows,
// measured slower on the H200 (24.5 against 32.6 tokens/s at batch 1 on Qwen3.5-27B's shapes):
// fewer blocks fit on a multiprocessor, and N / 8 warps leave too few per multiprocessor.
constexpr int kStages = 4;

int64_t SmemBytes(int64_t m, int stages) { return int64_t{stages} * (8 + m) * kLd * 2; }

__device__ __forceinline__ unsigned Lds32(const __nv_bfloat16* p) { return *reinterpret_cast<const unsigned*>(p); }

// One warp: outputs n0 .. n0 + 7 for all m rows. Shared memory per stage: the 8 weight rows,
// then the m x rows, kLd apart.
__global__ void __launch_bounds__(32) GemmDecodeKernel(const __nv_bfloat16* __restrict__ xb, int m,
                                                       const __nv_bfloat16* __restrict__ w, int64_t k,
                                                       float* __restrict__ y, int64_t ldy, bool round_bf16) {
  extern __shared__ __align__(16) __nv_bfloat16 sm[];
  const int lane = threadIdx.x, g = lane / 4, t = lane % 4, rows = 8 + m;
  const int64_t n0 = int64_t{blockIdx.x} * 8;
  auto row_of = [&](int st, int r) { return sm + (st * rows + r) * kLd; };
  auto load = [&](int st, int64_t k0) {
    const int per = static_cast<int>(min(static_cast<int64_t>(kDK), k - k0)) / 8;  // 16-byte pieces per row
    for (int e = lane; e < rows * per; e += 32) {
      const int r = e / per, c = (e % per) * 8;
      const __nv_bfloat16* src = r < 8 ? w + (n0 + r) * k + k0 + c : xb + int64_t{r - 8} * k + k0 + c;
      CpAsync16(row_of(st, r) + c, src);
    }
  };
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const int64_t slices = (k + kDK - 1) / kDK;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < slices) load(s, int64_t{s} * kDK);
    CpAsyncCommit();
  }
  for (int64_t i = 0; i < slices; ++i) {
    CpAsyncWait<kStages - 2>();  // slice i has landed (this lane's copies) ...
    __syncwarp();                // ... and every lane's; all are done with slice i - 1's stage
    if (i + kStages - 1 < slices) load(static_cast<int>((i + kStages - 1) % kStages), (i + kStages - 1) * kDK);
    CpAsyncCommit();
    const int st = static_cast<int>(i % kStages);
    const int span = static_cast<int>(min(static_cast<int64_t>(kDK), k - i * kDK));  // a multiple of 16
    const __nv_bfloat16* ws = row_of(st, 0);
    const __nv_bfloat16* xs = row_of(st, 8);
    for (int kk = 0; kk < span; kk += 16) {
      unsigned b0, b1;
      LdMatrixX2(b0, b1, ws + (lane % 8) * kLd + kk + ((lane / 8) % 2) * 8);
      unsigned a[4];
      a[0] = g < m ? Lds32(xs + g * kLd + kk + 2 * t) : 0u;
      a[1] = g + 8 < m ? Lds32(xs + (g + 8) * kLd + kk + 2 * t) : 0u;
      a[2] = g < m ? Lds32(xs + g * kLd + kk + 8 + 2 * t) : 0u;
      a[3] = g + 8 < m ? Lds32(xs + (g + 8) * kLd + kk + 8 + 2 * t) : 0u;
      Mma16816(acc, a, b0, b1);
    }
  }
  CpAsyncWait<0>();
  const int64_t c = n0 + 2 * t;
  if (g < m) {
    y[g * ldy + c] = RoundAct(acc[0], round_bf16);
    y[g * ldy + c + 1] = RoundAct(acc[1], round_bf16);
  }
  if (g + 8 < m) {
    y[(g + 8) * ldy + c] = RoundAct(acc[2], round_bf16);
    y[(g + 8) * ldy + c + 1] = RoundAct(acc[3], round_bf16);
  }
}

// The kernel needs no L1 cache (x travels with the weights through shared memory): all of the
// unified memory as shared memory lets the most blocks sit on each multiprocessor.
Status DecodeReady() {
  static const cudaError_t err = [] {
    cudaError_t e = cudaFuncSetAttribute(GemmDecodeKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(SmemBytes(16, kStages)));
    if (e == cudaSuccess) {
      e = cudaFuncSetAttribute(GemmDecodeKernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                               cudaSharedmemCarveoutMaxShared);
    }
    return e;
  }();
  if (err != cudaSuccess) return Internal(std::string("cuda GemmDecode: shared memory: ") + cudaGetErrorString(err));
  return Status::Ok();
}

}  // namespace

Status GemmDecode(const uint16_t* xb, int64_t m, const uint16_t* w, int64_t n, int64_t k, float* y, int64_t ldy,
                  bool round_output, void* stream) {
  if (m < 1 || m > 16 || n <= 0 || n % 8 != 0 || k <= 0 || k % 16 != 0 || ldy < n ||
      reinterpret_cast<uintptr_t>(xb) % 16 != 0 || reinterpret_cast<uintptr_t>(w) % 16 != 0) {
    return InvalidArgument("cuda GemmDecode: needs 1..16 rows, N % 8 == 0, K % 16 == 0 and aligned operands");
  }
  if (n / 8 > 0x7fffffff) return InvalidArgument("cuda GemmDecode: too many outputs for one launch");
  if (Status ready = DecodeReady(); !ready.ok()) return ready;
  const auto* xp = reinterpret_cast<const __nv_bfloat16*>(xb);
  const auto* wp = reinterpret_cast<const __nv_bfloat16*>(w);
  const unsigned blocks = static_cast<unsigned>(n / 8);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  GemmDecodeKernel<<<blocks, 32, static_cast<size_t>(SmemBytes(m, kStages)), s>>>(xp, static_cast<int>(m), wp, k, y, ldy,
                                                                                 round_output);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return Internal(std::string("cuda GemmDecode launch: ") + cudaGetErrorString(err));
  return Status::Ok();
}

}  // namespace graft::cuda

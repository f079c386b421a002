#include "backend/cuda/exact.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "weights/exact.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/launched.h"
#include "backend/cuda/pdl.cuh"

namespace graft::cuda {
namespace {

// util/bf16.h FloatToBf16, bit for bit.
__device__ __forceinline__ uint16_t ToBf16Bits(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// A block computes a tile of kTileR rows x kTileC columns; thread (ty, tx) owns rows
// ty*kPerR .. +kPerR and columns tx + 16*i (i < kPerC), so loads of a stay coalesced. The rank
// is walked in steps of kStepJ staged through shared memory, j ascending for every element.
constexpr int kTileR = 64, kTileC = 128, kStepJ = 16, kPerR = kTileR / 16, kPerC = kTileC / 16;

__global__ void ReconstructKernel(const uint16_t* base, int64_t rows, int64_t k, DevWeight a, DevWeight b, int rank,
                                  uint16_t* out) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  __shared__ float as[kStepJ][kTileC];
  __shared__ float bs[kStepJ][kTileR];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int64_t r0 = int64_t{blockIdx.y} * kTileR, c0 = int64_t{blockIdx.x} * kTileC;
  float acc[kPerR][kPerC];
  for (int i = 0; i < kPerR; ++i)
    for (int j = 0; j < kPerC; ++j) acc[i][j] = 0.0f;
  for (int j0 = 0; j0 < rank; j0 += kStepJ) {
    for (int e = threadIdx.x; e < kStepJ * kTileC; e += blockDim.x) {
      const int jj = e / kTileC, cc = e % kTileC;
      const int64_t c = c0 + cc;
      as[jj][cc] = (j0 + jj < rank && c < k) ? WeightAt(a, int64_t{j0 + jj} * k + c) : 0.0f;
    }
    for (int e = threadIdx.x; e < kStepJ * kTileR; e += blockDim.x) {
      const int rr = e / kStepJ, jj = e % kStepJ;
      const int64_t r = r0 + rr;
      bs[jj][rr] = (j0 + jj < rank && r < rows) ? WeightAt(b, r * rank + j0 + jj) : 0.0f;
    }
    __syncthreads();
    const int steps = min(kStepJ, rank - j0);
    for (int jj = 0; jj < steps; ++jj) {
      float bv[kPerR], av[kPerC];
      for (int i = 0; i < kPerR; ++i) bv[i] = bs[jj][ty * kPerR + i];
      for (int j = 0; j < kPerC; ++j) av[j] = as[jj][tx + 16 * j];
      for (int i = 0; i < kPerR; ++i)
        for (int j = 0; j < kPerC; ++j) acc[i][j] = __fadd_rn(acc[i][j], __fmul_rn(bv[i], av[j]));
    }
    __syncthreads();
  }
  for (int i = 0; i < kPerR; ++i) {
    const int64_t r = r0 + ty * kPerR + i;
    if (r >= rows) continue;
    for (int j = 0; j < kPerC; ++j) {
      const int64_t c = c0 + tx + 16 * j;
      if (c >= k) continue;
      const float w = __uint_as_float(static_cast<uint32_t>(base[r * k + c]) << 16);
      out[r * k + c] = ToBf16Bits(__fadd_rn(w, acc[i][j]));
    }
  }
}

__global__ void ResidualKernel(DevResidual r, uint16_t* out) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= r.chunks) return;
  int64_t at = r.chunk_byte[c];
  int64_t idx = r.chunk_prev[c];
  const int64_t end = min(r.num_values, (c + 1) * kResidualChunk);
  for (int64_t v = c * kResidualChunk; v < end; ++v) {
    uint64_t gap = 0;
    for (int shift = 0;; shift += 7) {
      const uint8_t byte = r.stream[at++];
      gap |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if (!(byte & 0x80)) break;
    }
    idx += 1 + static_cast<int64_t>(gap);
    out[idx] = r.values[v];
  }
}

}  // namespace

Status ExactReconstruct(const uint16_t* base, int64_t rows, int64_t k, const DevWeight& a, const DevWeight& b, int rank,
                        uint16_t* out, void* stream) {
  if (rows < 0 || k <= 0 || rank < 1) return InvalidArgument("cuda ExactReconstruct: bad shape");
  if (rows == 0) return Status::Ok();
  const int64_t gx = (k + kTileC - 1) / kTileC, gy = (rows + kTileR - 1) / kTileR;
  if (gy > 65535 || gx > 0x7fffffff) return InvalidArgument("cuda ExactReconstruct: projection too large");
  LaunchPdl(ReconstructKernel, dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy)), 256, 0,
            static_cast<cudaStream_t>(stream), base, rows, k, a, b, rank, out);
  return Launched("ExactReconstruct");
}

Status ExactResidualApply(const DevResidual& r, uint16_t* out, void* stream) {
  if (r.chunks <= 0) return Status::Ok();
  constexpr int kThreads = 128;
  const int64_t blocks = (r.chunks + kThreads - 1) / kThreads;
  LaunchPdl(ResidualKernel, static_cast<unsigned>(blocks), kThreads, 0, static_cast<cudaStream_t>(stream), r, out);
  return Launched("ExactResidual");
}

}  // namespace graft::cuda

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/launched.h"
#include "backend/cuda/pdl.cuh"

namespace graft::cuda {
namespace {

constexpr int kThreads = 256;

unsigned Blocks(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 * 16 ? (b < 1 ? 1 : b) : 65535 * 16);
}

cudaStream_t S(void* stream) { return static_cast<cudaStream_t>(stream); }

__global__ void EmbedKernel(DevWeight table, const int32_t* ids, int64_t total, bool bf16, float* out) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  const int64_t h = table.cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i / h, c = i % h;
    out[i] = RoundAct(WeightAt(table, int64_t{ids[t]} * h + c), bf16);
  }
}

// Block (x, y): columns [256 x, 256 x + 256) of rows y, y + gridDim.y, ... (no division an
// element: a 64-bit one cost more than the element's arithmetic).
__global__ void SiluMulKernel(const float* gu, int64_t n, int64_t inter, bool bf16, float* out,
                              __nv_bfloat16* out_b) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  const int64_t c = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (c >= inter) return;
  for (int64_t t = blockIdx.y; t < n; t += gridDim.y) {
    const float g = gu[t * 2 * inter + c], u = gu[t * 2 * inter + inter + c];
    const float v = RoundAct(__fmul_rn(RoundAct(SiluF(g), bf16), u), bf16);
    out[t * inter + c] = v;
    if (out_b != nullptr) out_b[t * inter + c] = __float2bfloat16_rn(v);
  }
}

__global__ void AddKernel(float* x, const float* y, int64_t n, bool bf16) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    x[i] = RoundAct(__fadd_rn(x[i], y[i]), bf16);
  }
}

__global__ void SigmoidGateMulKernel(float* x, const float* gate, int64_t gate_stride, int64_t cols, int64_t total,
                                     bool bf16, __nv_bfloat16* x_b) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    const float v = RoundAct(__fmul_rn(x[i], RoundAct(SigmoidF(gate[r * gate_stride + c]), bf16)), bf16);
    x[i] = v;
    if (x_b != nullptr) x_b[i] = __float2bfloat16_rn(v);
  }
}

__global__ void RopeKernel(float* x, int heads, int head_dim, int half, const int32_t* pos, const float* inv_freq,
                           float attn_scale, int64_t total, bool bf16) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t th = i / half;  // (token, head)
    const int d = static_cast<int>(i % half);
    const int64_t t = th / heads;
    float* v = x + th * head_dim;
    RopePair(v[d], v[d + half], pos[t], inv_freq[d], attn_scale, bf16, v[d], v[d + half]);
  }
}

__global__ void GdnGatesKernel(const float* in, int64_t stride, int64_t b_col, int64_t a_col, int hv, DevWeight a_log,
                               DevWeight dt_bias, int64_t total, bool bf16, float* beta, float* g) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i / hv;
    const int h = static_cast<int>(i % hv);
    const float b = in[t * stride + b_col + h], a = in[t * stride + a_col + h];
    beta[i] = GdnBeta(b, bf16);
    g[i] = GdnDecay(a, a_log, dt_bias, h);
  }
}

}  // namespace

Status Embed(const DevWeight& table, const int32_t* ids, int n, bool bf16, float* out, void* stream) {
  if (n < 0 || table.cols <= 0) return InvalidArgument("cuda Embed: bad shape");
  if (n == 0) return Status::Ok();
  const int64_t total = int64_t{n} * table.cols;
  LaunchPdl(EmbedKernel, Blocks(total), kThreads, 0, S(stream), table, ids, total, bf16, out);
  return Launched("Embed");
}

Status SiluMul(const float* gu, int64_t n, int64_t inter, bool bf16, float* out, void* stream, uint16_t* out_bf16) {
  if (n < 0 || inter <= 0) return InvalidArgument("cuda SiluMul: bad shape");
  if (n == 0) return Status::Ok();
  if ((inter + kThreads - 1) / kThreads > 0x7fffffff) return InvalidArgument("cuda SiluMul: rows too wide");
  const dim3 grid(static_cast<unsigned>((inter + kThreads - 1) / kThreads), static_cast<unsigned>(std::min<int64_t>(n, 65535)));
  LaunchPdl(SiluMulKernel, grid, kThreads, 0, S(stream), gu, n, inter, bf16, out,
            reinterpret_cast<__nv_bfloat16*>(out_bf16));
  return Launched("SiluMul");
}

Status Add(float* x, const float* y, int64_t n, bool bf16, void* stream) {
  if (n < 0) return InvalidArgument("cuda Add: bad shape");
  if (n == 0) return Status::Ok();
  LaunchPdl(AddKernel, Blocks(n), kThreads, 0, S(stream), x, y, n, bf16);
  return Launched("Add");
}

Status SigmoidGateMul(float* x, const float* gate, int64_t gate_stride, int64_t rows, int64_t cols, bool bf16,
                      void* stream, uint16_t* x_bf16) {
  if (rows < 0 || cols <= 0 || gate_stride < cols) return InvalidArgument("cuda SigmoidGateMul: bad shape");
  if (rows == 0) return Status::Ok();
  LaunchPdl(SigmoidGateMulKernel, Blocks(rows * cols), kThreads, 0, S(stream), x, gate, gate_stride, cols, rows * cols,
            bf16, reinterpret_cast<__nv_bfloat16*>(x_bf16));
  return Launched("SigmoidGateMul");
}

// T float: a copy; T __nv_bfloat16: the value rounded to nearest even (exact for bf16 values).
template <typename T>
__global__ void ScatterRowsKernel(const float* src, int64_t width, const int32_t* rows, int n, T* dst) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  for (int t = blockIdx.y; t < n; t += gridDim.y) {
    const int64_t to = int64_t{rows[t]} * width;
    for (int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; c < width; c += int64_t{gridDim.x} * blockDim.x) {
      dst[to + c] = static_cast<T>(src[int64_t{t} * width + c]);
    }
  }
}

template <typename T>
Status ScatterRowsAs(const float* src, int64_t width, const int32_t* rows, int n, T* dst, void* stream) {
  if (n < 0 || width < 0) return InvalidArgument("cuda ScatterRows: bad shape");
  if (n == 0 || width == 0) return Status::Ok();
  const unsigned gx = static_cast<unsigned>(std::min<int64_t>((width + 255) / 256, 64));
  const unsigned gy = static_cast<unsigned>(std::min(n, 65535));
  LaunchPdl(ScatterRowsKernel<T>, dim3(gx, gy), 256, 0, S(stream), src, width, rows, n, dst);
  return Launched("ScatterRows");
}

Status ScatterRows(const float* src, int64_t width, const int32_t* rows, int n, float* dst, void* stream) {
  return ScatterRowsAs(src, width, rows, n, dst, stream);
}

Status ScatterRowsBf16(const float* src, int64_t width, const int32_t* rows, int n, void* dst, void* stream) {
  return ScatterRowsAs(src, width, rows, n, static_cast<__nv_bfloat16*>(dst), stream);
}

__global__ void GatherRowsKernel(const float* src, int64_t width, const int32_t* rows, int n, float* dst) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  for (int t = blockIdx.y; t < n; t += gridDim.y) {
    const int64_t from = int64_t{rows[t]} * width;
    for (int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; c < width; c += int64_t{gridDim.x} * blockDim.x) {
      dst[int64_t{t} * width + c] = src[from + c];
    }
  }
}

Status GatherRows(const float* src, int64_t width, const int32_t* rows, int n, float* dst, void* stream) {
  if (n < 0 || width < 0) return InvalidArgument("cuda GatherRows: bad shape");
  if (n == 0 || width == 0) return Status::Ok();
  const unsigned gx = static_cast<unsigned>(std::min<int64_t>((width + 255) / 256, 64));
  const unsigned gy = static_cast<unsigned>(std::min(n, 65535));
  LaunchPdl(GatherRowsKernel, dim3(gx, gy), 256, 0, S(stream), src, width, rows, n, dst);
  return Launched("GatherRows");
}

Status CopyBlock(const float* src, int64_t src_stride, int64_t src_col, float* dst, int64_t dst_stride,
                 int64_t dst_col, int64_t rows, int64_t cols, void* stream) {
  if (rows < 0 || cols < 0) return InvalidArgument("cuda CopyBlock: bad shape");
  if (rows == 0 || cols == 0) return Status::Ok();
  const cudaError_t err = cudaMemcpy2DAsync(dst + dst_col, static_cast<size_t>(dst_stride) * 4, src + src_col,
                                            static_cast<size_t>(src_stride) * 4, static_cast<size_t>(cols) * 4,
                                            static_cast<size_t>(rows), cudaMemcpyDeviceToDevice, S(stream));
  if (err != cudaSuccess) return Internal(std::string("cuda CopyBlock: ") + cudaGetErrorString(err));
  return Status::Ok();
}

namespace {
// One thread a V-float piece; e runs over (row, block, piece) with the piece fastest.
template <int V>
__global__ void CopyBlocksKernel(const float* __restrict__ src, int64_t src_stride, int64_t src_col, int64_t src_step,
                                 float* __restrict__ dst, int64_t dst_stride, int64_t dst_col, int64_t dst_step,
                                 int64_t rows, int64_t pieces, int count) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  using Piece = std::conditional_t<V == 4, float4, float>;
  const int64_t total = rows * count * pieces;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t p = e % pieces, b = e / pieces % count, r = e / (pieces * count);
    const int64_t from = r * src_stride + src_col + b * src_step + p * V, to = r * dst_stride + dst_col + b * dst_step + p * V;
    *reinterpret_cast<Piece*>(dst + to) = *reinterpret_cast<const Piece*>(src + from);
  }
}
}  // namespace

Status CopyBlocks(const float* src, int64_t src_stride, int64_t src_col, int64_t src_step, float* dst,
                  int64_t dst_stride, int64_t dst_col, int64_t dst_step, int64_t rows, int64_t cols, int count,
                  void* stream) {
  if (rows < 0 || cols < 0 || count < 0) return InvalidArgument("cuda CopyBlocks: bad shape");
  if (rows == 0 || cols == 0 || count == 0) return Status::Ok();
  const bool aligned = (reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst)) % 16 == 0 &&
                       (src_stride | src_col | src_step | dst_stride | dst_col | dst_step | cols) % 4 == 0;
  const int v = aligned ? 4 : 1;
  const int64_t total = rows * count * (cols / v);
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((total + 255) / 256, 8192));
  if (aligned) {
    LaunchPdl(CopyBlocksKernel<4>, blocks, 256, 0, S(stream), src, src_stride, src_col, src_step, dst, dst_stride,
              dst_col, dst_step, rows, cols / 4, count);
  } else {
    LaunchPdl(CopyBlocksKernel<1>, blocks, 256, 0, S(stream), src, src_stride, src_col, src_step, dst, dst_stride,
              dst_col, dst_step, rows, cols, count);
  }
  return Launched("CopyBlocks");
}

namespace {
__global__ void RepeatColsKernel(const float* __restrict__ src, int64_t rows, int64_t width, int times,
                                 float* __restrict__ dst) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  const int64_t total = rows * width * times;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = e / (width * times), c = e % width;
    dst[e] = src[r * width + c];
  }
}

__global__ void RoundBlockKernel(float* x, int64_t ld, int64_t rows, int64_t cols) {
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < rows * cols; e += int64_t{gridDim.x} * blockDim.x) {
    float& v = x[e / cols * ld + e % cols];
    v = RoundAct(v, true);
  }
}
}  // namespace

Status RepeatCols(const float* src, int64_t rows, int64_t width, int times, float* dst, void* stream) {
  if (rows < 0 || width < 0 || times < 1) return InvalidArgument("cuda RepeatCols: bad shape");
  if (rows == 0 || width == 0) return Status::Ok();
  const int64_t blocks = (rows * width * times + 255) / 256;
  LaunchPdl(RepeatColsKernel, static_cast<unsigned>(blocks < 8192 ? blocks : 8192), 256, 0, S(stream), src, rows, width,
            times, dst);
  return Launched("RepeatCols");
}

Status RoundBlockBf16(float* x, int64_t ld, int64_t rows, int64_t cols, void* stream) {
  if (rows < 0 || cols < 0 || ld < cols) return InvalidArgument("cuda RoundBlockBf16: bad shape");
  if (rows == 0 || cols == 0) return Status::Ok();
  const int64_t blocks = (rows * cols + 255) / 256;
  LaunchPdl(RoundBlockKernel, static_cast<unsigned>(blocks < 8192 ? blocks : 8192), 256, 0, S(stream), x, ld, rows,
            cols);
  return Launched("RoundBlockBf16");
}

Status Rope(float* x, int n, int heads, int head_dim, int rot_dim, const int32_t* pos, const float* inv_freq,
            float attn_scale, bool bf16, void* stream) {
  if (n < 0 || heads <= 0 || rot_dim <= 0 || rot_dim % 2 != 0 || rot_dim > head_dim) {
    return InvalidArgument("cuda Rope: bad shape");
  }
  if (n == 0) return Status::Ok();
  const int half = rot_dim / 2;
  const int64_t total = int64_t{n} * heads * half;
  LaunchPdl(RopeKernel, Blocks(total), kThreads, 0, S(stream), x, heads, head_dim, half, pos, inv_freq, attn_scale,
            total, bf16);
  return Launched("Rope");
}

Status GdnGates(const float* in, int64_t stride, int64_t b_col, int64_t a_col, int n, int hv, const DevWeight& a_log,
                const DevWeight& dt_bias, bool bf16, float* beta, float* g, void* stream) {
  if (n < 0 || hv <= 0) return InvalidArgument("cuda GdnGates: bad shape");
  if (n == 0) return Status::Ok();
  const int64_t total = int64_t{n} * hv;
  LaunchPdl(GdnGatesKernel, Blocks(total), kThreads, 0, S(stream), in, stride, b_col, a_col, hv, a_log, dt_bias, total,
            bf16, beta, g);
  return Launched("GdnGates");
}

}  // namespace graft::cuda

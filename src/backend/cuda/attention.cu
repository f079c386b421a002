#include <cuda_runtime.h>

#include <string>

#include "backend/cuda/attention.h"
#include "backend/cuda/device_math.cuh"

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

__global__ void __launch_bounds__(kThreads) AttentionKernel(AttentionArgs a) {
  __shared__ float qs[kMaxHeadDim];
  __shared__ float p[kThreads];
  __shared__ float red[kThreads];
  const int t = blockIdx.x / a.num_heads, h = blockIdx.x % a.num_heads;
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
      const float* kr = a.k_pages + row * kv_stride + kvh * hd;
      float dot = 0.0f;
      for (int d = 0; d < hd; ++d) dot = __fadd_rn(dot, __fmul_rn(qs[d], kr[d]));
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
      const float* vr = a.v_pages + row * kv_stride + kvh * hd;
      if (d0 < hd) acc0 = __fadd_rn(acc0, __fmul_rn(p[jj], vr[d0]));
      if (d1 < hd) acc1 = __fadd_rn(acc1, __fmul_rn(p[jj], vr[d1]));
    }
    mx = new_max;
    __syncthreads();
  }
  float* o = a.out + (int64_t{t} * a.num_heads + h) * hd;
  if (d0 < hd) o[d0] = RoundAct(__fdiv_rn(acc0, sum), a.bf16);
  if (d1 < hd) o[d1] = RoundAct(__fdiv_rn(acc1, sum), a.bf16);
}

}  // namespace

Status Attention(const AttentionArgs& a, void* stream) {
  if (a.n < 0 || a.num_heads <= 0 || a.num_kv_heads <= 0 || a.num_heads % a.num_kv_heads != 0 || a.head_dim <= 0 ||
      a.head_dim > kMaxHeadDim || a.page_size <= 0) {
    return InvalidArgument("cuda Attention: bad shape (head_dim must be 1..256, heads a multiple of kv heads)");
  }
  if (a.n == 0) return Status::Ok();
  const int64_t blocks = int64_t{a.n} * a.num_heads;
  if (blocks > 0x7fffffff) return InvalidArgument("cuda Attention: too many (row, head) pairs");
  AttentionKernel<<<static_cast<unsigned>(blocks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(a);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return Internal(std::string("cuda Attention launch: ") + cudaGetErrorString(err));
  return Status::Ok();
}

}  // namespace graft::cuda

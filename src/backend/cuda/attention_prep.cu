#include "backend/cuda/attention_prep.h"

#include <cuda_runtime.h>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/launched.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/row_norm.cuh"

namespace graft::cuda {
namespace {

static_assert(kQkvPrepMaxHeadDim == kNormThreads, "a head's columns are the norm block's threads");

// Block (t, h): token t's query head h (h < nh: q normed and rotated, gate copied when gated) or
// key-value head h - nh (k normed and rotated, v copied). Thread c owns column c of the head.
__global__ void __launch_bounds__(kNormThreads) QkvPrepKernel(QkvPrepDevArgs a, bool bf16) {
  __shared__ float partial[kNormThreads], normed[kNormThreads];
  PdlBegin();  // pdl.cuh: nothing read or written before the predecessor completes
  const int t = blockIdx.x, c = threadIdx.x, hd = a.hd;
  const bool query = static_cast<int>(blockIdx.y) < a.nh;
  const int h = query ? blockIdx.y : blockIdx.y - a.nh;
  const bool gated = a.gate != nullptr;
  const int64_t q_w = int64_t{a.nh} * hd, kv_w = int64_t{a.nkv} * hd, q_span = gated ? 2 * q_w : q_w;
  const float* row = a.qkv + t * (q_span + 2 * kv_w);
  const float* src = query ? row + int64_t{h} * (gated ? 2 : 1) * hd : row + q_span + int64_t{h} * hd;
  const float* w = query ? a.q_norm : a.k_norm;
  float x = 0.0f, wc = 0.0f, copy = 0.0f;
  if (c < hd) {
    x = src[c];
    wc = w[c];
    if (!query) copy = row[q_span + kv_w + int64_t{h} * hd + c];  // v_h
    else if (gated) copy = src[hd + c];                            // gate_h
  }
  // RmsNorm's sum: each thread its one column from zero (0 + x² is x²), then the block's tree.
  const float inv = InvRms(c < hd ? __fadd_rn(0.0f, __fmul_rn(x, x)) : 0.0f, hd, a.eps, partial);
  if (c < hd) normed[c] = Normed(x, inv, wc, a.norm_kind, bf16);
  __syncthreads();
  if (c >= hd) return;
  float out = normed[c];
  const int half = a.rot_dim / 2;
  if (c < a.rot_dim) {
    const int d = c < half ? c : c - half;
    float y0, y1;
    RopePair(normed[d], normed[d + half], a.pos[t], a.inv_freq[d], a.attn_scale, bf16, y0, y1);
    out = c < half ? y0 : y1;
  }
  if (query) {
    a.q[t * q_w + int64_t{h} * hd + c] = out;
    if (gated) a.gate[t * q_w + int64_t{h} * hd + c] = copy;
  } else {
    a.k[t * kv_w + int64_t{h} * hd + c] = out;
    a.v[t * kv_w + int64_t{h} * hd + c] = copy;
  }
}

}  // namespace

Status QkvPrep(const QkvPrepDevArgs& a, bool bf16, void* stream) {
  if (a.n < 0 || a.n > 0x7fffffff || a.nh <= 0 || a.nkv <= 0 || a.nh + a.nkv > 65535 || a.hd <= 0 ||
      a.hd > kQkvPrepMaxHeadDim || a.rot_dim < 0 || a.rot_dim % 2 != 0 || a.rot_dim > a.hd ||
      (a.norm_kind != 0 && a.norm_kind != 1)) {
    return InvalidArgument(
        "cuda QkvPrep: needs head_dim 1..256, an even rot_dim <= head_dim, nh + nkv <= 65535, norm kind 0 or 1");
  }
  if (a.n == 0) return Status::Ok();
  LaunchPdl(QkvPrepKernel, dim3(static_cast<unsigned>(a.n), static_cast<unsigned>(a.nh + a.nkv)), kNormThreads, 0,
            static_cast<cudaStream_t>(stream), a, bf16);
  return Launched("QkvPrep");
}

}  // namespace graft::cuda

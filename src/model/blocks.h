// Building blocks both forward passes share.
#pragma once

#include <vector>

#include "backend/ops.h"
#include "model/model.h"

namespace graft {

// y [rows, w.rows] = x [rows, k] · Wᵀ (rounded) for one fused projection of one layer, each row
// with the weights its adapter slot serves: rows of an exact slot that touches this projection
// run on the merged weight reconstructed from `w` (Ops::ExactWeight), every other row on `w`;
// then LoRA slots add their deltas (Ops::LoraAdd; with one weight for every row, Ops::MatMulLora
// does both). Exact slots add no delta. When rows need different weights each group is
// gathered, multiplied and scattered back: a matmul's rows are independent, so every row gets
// the bits it would get alone. xb: null, or x's twin (Ops::Twins), for the product of every row
// on `w` without a LoRA op.
void Project(Ops& ops, const StepContext& ctx, int layer, LoraTarget target, const float* x, int64_t k, const Weight& w,
             float* y, const uint16_t* xb = nullptr);

// SwiGLU MLP with its LoRA deltas: out [n, H] = down(r(r(silu(gate(x))) * up(x))), x [n, H]; xb as
// Project's.
void Mlp(Ops& ops, const StepContext& ctx, int layer, const LayerWeights& l, const float* x, int hidden, int inter,
         float* out, const uint16_t* xb = nullptr);

// For every sequence of the step: appends its k, v rows [n_s, nkv*hd] to its cache, then
// attends its q rows [n_s, nh, hd] over the cache causally. out: [rows, nh*hd].
void CachedAttention(Ops& ops, const StepContext& ctx, int layer, const float* q, const float* k, const float* v,
                     const ModelConfig& c, float* out);

// logits [ctx.batch.logits.count(rows), vocab] = x · headᵀ for the selected rows of x
// [rows, hidden] (fp32, not rounded), copied to `logits` in host memory. Selected rows are gathered first; the matmul's rows are
// independent, so a row's logits are the same bits whichever rows are selected with it.
void OutputHead(Ops& ops, const StepContext& ctx, const Weight& head, const float* x, int hidden, float* logits);

}  // namespace graft

// Building blocks both forward passes share.
#pragma once

#include <vector>

#include "backend/ops.h"
#include "model/model.h"

namespace graft {

// SwiGLU MLP: out [n, H] = down(r(r(silu(gate(x))) * up(x))), x [n, H].
void Mlp(Ops& ops, const LayerWeights& l, const float* x, int n, int hidden, int inter, float* out);

// Appends k, v [n, nkv*hd] to the cache, then attends q [n, nh, hd] over it causally.
// out: [n, nh*hd]. pos: the n query positions (= cache.len before the append, onwards).
void CachedAttention(Ops& ops, KvCache& cache, const float* q, const float* k, const float* v,
                     const int32_t* pos, int n, const ModelConfig& c, float* out);

// Positions state.pos .. state.pos + n - 1.
std::vector<int32_t> Positions(const SequenceState& s, int n);

}  // namespace graft

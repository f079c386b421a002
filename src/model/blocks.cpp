#include "model/blocks.h"

#include <cmath>

namespace graft {

void Mlp(Ops& ops, const LayerWeights& l, const float* x, int n, int hidden, int inter, float* out) {
  (void)hidden;
  std::vector<float> gu(static_cast<size_t>(n) * 2 * inter), act(static_cast<size_t>(n) * inter);
  ops.MatMul(x, n, l.gate_up, gu.data(), true);
  ops.SiluMul(gu.data(), n, inter, act.data());
  ops.MatMul(act.data(), n, l.down, out, true);
}

void CachedAttention(Ops& ops, KvCache& cache, const float* q, const float* k, const float* v,
                     const int32_t* pos, int n, const ModelConfig& c, float* out) {
  const size_t row = static_cast<size_t>(c.num_kv_heads) * c.head_dim;
  cache.k.insert(cache.k.end(), k, k + n * row);
  cache.v.insert(cache.v.end(), v, v + n * row);
  cache.len += n;
  AttentionArgs a{};
  a.q = q;
  a.k_cache = cache.k.data();
  a.v_cache = cache.v.data();
  a.pos = pos;
  a.n = n;
  a.num_heads = c.num_heads;
  a.num_kv_heads = c.num_kv_heads;
  a.head_dim = c.head_dim;
  a.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  a.out = out;
  ops.Attention(a);
}

std::vector<int32_t> Positions(const SequenceState& s, int n) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (int t = 0; t < n; ++t) p[t] = s.pos + t;
  return p;
}

}  // namespace graft

#include "model/blocks.h"

#include <cmath>
#include <map>

#include "model/projections.h"

namespace graft {

namespace {
// The LoRA modules of each slot on `target` (nullptr: none; exact slots have none here), and
// whether any row of the step selects one.
bool LoraModules(const StepContext& ctx, int layer, LoraTarget target,
                 std::vector<const std::vector<LoraModule>*>& modules) {
  const auto& slots = ctx.adapters.slots;
  modules.assign(slots.size(), nullptr);
  for (size_t s = 1; s < slots.size(); ++s) {
    if (!slots[s] || ctx.adapters.is_exact(s)) continue;
    const auto& mods = slots[s]->layers[static_cast<size_t>(layer)].at(target);
    if (!mods.empty()) modules[s] = &mods;
  }
  bool any = false;
  for (int32_t slot : ctx.batch.row_adapter) any |= slot > 0 && modules[static_cast<size_t>(slot)] != nullptr;
  return any;
}
}  // namespace

void Project(Ops& ops, const StepContext& ctx, int layer, LoraTarget target, const float* x, int64_t k, const Weight& w,
             float* y, const uint16_t* xb) {
  const int n = ctx.batch.rows();
  const auto& slots = ctx.adapters.slots;
  // The weights each row needs: 0 = w itself, s = exact slot s's merged weight.
  auto group_of = [&](int32_t slot) -> int32_t {
    if (slot <= 0 || !ctx.adapters.is_exact(static_cast<size_t>(slot))) return 0;
    return slots[static_cast<size_t>(slot)]->layers[static_cast<size_t>(layer)].at(target).empty() ? 0 : slot;
  };
  // Exact rows rebuild from the resident bf16 copy where the model keeps one (a base not
  // stored in bf16), else from w itself.
  const Weight* source = &w;
  if (ctx.exact_base && !FusedWeight(ctx.exact_base->layers[static_cast<size_t>(layer)], target).empty()) {
    source = &FusedWeight(ctx.exact_base->layers[static_cast<size_t>(layer)], target);
  }
  auto weight_of = [&](int32_t group) -> const Weight& {
    return group == 0 ? w : ops.ExactWeight(*source, slots[static_cast<size_t>(group)]->layers[static_cast<size_t>(layer)].at(target));
  };
  std::map<int32_t, std::vector<int32_t>> groups;  // group -> its rows, ascending
  for (int r = 0; r < n; ++r) groups[group_of(ctx.batch.row_adapter[static_cast<size_t>(r)])].push_back(r);
  // Base rows never see a LoRA op.
  std::vector<const std::vector<LoraModule>*> modules;
  const bool lora = LoraModules(ctx, layer, target, modules);
  const LoraArgs deltas{x, n, k, ctx.batch.row_adapter.data(), &modules, y, w.rows, xb};
  if (groups.size() == 1) {
    if (lora) {
      ops.MatMulLora(x, n, weight_of(groups.begin()->first), y, deltas);
    } else {
      ops.MatMul(x, n, weight_of(groups.begin()->first), y, true, xb);
    }
    return;
  }
  for (const auto& [group, rows] : groups) {
    Scratch scratch(ops);
    const int m = static_cast<int>(rows.size());
    float* xs = scratch(int64_t{m} * k);
    float* ys = scratch(int64_t{m} * w.rows);
    for (int i = 0; i < m;) {  // gather runs of consecutive rows
      int j = i + 1;
      while (j < m && rows[static_cast<size_t>(j)] == rows[static_cast<size_t>(j - 1)] + 1) ++j;
      ops.CopyBlock(x + int64_t{rows[static_cast<size_t>(i)]} * k, k, 0, xs + int64_t{i} * k, k, 0, j - i, k);
      i = j;
    }
    ops.MatMul(xs, m, weight_of(group), ys, true);
    ops.ScatterRows(ys, w.rows, rows.data(), m, y);
  }
  if (lora) ops.LoraAdd(deltas);
}

namespace {
// Whether some row of the step selects an adapter with a module on `target` (exact_only: an
// exact slot's, whose rows need the merged weight — Project's groups). A run of rows on one slot
// is looked up once (a sequence's rows are consecutive; this runs twice a layer every step).
bool RowsWithModule(const StepContext& ctx, int layer, LoraTarget target, bool exact_only) {
  const auto& slots = ctx.adapters.slots;
  int32_t checked = 0;
  for (int32_t slot : ctx.batch.row_adapter) {
    const size_t s = static_cast<size_t>(slot);
    if (slot == checked || slot <= 0 || s >= slots.size() || !slots[s]) continue;
    if ((!exact_only || ctx.adapters.is_exact(s)) && !slots[s]->layers[static_cast<size_t>(layer)].at(target).empty()) {
      return true;
    }
    checked = slot;
  }
  return false;
}
}  // namespace

void Mlp(Ops& ops, const StepContext& ctx, int layer, const LayerWeights& l, const float* x, int hidden, int inter,
         float* out, const uint16_t* xb) {
  const int n = ctx.batch.rows();
  if (!RowsWithModule(ctx, layer, LoraTarget::kMlpGateUp, false) && !RowsWithModule(ctx, layer, LoraTarget::kMlpDown, false)) {
    ops.SwiGluMlp(x, n, l.gate_up, l.down, out, xb);  // the same ops, which a backend may fuse
    return;
  }
  if (!RowsWithModule(ctx, layer, LoraTarget::kMlpGateUp, true) && !RowsWithModule(ctx, layer, LoraTarget::kMlpDown, true)) {
    // LoRA deltas only: the ops Project would run (MatMulLora, SiluMul, MatMulLora), which a
    // backend may fuse.
    std::vector<const std::vector<LoraModule>*> gate_up, down;
    const bool on_gate_up = LoraModules(ctx, layer, LoraTarget::kMlpGateUp, gate_up);
    const bool on_down = LoraModules(ctx, layer, LoraTarget::kMlpDown, down);
    ops.SwiGluMlpLora(x, n, l.gate_up, l.down, out, ctx.batch.row_adapter.data(), on_gate_up ? &gate_up : nullptr,
                      on_down ? &down : nullptr, xb);
    return;
  }
  Scratch scratch(ops);
  float* gu = scratch(int64_t{n} * 2 * inter);
  float* act = scratch(int64_t{n} * inter);
  Project(ops, ctx, layer, LoraTarget::kMlpGateUp, x, hidden, l.gate_up, gu, xb);
  ops.SiluMul(gu, n, inter, act);
  Project(ops, ctx, layer, LoraTarget::kMlpDown, act, inter, l.down, out);
}

void OutputHead(Ops& ops, const StepContext& ctx, const Weight& head, const float* x, int hidden, float* logits) {
  const LogitRows& which = ctx.batch.logits;
  const int64_t count = which.count(ctx.batch.rows());
  if (count == 0) return;
  Scratch scratch(ops);
  const float* in = x;
  if (!which.all) {
    float* picked = scratch(count * hidden);
    for (int64_t i = 0; i < count; ++i) {
      ops.CopyBlock(x + int64_t{which.rows[static_cast<size_t>(i)]} * hidden, hidden, 0, picked, hidden, i * hidden, 1,
                    hidden);
    }
    in = picked;
  }
  float* out = scratch(count * head.rows);
  ops.MatMul(in, count, head, out, /*round_output=*/false);
  if (which.top_k > 0) {
    ops.TopK(out, count, static_cast<int>(head.rows), which.temperature.data(), which.top_k, logits, ctx.top_ids);
  } else {
    ops.ToHost(out, count * head.rows, logits);
  }
}

void CachedAttention(Ops& ops, const StepContext& ctx, int layer, const float* q, const float* k, const float* v,
                     const ModelConfig& c, float* out) {
  const int64_t kv_w = int64_t{c.num_kv_heads} * c.head_dim, q_w = int64_t{c.num_heads} * c.head_dim;
  const auto& b = ctx.batch;
  // Each sequence's rows for positions pos..pos+n-1 (pages reserved by Model::ReserveRows),
  // written with one scatter per pool.
  for (int s = 0; s < b.num_seqs();) {
    KvPool& pool = *b.states[s]->pool;
    const int P = pool.page_size(), r_first = b.seq_start[s];
    std::vector<int32_t> rows;
    for (; s < b.num_seqs() && b.states[s]->pool == &pool; ++s) {
      const SequenceState& st = *b.states[s];
      for (int r = b.seq_start[s]; r < b.seq_start[s + 1]; ++r) {
        const int p = ctx.pos[r];
        rows.push_back(st.pages[static_cast<size_t>(p / P)] * P + p % P);
      }
    }
    const int n = static_cast<int>(rows.size());
    ops.ScatterKv(k + r_first * kv_w, kv_w, rows.data(), n, pool.k(layer));
    ops.ScatterKv(v + r_first * kv_w, kv_w, rows.data(), n, pool.v(layer));
  }
  std::vector<AttentionArgs> seqs(static_cast<size_t>(b.num_seqs()));
  for (int s = 0; s < b.num_seqs(); ++s) {
    const int r0 = b.seq_start[s], n = b.seq_start[s + 1] - r0;
    SequenceState& st = *b.states[s];
    KvPool& pool = *st.pool;
    const int P = pool.page_size();
    AttentionArgs& a = seqs[static_cast<size_t>(s)];
    a.q = q + r0 * q_w;
    a.k_pages = pool.k(layer);
    a.v_pages = pool.v(layer);
    a.page_table = st.pages.data();
    a.page_size = P;
    a.pos = ctx.pos.data() + r0;
    a.n = n;
    a.num_heads = c.num_heads;
    a.num_kv_heads = c.num_kv_heads;
    a.head_dim = c.head_dim;
    a.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    a.out = out + r0 * q_w;
  }
  ops.AttentionSeqs(seqs.data(), b.num_seqs());  // a decode step: one launch for every sequence
}

}  // namespace graft

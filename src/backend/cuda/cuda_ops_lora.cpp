// CudaOps' adapter ops: LoRA deltas (LoraAdd, gathered by adapter onto the tensor cores with
// bf16 activations) and the projections with their deltas fused (MatMulLora, SwiGluMlpLora:
// cuda/gemm_wgmma.h's GemmWgmmaLora / GemmWgmmaSwiGluLora for the rows of a step's adapters, the
// same bits as the product then LoraAdd).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/cuda_ops_detail.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/gemm_decode.h"
#include "backend/cuda/gemm_pipe.h"
#include "backend/cuda/gemm_wgmma.h"
#include "backend/cuda/lora.h"
#include "backend/cuda/lora_stack.h"
#include "backend/cuda/matmul.h"
#include "backend/cuda/mlp.h"

namespace graft {

using namespace cuda_ops_detail;

// A decode step's LoRA B product sums its A product's split slices itself (DecodeGroup::
// x_partial) while rows x slices stay at most this: every block of the B product reads them all,
// so beyond a few rows the one sum launch is cheaper than the re-reads it saves.
constexpr int64_t kSumInBMax = 32;

void CudaOps::LoraAdd(const LoraArgs& a) { LoraAddFrom(a, cuda::UsableTwin(a.xb)); }

void CudaOps::LoraAddFrom(const LoraArgs& a, const uint16_t* xb, const cuda::DecodeGroup* base) {
  const auto timer = Time("LoraAdd");
  if (Failed() || a.m == 0) return;
  // Everything LoraAdd allocates (gathered and tripled inputs, staged module tables, per-module
  // buffers) is spent once the deltas are enqueued: handed back on every way out, so that a
  // forward pass with adapters on many layers needs one layer's worth, not all of them.
  const Scratch give_back(*this);
  const auto& by_slot = *a.modules;
  // With bf16 activations every adapter runs on the tensor cores: its rows gathered, two
  // projections (fp32 factors as three exact bf16 pieces), the deltas scattered back — the
  // same route at every row count, so a row's bits never depend on how many rows share it.
  // With fp32 activations, adapters with more than 8 rows here take the gathered route through
  // the tiled SIMT matmul, which sums in the CPU reference's order exactly as the per-row
  // kernel does (same bits, shared loads); the rest run the per-row kernel. Either way a row
  // only reads and writes itself.
  std::vector<char> tensor(by_slot.size(), 0), gathered(by_slot.size(), 0), grouped(by_slot.size(), 0);
  LoraDecodeGroups(a, grouped, xb, base);
  if (Failed()) return;
  std::vector<int64_t> rows_of(by_slot.size(), 0);
  for (int64_t r = 0; r < a.m; ++r) {
    if (a.row_slot[r] > 0 && static_cast<size_t>(a.row_slot[r]) < by_slot.size()) rows_of[static_cast<size_t>(a.row_slot[r])]++;
  }
  for (size_t s = 1; s < by_slot.size(); ++s) {
    if (!by_slot[s] || by_slot[s]->empty() || rows_of[s] == 0 || grouped[s]) continue;
    tensor[s] = bf16();
    gathered[s] = tensor[s] || rows_of[s] > 8;
  }
  for (size_t s = 1; s < by_slot.size(); ++s) {
    if (!gathered[s]) continue;
    std::vector<const LoraModule*> mods;
    for (const LoraModule& m : *by_slot[s]) mods.push_back(&m);
    LoraGathered(a, static_cast<int32_t>(s), mods, tensor[s] != 0);
  }
  std::vector<cuda::DevLoraModule> mods;
  std::vector<int32_t> begin(by_slot.size() + 1, 0);
  int max_rank = 0, max_modules = 0;
  int64_t max_out = 0;
  for (size_t s = 0; s < by_slot.size(); ++s) {
    begin[s] = static_cast<int32_t>(mods.size());
    if (!by_slot[s] || gathered[s] || grouped[s]) continue;
    for (const LoraModule& m : *by_slot[s]) {
      const DevCopy* da = Dev(m.a);
      const DevCopy* db = Dev(m.b);
      if (Failed()) return;
      mods.push_back({da->w, db->w, m.rank, m.scale, m.row_offset});
      max_rank = std::max(max_rank, m.rank);
      max_out = std::max(max_out, m.b.rows);
    }
    max_modules = std::max(max_modules, static_cast<int>(mods.size()) - begin[s]);
  }
  begin[by_slot.size()] = static_cast<int32_t>(mods.size());
  if (mods.empty()) return;
  cuda::LoraArgs d{};
  d.x = a.x;
  d.m = a.m;
  d.k = a.k;
  d.row_slot = StageInts(a.row_slot, a.m);
  d.modules = static_cast<const cuda::DevLoraModule*>(
      Stage(mods.data(), static_cast<int64_t>(mods.size() * sizeof(cuda::DevLoraModule))));
  d.slot_begin = StageInts(begin.data(), static_cast<int64_t>(begin.size()));
  d.num_slots = static_cast<int>(by_slot.size());
  d.max_rank = max_rank;
  d.y = a.y;
  d.y_stride = a.y_stride;
  d.bf16 = bf16();
  d.max_modules = max_modules;
  d.max_out = max_out;
  d.scratch = Alloc(a.m * max_modules * int64_t{max_rank});
  if (Failed()) return;
  Sign(4, d.x, d.m, d.k, d.row_slot, d.modules, d.slot_begin, d.num_slots, d.max_rank, d.y, d.y_stride, d.max_modules,
       d.max_out, d.scratch);
  for (const auto& md : mods) Sign(md.a.data, md.b.data, md.rank, md.scale, md.row_offset);
  if (!Launches()) return;
  Note(cuda::LoraAdd(d, stream_));
}

void CudaOps::LoraDecodeGroups(const LoraArgs& a, std::vector<char>& done, const uint16_t* x_bf16,
                               const cuda::DecodeGroup* base) {
  const auto& by_slot = *a.modules;
  done.assign(by_slot.size(), 0);
  // The base product alone (no adapter here takes the route, or none may).
  auto base_alone = [&] {
    if (base == nullptr) return;
    const auto* dev = static_cast<const cuda::DecodeGroup*>(Stage(base, sizeof(cuda::DecodeGroup)));
    if (Failed()) return;
    Sign(43, dev, base->xb, base->m, base->w, base->n, base->k, base->y, base->ldy);
    if (Launches()) Note(cuda::GemmDecodeGroups(dev, base, 1, false, stream_));
  };
  if (!bf16() || cublas_ || a.m < 1 || a.m > cuda::kDecodeMaxRows || a.k % 16 != 0) return base_alone();
  // A module the route takes: bf16 factors on the device, A [rank, K] and B [N, rank] both on the
  // decode form (so rank a multiple of 16, N of 8).
  struct Module {
    const LoraModule* mod;
    const cuda::DevWeight *a, *b;
  };
  auto fits = [](const cuda::DevWeight& w) { return cuda::Bf16FormsFit(1, w, w.cols); };
  struct Adapter {
    int32_t slot;
    std::vector<int32_t> rows;
    std::vector<Module> mods;
  };
  std::vector<Adapter> taken;
  for (int64_t r = 0; r < a.m; ++r) {
    const int32_t s = a.row_slot[r];
    const auto i = static_cast<size_t>(s);
    if (s <= 0 || i >= by_slot.size() || by_slot[i] == nullptr || by_slot[i]->empty()) continue;
    auto it = std::find_if(taken.begin(), taken.end(), [&](const Adapter& t) { return t.slot == s; });
    if (it == taken.end()) it = taken.insert(taken.end(), Adapter{s, {}, {}});
    it->rows.push_back(static_cast<int32_t>(r));
  }
  for (Adapter& t : taken) {
    for (const LoraModule& m : *by_slot[static_cast<size_t>(t.slot)]) {
      if (!m.a.is_bf16 || !m.b.is_bf16) break;
      const DevCopy* da = Dev(m.a);
      const DevCopy* db = Dev(m.b);
      if (Failed()) return;
      if (!fits(da->w) || !fits(db->w) || da->w.cols != a.k || da->w.rows != m.rank || db->w.cols != m.rank ||
          m.row_offset + db->w.rows > a.y_stride) {
        break;
      }
      t.mods.push_back({&m, &da->w, &db->w});
    }
    if (t.mods.size() != by_slot[static_cast<size_t>(t.slot)]->size()) t.mods.clear();  // not every module: LoraGathered
  }
  taken.erase(std::remove_if(taken.begin(), taken.end(), [](const Adapter& t) { return t.mods.empty(); }), taken.end());
  if (taken.empty()) return base_alone();
  const auto timer = Time("LoRA (decode groups)");
  const Scratch give_back(*this);  // every way out hands the arena back
  const uint16_t* xb = Bf16Of(a.x, a.m * a.k, x_bf16);
  if (Failed()) return;
  Sign(41, xb, a.m, a.k, a.y, a.y_stride);
  const int64_t kz = cuda::SplitKColumns(a.k), splits = (a.k + kz - 1) / kz;
  std::vector<cuda::DecodeGroup> as, bs;  // the A products after the base product, if any
  std::vector<cuda::SplitSum> sums;
  if (base != nullptr) {
    as.push_back(*base);
    Sign(43, base->xb, base->m, base->w, base->n, base->k, base->y, base->ldy);
  }
  for (const Adapter& t : taken) {
    const auto ms = static_cast<int64_t>(t.rows.size());
    const bool in_order = ms == a.m;  // every row, in order: no row lists
    const int32_t* rows = in_order ? nullptr : StageInts(t.rows.data(), ms);
    if (Failed()) return;
    Sign(t.slot, ms, rows);
    // Few rows and slices: each B product sums its A product's slices itself as it reads them
    // (DecodeGroup::x_partial, the sum launch's bits) — one launch less; more: the sum launch.
    const bool sum_in_b = ms * splits <= kSumInBMax;
    for (const Module& md : t.mods) {
      const int64_t rank = md.mod->rank;
      float* partial = AllocRaw(splits * ms * rank);
      auto* tb = sum_in_b ? nullptr : reinterpret_cast<uint16_t*>(AllocRaw((ms * rank + 1) / 2));
      if (Failed()) return;
      cuda::DecodeGroup ga;
      ga.xb = xb, ga.x_ld = a.k, ga.x_rows = rows, ga.m = ms;
      ga.w = static_cast<const uint16_t*>(md.a->data), ga.n = rank, ga.k = a.k, ga.split_k = kz;
      ga.y = partial, ga.ldy = rank;
      as.push_back(ga);
      cuda::DecodeGroup gb;
      if (sum_in_b) {
        gb.x_partial = partial, gb.x_splits = splits;
      } else {
        sums.push_back(cuda::SplitSum{partial, splits, ms, rank, tb});
      }
      gb.xb = tb, gb.x_ld = rank, gb.m = ms;
      gb.w = static_cast<const uint16_t*>(md.b->data), gb.n = md.b->rows, gb.k = rank;
      gb.y = a.y + md.mod->row_offset, gb.ldy = a.y_stride, gb.y_rows = rows, gb.scale = md.mod->scale;
      bs.push_back(gb);
      Sign(ga.w, partial, tb, gb.w, gb.n, rank, md.mod->row_offset, md.mod->scale, sum_in_b);
    }
    decode_group_lora_rows_ += ms;
    tensor_core_lora_rows_ += ms;
    done[static_cast<size_t>(t.slot)] = 1;
  }
  // The launches, kMaxDecodeGroups products (kMaxSplitSums sums) at a time: every A product,
  // then every sum the B products do not make, then every B product.
  auto products = [&](const std::vector<cuda::DecodeGroup>& gs, bool add) {
    for (size_t i = 0; i < gs.size() && !Failed(); i += cuda::kMaxDecodeGroups) {
      const int count = static_cast<int>(std::min<size_t>(cuda::kMaxDecodeGroups, gs.size() - i));
      const auto* dev = static_cast<const cuda::DecodeGroup*>(Stage(gs.data() + i, int64_t{count} * sizeof(cuda::DecodeGroup)));
      if (Failed()) return;
      Sign(dev, count);
      if (Launches()) Note(cuda::GemmDecodeGroups(dev, gs.data() + i, count, add, stream_));
    }
  };
  products(as, false);
  for (size_t i = 0; i < sums.size() && !Failed(); i += cuda::kMaxSplitSums) {
    const int count = static_cast<int>(std::min<size_t>(cuda::kMaxSplitSums, sums.size() - i));
    if (Launches()) Note(cuda::SumSplitsBf16Groups(sums.data() + i, count, stream_));
  }
  products(bs, true);
}

void CudaOps::LoraGathered(const LoraArgs& a, int32_t slot, const std::vector<const LoraModule*>& modules, bool tensor) {
  std::vector<int32_t> rows;
  for (int64_t r = 0; r < a.m; ++r) {
    if (a.row_slot[r] == slot) rows.push_back(static_cast<int32_t>(r));
  }
  if (rows.empty() || Failed()) return;
  const int ms = static_cast<int>(rows.size());
  const int32_t* d_rows = StageInts(rows.data(), ms);
  // Every row on this adapter (a decision's prefill): x as it is, no gathered copy.
  const bool all_rows = ms == a.m;
  const float* xs = all_rows ? a.x : AllocRaw(int64_t{ms} * a.k);
  if (Failed()) return;
  if (!all_rows) {
    Sign(17, a.x, a.k, d_rows, ms, xs);
    if (Launches()) Note(cuda::GatherRows(a.x, a.k, d_rows, ms, const_cast<float*>(xs), stream_));
  }
  // in [ms, width] repeated three times side by side (the input of a split factor), for the
  // kernels that cannot read a repeated bf16 copy (cuda::MatMulBf16).
  auto tripled = [&](const float* in, int64_t width) -> float* {
    float* out = AllocRaw(int64_t{ms} * width * 3);
    if (Failed()) return nullptr;
    Sign(19, in, width, out);
    if (Launches()) Note(cuda::RepeatCols(in, ms, width, 3, out, stream_));
    return out;
  };
  // bf16 copy of in [ms, width] (16-byte aligned arena blocks).
  auto as_bf16 = [&](const float* in, int64_t width) -> const uint16_t* {
    auto* out = reinterpret_cast<uint16_t*>(AllocRaw((int64_t{ms} * width + 1) / 2));
    if (Failed()) return nullptr;
    Sign(20, in, width, out);
    if (Launches()) Note(cuda::ToBf16(in, ms * width, out, stream_));
    return out;
  };
  // A factor on the device: fp32 factors on the tensor cores as their three bf16 pieces.
  auto factor = [&](const Weight& f) -> const cuda::DevWeight* {
    if (tensor && !f.is_bf16) return DevSplit(f);
    const DevCopy* d = Dev(f);
    return d ? &d->w : nullptr;
  };
  // The A side's inputs, made once for all modules: bf16 x for the modules the mma.sync forms
  // take (a split factor's three pieces read it repeated), tripled fp32 x for any others.
  const uint16_t* xsb = nullptr;
  float* xs3 = nullptr;
  for (const LoraModule* mp : modules) {
    const LoraModule& m = *mp;
    if (!tensor) break;
    const cuda::DevWeight* wa = factor(m.a);
    if (Failed() || wa == nullptr) return;
    if (cuda::Bf16FormsFit(ms, *wa, a.k)) {
      if (!xsb) xsb = as_bf16(xs, a.k);
    } else if (!m.a.is_bf16 && !xs3) {
      xs3 = tripled(xs, a.k);
    }
  }
  // The A products of the modules whose t the bf16 B forms read, stacked where their A factors lie
  // one after another on the device (LoraTs: the same bits), made before the modules' own work.
  std::vector<const uint16_t*> ready(modules.size(), nullptr);
  if (tensor && xsb != nullptr && !cublas_) {
    std::vector<const LoraModule*> run;
    std::vector<size_t> at;
    for (size_t i = 0; i < modules.size(); ++i) {
      const LoraModule& m = *modules[i];
      if (!m.a.is_bf16 || !m.b.is_bf16) continue;
      const cuda::DevWeight* wa = factor(m.a);
      const cuda::DevWeight* wb = factor(m.b);
      if (Failed() || wa == nullptr || wb == nullptr) return;
      if (cuda::Bf16FormsFit(ms, *wa, a.k) && cuda::Bf16FormsFit(ms, *wb, m.rank)) run.push_back(&m), at.push_back(i);
    }
    if (run.size() >= 2) {
      const std::vector<const uint16_t*> ts = LoraTs(xsb, a.k, ms, run);
      if (Failed()) return;
      for (size_t q = 0; q < run.size(); ++q) ready[at[q]] = ts[q];
    }
  }
  for (size_t mi = 0; mi < modules.size(); ++mi) {
    const LoraModule& m = *modules[mi];
    // A module's buffers are free again once its deltas are enqueued (the stream orders reuse).
    const size_t mark = Mark();
    const bool split_a = tensor && !m.a.is_bf16, split_b = tensor && !m.b.is_bf16;
    const cuda::DevWeight* wa = factor(m.a);
    const cuda::DevWeight* wb = factor(m.b);
    if (Failed() || wa == nullptr || wb == nullptr) return;
    // The down projection has only `rank` outputs: on the tensor cores it runs split along K
    // (slices fixed by K alone, summed in order) so that even one row spreads over the GPU.
    // (With --gemm cublas the B product stays with DevMatMul, which gives it to cuBLAS as it
    // does the base's products; the split A product has no cuBLAS form.)
    const bool bf16_a = tensor && cuda::Bf16FormsFit(ms, *wa, a.k);
    const bool bf16_b = tensor && !cublas_ && cuda::Bf16FormsFit(ms, *wb, m.rank);
    // Both factors bf16 past the decode form's rows: the slices summed inside the A product.
    const bool summed = bf16_a && bf16_b && cuda::SplitKSumFits(ms, *wa, a.k, xsb);
    const int64_t splits = tensor ? (wa->cols + cuda::SplitKColumns(wa->cols) - 1) / cuda::SplitKColumns(wa->cols) : 0;
    float* partial = tensor && ready[mi] == nullptr && !summed ? AllocRaw(splits * ms * m.rank) : nullptr;
    // The B product and its scatter-add as one decode-form launch (64 rows and fewer, B one bf16
    // tensor of a shape the decode form takes — Bf16FormsFit at one row: past 32 rows bf16_b is the
    // prefill form's, which takes ranks the decode form does not): LoraScatterAdd's arithmetic on
    // the product's rounded outputs, the same bits.
    const bool add_rows = bf16_b && ms <= cuda::kDecodeMaxRows && cuda::Bf16FormsFit(1, *wb, m.rank) &&
                          wb->cols == m.rank && bf16();
    float* u = add_rows ? nullptr : AllocRaw(int64_t{ms} * m.b.rows);
    const int64_t split_scratch = tensor && !bf16_a ? cuda::MatMulSplitKScratchBytes(ms, *wa) : 0;
    void* xb = split_scratch > 0 ? AllocRaw((split_scratch + 3) / 4) : nullptr;
    // The B product on the bf16 forms reads t as bf16: the slices summed straight into it (or
    // made already, stacked).
    auto* tb_sum = bf16_b && ready[mi] == nullptr ? reinterpret_cast<uint16_t*>(AllocRaw((int64_t{ms} * m.rank + 1) / 2))
                                                  : nullptr;
    const uint16_t* tb = ready[mi] != nullptr ? ready[mi] : tb_sum;
    float* t = bf16_b ? nullptr : AllocRaw(int64_t{ms} * m.rank);
    if (Failed()) return;
    Sign(18, wa->data, wb->data, t, u, m.rank, m.scale, m.row_offset, a.y, a.y_stride, partial, xb, bf16_a, bf16_b, tb, add_rows);
    if (!tensor) {
      DevMatMul(xs, ms, *wa, t, m.rank, /*round_output=*/true);
    } else if (ready[mi] == nullptr && summed) {
      const int64_t whole[2] = {0, wa->rows};
      if (Launches()) Note(cuda::MatMulSplitKSumBf16(xsb, ms, *wa, whole, 1, tb_sum, stream_));
    } else if (ready[mi] == nullptr && Launches()) {
      if (bf16_a) Note(cuda::MatMulBf16(xsb, a.k, ms, *wa, partial, m.rank, false, /*split_k=*/true, stream_));
      else Note(cuda::MatMulSplitK(split_a ? xs3 : xs, ms, *wa, partial, stream_, xb));
      if (bf16_b) Note(cuda::SumSplitsBf16(partial, ms, *wa, tb_sum, stream_));
      else Note(cuda::SumSplits(partial, ms, *wa, t, /*round_output=*/true, stream_));
    }
    if (add_rows) {  // up to 64 rows: the decode form adds the delta into y itself
      if (Launches()) {
        Note(cuda::GemmDecodeAddRows(tb, ms, static_cast<const uint16_t*>(wb->data), m.b.rows, m.rank,
                                     a.y + m.row_offset, a.y_stride, all_rows ? nullptr : d_rows, m.scale, stream_));
      }
      Release(mark);
      continue;
    }
    if (bf16_b) {
      if (Launches()) Note(cuda::MatMulBf16(tb, m.rank, ms, *wb, u, m.b.rows, true, /*split_k=*/false, stream_));
    } else {
      const float* t_in = split_b ? tripled(t, m.rank) : t;
      if (Failed()) return;
      DevMatMul(t_in, ms, *wb, u, m.b.rows, /*round_output=*/true);
    }
    if (Launches()) {
      Note(cuda::LoraScatterAdd(u, ms, m.b.rows, d_rows, m.scale, m.row_offset, a.y, a.y_stride, bf16(), stream_));
    }
    Release(mark);
  }
  if (tensor) tensor_core_lora_rows_ += ms;
}

namespace {

// An adapter's rows in a step: their count and runs of consecutive rows [first, second), in order.
struct AdapterRows {
  int32_t slot = 0;
  int64_t rows = 0;
  RowRuns runs;
};

// The adapters with rows among row_slot[0, m) for which `takes(slot)`, in the order of their first
// rows.
template <typename Takes>
std::vector<AdapterRows> RowsByAdapter(const int32_t* row_slot, int64_t m, const Takes& takes) {
  std::vector<AdapterRows> out;
  for (int64_t r = 0; r < m; ++r) {
    const int32_t s = row_slot[r];
    if (!takes(s)) continue;
    auto it = std::find_if(out.begin(), out.end(), [&](const AdapterRows& a) { return a.slot == s; });
    if (it == out.end()) it = out.insert(out.end(), AdapterRows{s, 0, {}});
    if (!it->runs.empty() && it->runs.back().second == r) {
      it->runs.back().second = r + 1;
    } else {
      it->runs.emplace_back(r, r + 1);
    }
    ++it->rows;
  }
  return out;
}

// The most runs of rows (all adapters' together) a grouped product makes its t on: each run is a
// product of its own.
constexpr size_t kMaxGroupedRuns = 16;

}  // namespace

void CudaOps::MatMulLora(const float* x, int64_t m, const Weight& w, float* y, const LoraArgs& a) {
  // Fused with bf16 activations, graft's own GEMMs (not --gemm cublas) and w one dense bf16 tensor
  // on the plain prefill form (wgmma): the deltas of modules with bf16 factors and a rank that is a
  // multiple of 8 go into the product's epilogue (cuda::GemmWgmmaLora), each to its adapter's rows
  // only (the others keep the plain product's bits). Rows of several adapters (a step's sequences
  // on different fine-tunes) share that one product when every module of each is fusable and they
  // hold at most kWgmmaMaxLoraSegments modules and kMaxGroupedRuns runs of rows: each adapter's t
  // made on its own rows alone, zeros on the others'. Otherwise the adapter with the most rows is
  // fused (its first kWgmmaMaxLoraSegments fusable modules; the rest through LoraAdd after, with
  // every other adapter's rows). At decode sizes (a dense bf16 weight off the fused form, 64 rows
  // and fewer) MatMul, then LoraAdd reading the bf16 copy of x that MatMul made (its decode route,
  // LoraDecodeGroups, copies x otherwise). Elsewhere the two ops. The same bits as MatMul then LoraAdd.
  const auto& by_slot = *a.modules;
  auto has_modules = [&](int32_t s) {
    const auto i = static_cast<size_t>(s);
    return s > 0 && i < by_slot.size() && by_slot[i] != nullptr && !by_slot[i]->empty();
  };
  std::vector<AdapterRows> adapters = RowsByAdapter(a.row_slot, m, has_modules);
  const DevCopy* d = !adapters.empty() && bf16() && !cublas_ && w.parts.empty() && a.x == x && a.m == m &&
                             a.k == w.cols && a.y == y && a.y_stride == w.rows
                         ? Dev(w)
                         : nullptr;
  if (Failed()) return;
  const bool aligned = reinterpret_cast<uintptr_t>(x) % 16 == 0;
  if (d == nullptr || cuda::ChooseMatMulForm(m, d->w, true, aligned) != cuda::MatMulForm::kBf16Prefill ||
      !cuda::GemmWgmmaFits(m, w.rows, w.cols, d->w.data, d->w.data)) {
    // A dense bf16 weight at decode sizes: MatMul, then LoraAdd on the bf16 copy of x it made.
    if (d != nullptr && d->w.bf16 && !d->w.quantized() && m <= cuda::kDecodeMaxRows) {
      const Scratch give_back(*this);  // every way out hands the arena back
      if (cuda::ChooseMatMulForm(m, d->w, true, aligned) == cuda::MatMulForm::kBf16Decode) {
        // The plain decode form: its product goes into the A products' launch (GemmDecode's bits).
        const uint16_t* xb = Bf16Of(x, m * w.cols, a.xb);
        if (Failed()) return;
        cuda::DecodeGroup base;
        base.xb = xb, base.x_ld = w.cols, base.m = m;
        base.w = static_cast<const uint16_t*>(d->w.data), base.n = w.rows, base.k = w.cols;
        base.y = y, base.ldy = w.rows, base.round = true;
        LoraAddFrom(a, xb, &base);
        return;
      }
      void* scratch = nullptr;
      const uint16_t* twin = cuda::UsableTwin(a.xb);
      {
        const auto timer = Time(m > cuda::kDecodeFormRows ? "MatMul (prefill form)" : "MatMul (decode form)",
                                2.0 * static_cast<double>(m) * w.rows * w.cols);
        const int64_t bytes = cuda::MatMulScratchBytes(m, d->w, true);
        scratch = bytes > 0 ? AllocRaw((bytes + 3) / 4) : nullptr;
        if (Failed()) return;
        Sign(3, x, m, d->w.data, y, w.rows, true, twin);
        if (Launches()) Note(cuda::MatMul(x, m, d->w, y, w.rows, /*round_output=*/true, true, stream_, scratch, twin));
      }
      LoraAddFrom(a, twin != nullptr ? twin : cuda::MatMulBf16Copy(m, d->w, true, aligned, scratch));
      return;
    }
    Ops::MatMulLora(x, m, w, y, a);
    return;
  }
  bool grouped = adapters.size() > 1;
  size_t runs = 0, modules = 0;
  for (const AdapterRows& ad : adapters) {
    runs += ad.runs.size();
    for (const LoraModule& mod : *by_slot[static_cast<size_t>(ad.slot)]) {
      ++modules;
      grouped = grouped && FusableOnRuns(m, w.cols, mod, ad.runs);
    }
  }
  if (Failed()) return;
  grouped = grouped && modules <= static_cast<size_t>(cuda::kWgmmaMaxLoraSegments) && runs <= kMaxGroupedRuns;
  if (!grouped) {  // the adapter with the most rows (ties: the lowest slot)
    const auto most = std::min_element(adapters.begin(), adapters.end(), [](const AdapterRows& p, const AdapterRows& q) {
      return p.rows != q.rows ? p.rows > q.rows : p.slot < q.slot;
    });
    adapters = {*most};
  }
  // Each fused adapter's modules in its list's order (their A factors' stacking order).
  std::vector<std::vector<const LoraModule*>> fused(adapters.size());
  std::vector<const LoraModule*> rest;  // (one adapter) fp32 factors, a rank no multiple of 8, past the segments: after the product
  size_t fused_count = 0;
  for (size_t i = 0; i < adapters.size(); ++i) {
    for (const LoraModule& mod : *by_slot[static_cast<size_t>(adapters[i].slot)]) {
      if (grouped || (fused[i].size() < static_cast<size_t>(cuda::kWgmmaMaxLoraSegments) && FusableFactor(m, w.cols, mod))) {
        fused[i].push_back(&mod);
      } else {
        rest.push_back(&mod);
      }
    }
    fused_count += fused[i].size();
  }
  if (Failed()) return;
  if (fused_count == 0) {
    Ops::MatMulLora(x, m, w, y, a);
    return;
  }
  const cuda::WgmmaForm form = cuda::ChooseWgmmaForm(m, w.rows, cuda::WgmmaMultiprocessors());
  // The op profile's two lines: the modules' t = r(x · Aᵀ) (x's bf16 copy, the A products split
  // along K, their sums), then the product with the B deltas in its epilogue.
  double flops = 2.0 * static_cast<double>(m) * w.rows * w.cols, flops_a = 0;
  for (size_t i = 0; i < adapters.size(); ++i) {
    const double rows = static_cast<double>(grouped ? adapters[i].rows : m);
    for (const LoraModule* mod : fused[i]) {
      flops += 2.0 * static_cast<double>(m) * mod->rank * mod->b.rows;
      flops_a += 2.0 * rows * mod->rank * w.cols;
    }
  }
  const Scratch give_back(*this);  // every way out hands the arena back
  const bool every_row = !grouped && adapters[0].rows == m;
  const int32_t* row_slot = every_row ? nullptr : StageInts(a.row_slot, m);
  if (Failed()) return;
  Sign(37, x, m, d->w.data, y, w.rows, w.cols, row_slot, grouped, a.xb);
  std::vector<cuda::WgmmaLoraSegment> segs;
  const uint16_t* xb = nullptr;
  {
    const auto timer = Time("LoRA A products (prefill form)", flops_a);
    xb = Bf16Of(x, m * w.cols, a.xb);
    if (Failed()) return;
    for (size_t i = 0; i < adapters.size() && !Failed(); ++i) {
      const auto made = LoraSegments(xb, w.cols, m, fused[i], adapters[i].slot, adapters[i].runs, grouped);
      segs.insert(segs.end(), made.begin(), made.end());
    }
    if (Failed()) return;
  }
  if (Launches()) {
    const auto timer = Time("MatMul+LoRA (prefill form)", flops);
    Note(cuda::GemmWgmmaLora(xb, m, static_cast<const uint16_t*>(d->w.data), w.rows, w.cols, y, w.rows, segs.data(),
                             static_cast<int>(segs.size()), form, stream_, row_slot));
  }
  if (rest.empty()) {
    for (const AdapterRows& ad : adapters) tensor_core_lora_rows_ += ad.rows;
  } else {
    const auto timer = Time("LoraAdd");
    LoraGathered(a, adapters[0].slot, rest, /*tensor=*/true);  // (counts the rows)
  }
  if (!grouped && !every_row) {  // the other adapters' rows
    std::vector<const std::vector<LoraModule>*> others(by_slot);
    others[static_cast<size_t>(adapters[0].slot)] = nullptr;
    LoraAdd(LoraArgs{a.x, a.m, a.k, a.row_slot, &others, a.y, a.y_stride, a.xb});
  }
}

void CudaOps::SwiGluMlpLora(const float* x, int64_t n, const Weight& gate_up, const Weight& down, float* out,
                            const int32_t* row_slot, const std::vector<const std::vector<LoraModule>*>* gate_up_modules,
                            const std::vector<const std::vector<LoraModule>*>* down_modules, const uint16_t* x_twin) {
  // Fused where SwiGluMlp is (past kDecodeFormRows rows, bf16 activations and dense bf16 weights on
  // the wgmma form, not --gemm cublas): each adapter's gate and up modules, bf16, whole, in the gated
  // product's epilogue (cuda::GemmWgmmaSwiGluLora), its down modules in the down product's
  // (GemmWgmmaLora) reading the bf16 activation as it is, each to its own rows (base rows beside
  // them keep the plain bits). Rows of several adapters share those two products (each adapter's t
  // made on its own rows alone) within kWgmmaMaxLoraSegments modules a product and kMaxGroupedRuns
  // runs of rows. Elsewhere (fp32 factors, a module on part of gate or up, past those counts) the
  // three ops. The same bits either way.
  auto ops = [&] { Ops::SwiGluMlpLora(x, n, gate_up, down, out, row_slot, gate_up_modules, down_modules, x_twin); };
  const DevCopy* gu = gate_up.parts.empty() && down.parts.empty() && !cublas_ ? Dev(gate_up) : nullptr;
  const DevCopy* dn = gu != nullptr ? Dev(down) : nullptr;
  if (Failed()) return;
  if (dn == nullptr || !cuda::SwiGluMlpFits(n, gu->w, dn->w, bf16())) return ops();
  const int64_t inter = down.cols, hidden = gate_up.cols;
  auto modules_of = [](const std::vector<const std::vector<LoraModule>*>* by_slot, int32_t s) {
    const auto i = static_cast<size_t>(s);
    return by_slot != nullptr && s > 0 && i < by_slot->size() && (*by_slot)[i] != nullptr && !(*by_slot)[i]->empty()
               ? (*by_slot)[i]
               : nullptr;
  };
  const std::vector<AdapterRows> adapters = RowsByAdapter(
      row_slot, n, [&](int32_t s) { return modules_of(gate_up_modules, s) || modules_of(down_modules, s); });
  if (adapters.empty()) return SwiGluMlp(x, n, gate_up, down, out, x_twin);  // no row takes a delta
  const bool grouped = adapters.size() > 1;
  // Each adapter's modules on gate|up (whole gate or whole up, at most one of each) and on down.
  std::vector<std::vector<const LoraModule*>> gu_mods(adapters.size()), down_mods(adapters.size());
  size_t runs = 0, gu_count = 0, down_count = 0;
  for (size_t i = 0; i < adapters.size(); ++i) {
    runs += adapters[i].runs.size();
    if (const auto* mods = modules_of(gate_up_modules, adapters[i].slot)) {
      bool gate = false, up = false;
      for (const LoraModule& mod : *mods) {
        if (!FusableOnRuns(n, hidden, mod, grouped ? adapters[i].runs : RowRuns{}) || mod.b.rows != inter) return ops();
        bool& place = mod.row_offset == 0 ? gate : up;
        if ((mod.row_offset != 0 && mod.row_offset != inter) || place) return ops();
        place = true;
        gu_mods[i].push_back(&mod);
      }
    }
    if (const auto* mods = modules_of(down_modules, adapters[i].slot)) {
      for (const LoraModule& mod : *mods) {
        if (!FusableOnRuns(n, inter, mod, grouped ? adapters[i].runs : RowRuns{})) return ops();
        down_mods[i].push_back(&mod);
      }
    }
    gu_count += gu_mods[i].size();
    down_count += down_mods[i].size();
  }
  if (Failed()) return;
  const auto max_segs = static_cast<size_t>(cuda::kWgmmaMaxLoraSegments);
  if (gu_count > max_segs || down_count > max_segs || (grouped && runs > kMaxGroupedRuns)) return ops();
  const cuda::WgmmaForm form = cuda::ChooseWgmmaForm(n, down.rows, cuda::WgmmaMultiprocessors());
  // The op profile's lines: each projection's A products, then its product with the deltas.
  double flops_gu_a = 0, flops_gu = 2.0 * static_cast<double>(n) * gate_up.rows * hidden;
  double flops_down_a = 0, flops_down = 2.0 * static_cast<double>(n) * down.rows * inter;
  for (size_t i = 0; i < adapters.size(); ++i) {
    const double rows = static_cast<double>(grouped ? adapters[i].rows : n);
    for (const LoraModule* mod : gu_mods[i]) {
      flops_gu_a += 2.0 * rows * mod->rank * hidden;
      flops_gu += 2.0 * static_cast<double>(n) * mod->rank * inter;
    }
    for (const LoraModule* mod : down_mods[i]) {
      flops_down_a += 2.0 * rows * mod->rank * inter;
      flops_down += 2.0 * static_cast<double>(n) * mod->rank * mod->b.rows;
    }
  }
  const Scratch give_back(*this);  // every way out hands the arena back
  auto* act = reinterpret_cast<uint16_t*>(AllocRaw((n * inter + 1) / 2));
  const int32_t* d_slots = grouped || adapters[0].rows < n ? StageInts(row_slot, n) : nullptr;
  if (Failed()) return;
  Sign(39, x, n, gu->w.data, dn->w.data, out, d_slots, gu_count, down_count, x_twin);
  // An adapter's segments of `mods` on xb [n, k], its t on its own rows when grouped.
  auto segments_of = [&](const uint16_t* xb_in, int64_t k, const std::vector<std::vector<const LoraModule*>>& mods) {
    std::vector<cuda::WgmmaLoraSegment> segs;
    for (size_t i = 0; i < adapters.size() && !Failed(); ++i) {
      if (mods[i].empty()) continue;
      const auto made = LoraSegments(xb_in, k, n, mods[i], adapters[i].slot, adapters[i].runs, grouped);
      segs.insert(segs.end(), made.begin(), made.end());
    }
    return segs;
  };
  std::vector<cuda::WgmmaLoraSegment> gu_segs;
  const uint16_t* xb = nullptr;
  {
    const auto timer = Time("LoRA A products (prefill form)", flops_gu_a);
    xb = Bf16Of(x, n * hidden, x_twin);
    if (Failed()) return;
    // A segment's columns are its module's rows of gate_up: [0, inter) the gate's, [inter, 2 inter) the up's.
    gu_segs = segments_of(xb, hidden, gu_mods);
    if (Failed()) return;
  }
  {
    const auto timer = Time(gu_count > 0 ? "SwiGluMlp+LoRA (prefill form)" : "SwiGluMlp (prefill form)", flops_gu);
    if (!Launches()) return;
    if (gu_count > 0) {
      Note(cuda::GemmWgmmaSwiGluLora(xb, n, static_cast<const uint16_t*>(gu->w.data), inter, hidden, act, inter,
                                     gu_segs.data(), static_cast<int>(gu_segs.size()), stream_, d_slots));
    } else {
      Note(cuda::GemmWgmmaSwiGlu(xb, n, static_cast<const uint16_t*>(gu->w.data), inter, hidden, act, inter, stream_));
    }
  }
  if (down_count == 0) {
    if (Launches()) Note(cuda::MatMulBf16(act, inter, n, dn->w, out, down.rows, /*round_output=*/true, /*split_k=*/false, stream_));
  } else {
    std::vector<cuda::WgmmaLoraSegment> segs;
    {
      const auto timer = Time("LoRA A products (prefill form)", flops_down_a);
      segs = segments_of(act, inter, down_mods);
      if (Failed()) return;
    }
    const auto timer = Time("MatMul+LoRA (prefill form)", flops_down);
    if (Launches()) {
      Note(cuda::GemmWgmmaLora(act, n, static_cast<const uint16_t*>(dn->w.data), down.rows, inter, out, down.rows,
                               segs.data(), static_cast<int>(segs.size()), form, stream_, d_slots));
    }
  }
  for (size_t i = 0; i < adapters.size(); ++i) {
    tensor_core_lora_rows_ += adapters[i].rows * ((gu_mods[i].empty() ? 0 : 1) + (down_mods[i].empty() ? 0 : 1));
  }
}

std::vector<const uint16_t*> CudaOps::LoraTs(const uint16_t* xb, int64_t k, int64_t m,
                                             const std::vector<const LoraModule*>& mods, const RowRuns& runs) {
  std::vector<const uint16_t*> out(mods.size(), nullptr);
  std::vector<const DevCopy*> devs;
  std::vector<cuda::FactorSpan> spans;
  for (const LoraModule* mod : mods) {
    const DevCopy* d = Dev(mod->a);
    if (Failed() || d == nullptr) return out;
    devs.push_back(d);
    spans.push_back({d->w.data, d->w.rows, d->w.cols, mod->a.is_bf16 && d->w.bf16});
  }
  const RowRuns every = runs.empty() ? RowRuns{{0, m}} : runs;
  // Runs of modules whose A factors follow one another in device memory (UploadStackedA): each run
  // one product over its factors as one weight, a module alone one over its own — once a run of
  // rows, each into its rows of the whole step's t (zeros on the rows of no run).
  for (const auto& [i, j] : cuda::StackedRuns(spans, k, cuda::kMaxSumBlocks)) {
    const int blocks = static_cast<int>(j - i);
    int64_t starts[cuda::kMaxSumBlocks + 1] = {0};
    for (size_t q = i; q < j; ++q) starts[q - i + 1] = starts[q - i] + spans[q].rows;
    cuda::DevWeight all = devs[i]->w;
    all.rows = starts[blocks];
    auto* tb = reinterpret_cast<uint16_t*>(AllocRaw((m * all.rows + 1) / 2));
    if (Failed()) return out;
    if (!runs.empty() && Launches()) {
      Note(CudaStatus(cudaMemsetAsync(tb, 0, static_cast<size_t>(m * all.rows) * 2, S(stream_)), "cudaMemsetAsync",
                      __FILE__, __LINE__));
    }
    const int64_t splits = (all.cols + cuda::SplitKColumns(all.cols) - 1) / cuda::SplitKColumns(all.cols);
    for (const auto& [r0, r1] : every) {
      const int64_t mr = r1 - r0;
      const uint16_t* xr = xb + r0 * k;
      const size_t inner = Mark();  // the slices' partials are spent once tb is enqueued
      // Past the decode form's rows the slices are summed inside the product (no partials).
      const bool summed = cuda::SplitKSumFits(mr, all, k, xr);
      float* partial = summed ? nullptr : AllocRaw(splits * mr * all.rows);
      if (Failed()) return out;
      Sign(40, xr, k, mr, m, r0, all.data, all.rows, tb, partial, blocks);
      const cuda::BlockRows place{m, r0};
      if (Launches()) {
        if (summed) {
          Note(cuda::MatMulSplitKSumBf16(xr, mr, all, starts, blocks, tb, stream_, place));
        } else {
          Note(cuda::MatMulBf16(xr, k, mr, all, partial, all.rows, false, /*split_k=*/true, stream_));
          Note(cuda::SumSplitsBf16Blocks(partial, mr, all, starts, blocks, tb, stream_, place));
        }
        stacked_lora_products_ += blocks > 1;
      }
      Release(inner);
    }
    for (size_t q = i; q < j; ++q) out[q] = tb + m * starts[q - i];
  }
  return out;
}

std::vector<cuda::WgmmaLoraSegment> CudaOps::LoraSegments(const uint16_t* xb, int64_t k, int64_t m,
                                                         const std::vector<const LoraModule*>& mods, int32_t slot,
                                                         const RowRuns& rows, bool t_on_rows) {
  const std::vector<const uint16_t*> ts = LoraTs(xb, k, m, mods, t_on_rows ? rows : RowRuns{});
  std::vector<cuda::WgmmaLoraSegment> segs;
  for (size_t i = 0; i < mods.size() && !Failed(); ++i) {
    const DevCopy* db = Dev(mods[i]->b);
    if (db == nullptr) break;
    cuda::WgmmaLoraSegment g;
    g.t = ts[i];
    g.b = static_cast<const uint16_t*>(db->w.data);
    g.col_begin = mods[i]->row_offset;
    g.cols = mods[i]->b.rows;
    g.rank = mods[i]->rank;
    g.scale = mods[i]->scale;
    g.slot = slot;
    g.row_begin = rows.front().first;
    g.row_end = rows.back().second;
    segs.push_back(g);
  }
  return segs;
}

bool CudaOps::FusableOnRuns(int64_t m, int64_t k, const LoraModule& mod, const RowRuns& runs) {
  if (!FusableFactor(m, k, mod)) return false;
  for (const auto& [r0, r1] : runs) {
    if (!FusableFactor(r1 - r0, k, mod)) return false;
  }
  return true;
}

bool CudaOps::FusableFactor(int64_t m, int64_t k, const LoraModule& mod) {
  if (!mod.a.is_bf16 || !mod.b.is_bf16 || mod.rank % 8 != 0 || mod.a.cols != k) return false;
  const DevCopy* da = Dev(mod.a);
  return !Failed() && cuda::Bf16FormsFit(m, da->w, k);
}

}  // namespace graft

#include "model/weight_table.h"

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "model/architecture.h"
#include "model/quant_loader.h"
#include "util/parallel.h"
#include "util/progress.h"
#include "util/splitmix.h"

namespace graft {
namespace {

using V = std::vector<int64_t>;

// The table for one model: every slot and the checkpoint tensors that fill it — the embedding,
// each layer's rows from its architecture's entry, the final norm and an untied head.
std::vector<TableEntry> BuildTable(const Architecture& arch, const ModelConfig& c, ModelWeights& w, bool head_present) {
  const int64_t H = c.hidden_size;
  std::vector<TableEntry> t;
  t.push_back({&w.embed, {{"embed_tokens.weight", V{c.vocab_size, H}}}});
  w.layers.resize(static_cast<size_t>(c.num_layers));
  for (int i = 0; i < c.num_layers; ++i) {
    auto& l = w.layers[static_cast<size_t>(i)];
    l.kind = c.layer_kinds[static_cast<size_t>(i)];
    arch.layer_table(c, fmt::format("layers.{}.", i), l, t);
  }
  t.push_back({&w.final_norm, {{"norm.weight", V{H}}}, false, LoraTarget::kCount, arch.norm_identity});
  if (!c.tie_word_embeddings && head_present) {
    t.push_back({&w.lm_head, {{"lm_head.weight", V{c.vocab_size, H}, /*absolute=*/true}}, true});
  }
  return t;
}

}  // namespace

bool SkippedByTextModel(const std::string& name, const ModelConfig& c) {
  auto starts = [&](const char* s) { return name.rfind(s, 0) == 0; };
  if (starts("mtp.") || starts("model.visual.") || starts("visual.")) return true;
  if (name.size() > 22 && name.compare(name.size() - 22, 22, ".rotary_emb.inv_freq") == 0) return true;
  if (name == "lm_head.weight" && c.tie_word_embeddings) return true;  // tied: the embedding is the head
  return false;
}

namespace {

Status FillSlot(const Checkpoint& ck, const ModelConfig& c, const TableEntry& e, std::set<std::string>& used,
                Progress& bar, const QuantScheme* scheme);

// A projection slot some of whose tensors the checkpoint stores quantized: one part per
// tensor (weights.h), dense parts as stored.
Status FillQuantizedSlot(const Checkpoint& ck, const ModelConfig& c, const TableEntry& e,
                         std::vector<std::shared_ptr<const QuantizedWeight>> quant, std::set<std::string>& used,
                         Progress& bar) {
  Weight& w = *e.slot;
  w.cols = e.parts[0].shape[1];
  w.rows = 0;
  for (size_t i = 0; i < e.parts.size(); ++i) {
    const TablePart& part = e.parts[i];
    const std::string full = part.absolute ? part.name : c.weight_prefix + part.name;
    w.name += (w.name.empty() ? "" : "+") + full;
    w.rows += part.shape[0];
    if (quant[i]) {
      Weight q;
      q.name = full;
      q.rows = part.shape[0];
      q.cols = part.shape[1];
      q.quant = std::move(quant[i]);
      bar.Add(static_cast<uint64_t>(q.quant->StoredBytes()));
      w.parts.push_back(std::move(q));
    } else {
      TableEntry one{nullptr, {part}, true};
      Weight d;
      one.slot = &d;
      GRAFT_RETURN_IF_ERROR(FillSlot(ck, c, one, used, bar, nullptr));
      w.parts.push_back(std::move(d));
    }
  }
  MergeParts(w);  // one tensor, or parts that all stack: the slot is that one weight
  return Status::Ok();
}

Status FillSlot(const Checkpoint& ck, const ModelConfig& c, const TableEntry& e, std::set<std::string>& used,
                Progress& bar, const QuantScheme* scheme) {
  Weight& w = *e.slot;
  if (e.projection && scheme) {
    std::vector<std::shared_ptr<const QuantizedWeight>> quant;
    bool any = false;
    for (const auto& part : e.parts) {
      const std::string full = part.absolute ? part.name : c.weight_prefix + part.name;
      const std::string module = full.substr(0, full.size() - 7);  // without ".weight"
      std::vector<std::string> read;
      GRAFT_ASSIGN_OR_RETURN(auto q, ReadQuantizedLinear(ck, *scheme, module, part.shape[0], part.shape[1], read));
      used.insert(read.begin(), read.end());
      any = any || q != nullptr;
      quant.push_back(std::move(q));
    }
    if (any) return FillQuantizedSlot(ck, c, e, std::move(quant), used, bar);
  }
  std::vector<TensorRef> refs;
  bool all_bf16 = true;
  for (const auto& part : e.parts) {
    const std::string full = part.absolute ? part.name : c.weight_prefix + part.name;
    TensorRef r = ck.Find(full);
    if (!r.file) return NotFound(fmt::format("{}: missing tensor '{}'", ck.dir(), full));
    if (r.info->shape != part.shape) {
      return InvalidArgument(fmt::format("{}: tensor '{}' has shape [{}], expected [{}] from config.json",
                                         r.file->path(), full, fmt::join(r.info->shape, ", "),
                                         fmt::join(part.shape, ", ")));
    }
    if (r.info->dtype != DType::kBF16 && r.info->dtype != DType::kF16 && r.info->dtype != DType::kF32) {
      return Unsupported(fmt::format("{}: tensor '{}' has dtype {}; expected BF16, F16 or F32", r.file->path(),
                                     full, DTypeName(r.info->dtype)));
    }
    all_bf16 = all_bf16 && r.info->dtype == DType::kBF16;
    used.insert(full);
    refs.push_back(r);
    w.name += (w.name.empty() ? "" : "+") + full;
  }
  w.cols = 1;
  for (size_t d = 1; d < e.parts[0].shape.size(); ++d) w.cols *= e.parts[0].shape[d];
  w.rows = 0;
  for (const auto& part : e.parts) w.rows += part.shape[0];
  w.is_bf16 = all_bf16;
  for (const auto& r : refs) {
    const uint64_t n = r.info->num_elements();
    if (all_bf16) {
      const size_t at = w.bf16.size();
      w.bf16.resize(at + n);
      std::memcpy(w.bf16.data() + at, r.data(), n * 2);  // memcpy: the mapping may be unaligned
    } else {
      GRAFT_ASSIGN_OR_RETURN(std::vector<float> f, ReadAsFloat(r));
      w.f32.insert(w.f32.end(), f.begin(), f.end());
    }
    bar.Add(r.info->num_bytes());
  }
  return Status::Ok();
}

}  // namespace

Result<ModelWeights> DummyWeights(const ModelConfig& cfg, uint64_t seed, int threads) {
  GRAFT_ASSIGN_OR_RETURN(const Architecture* arch, FindArchitecture(cfg.arch));
  ModelWeights w;
  auto table = BuildTable(*arch, cfg, w, /*head_present=*/!cfg.tie_word_embeddings);
  uint64_t total = 0;
  for (const auto& e : table) {
    for (const auto& p : e.parts) {
      uint64_t n = 1;
      for (int64_t d : p.shape) n *= static_cast<uint64_t>(d);
      total += n * 2;
    }
  }
  Progress bar("generating dummy weights", total, /*bytes=*/true);
  // A matrix's seed: its place among the table's matrices (vectors take none), as it always was.
  std::vector<uint64_t> matrix_index(table.size(), 0);
  for (size_t i = 0, n = 0; i < table.size(); ++i) {
    if (table[i].parts[0].shape.size() != 1) matrix_index[i] = ++n;
  }
  // One tensor: its shape, then its values — a function of (seed, its place) alone, whichever
  // thread runs it. `inner` threads split its values.
  auto generate = [&](size_t index, int inner) {
    const auto& e = table[index];
    Weight& x = *e.slot;
    x.cols = 1;
    for (size_t d = 1; d < e.parts[0].shape.size(); ++d) x.cols *= e.parts[0].shape[d];
    x.rows = 0;
    for (const auto& p : e.parts) x.rows += p.shape[0];
    x.is_bf16 = true;
    x.name = "dummy:" + e.parts[0].name;
    x.bf16.resize(static_cast<size_t>(x.rows * x.cols));
    const bool vector = e.parts[0].shape.size() == 1;
    if (vector) {  // the table's value: norms at identity, A_log and dt_bias 0
      std::fill(x.bf16.begin(), x.bf16.end(), FloatToBf16(e.identity));
    } else {
      const float a = 1.0f / std::sqrt(static_cast<float>(x.cols));
      const uint64_t slot_seed = seed * 0x9E3779B97F4A7C15ULL + matrix_index[index];
      ParallelFor(static_cast<int64_t>(x.bf16.size()), inner, [&](int64_t b, int64_t end) {
        for (int64_t i = b; i < end; ++i) {
          const float u = SymmetricUniform(slot_seed + static_cast<uint64_t>(i) * 0xBF58476D1CE4E5B9ULL);
          x.bf16[static_cast<size_t>(i)] = FloatToBf16(u * a);
        }
      });
    }
    bar.Add(x.bf16.size() * 2);
  };
  // The few large tensors (embeddings, head) one at a time over all threads; the rest a tensor a
  // thread, so that their allocation (zero-filled by the vector, page by page) runs in parallel
  // too — at 27B that first touch, single-threaded, was most of the start-up.
  constexpr int64_t kLarge = int64_t{1} << 28;
  std::vector<size_t> small;
  for (size_t i = 0; i < table.size(); ++i) {
    int64_t n = 1;
    for (int64_t d : table[i].parts[0].shape) n *= d;
    if (n * static_cast<int64_t>(table[i].parts.size()) >= kLarge) generate(i, threads);
    else small.push_back(i);
  }
  ParallelFor(static_cast<int64_t>(small.size()), threads, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) generate(small[static_cast<size_t>(i)], 1);
  });
  bar.Finish();
  return w;
}

Result<ModelWeights> LoadWeights(const Checkpoint& ckpt, const ModelConfig& cfg) {
  GRAFT_ASSIGN_OR_RETURN(const Architecture* arch, FindArchitecture(cfg.arch));
  ModelWeights w;
  const bool head_present = ckpt.Has("lm_head.weight");
  auto table = BuildTable(*arch, cfg, w, head_present);
  std::set<std::string> used;
  GRAFT_ASSIGN_OR_RETURN(QuantScheme scheme, LoadQuantScheme(ckpt.dir()));
  Progress bar("loading " + ckpt.dir(), ckpt.total_bytes(), /*bytes=*/true);
  for (const auto& e : table) GRAFT_RETURN_IF_ERROR(FillSlot(ckpt, cfg, e, used, bar, &scheme));
  bar.Finish();
  std::vector<std::string> unclaimed;
  for (const auto& t : ckpt.All()) {
    if (!used.count(t.info->name) && !SkippedByTextModel(t.info->name, cfg)) unclaimed.push_back(t.info->name);
  }
  if (!unclaimed.empty()) {
    if (unclaimed.size() > 8) unclaimed.resize(8), unclaimed.push_back("...");
    return Unsupported(fmt::format("{}: tensors that no {} slot claims (a different architecture or an "
                                   "unsupported feature?): {}",
                                   ckpt.dir(), cfg.arch, fmt::join(unclaimed, ", ")));
  }
  return w;
}

Result<ModelWeights> LoadSlots(const Checkpoint& ckpt, const ModelConfig& cfg,
                               const std::function<bool(const ModelWeights&, const Weight*)>& wanted) {
  GRAFT_ASSIGN_OR_RETURN(const Architecture* arch, FindArchitecture(cfg.arch));
  ModelWeights w;
  w.layers.reserve(static_cast<size_t>(cfg.num_layers));
  auto table = BuildTable(*arch, cfg, w, ckpt.Has("lm_head.weight"));
  std::set<std::string> used;
  uint64_t bytes = 0;
  std::vector<const TableEntry*> picked;
  for (const auto& e : table) {
    if (!wanted(w, e.slot)) continue;
    picked.push_back(&e);
    for (const auto& part : e.parts) {
      const std::string name = part.absolute ? part.name : cfg.weight_prefix + part.name;
      if (ckpt.Has(name)) bytes += ckpt.Find(name).info->num_bytes();
    }
  }
  Progress bar("loading part of " + ckpt.dir(), bytes, /*bytes=*/true);
  GRAFT_ASSIGN_OR_RETURN(QuantScheme scheme, LoadQuantScheme(ckpt.dir()));
  for (const TableEntry* e : picked) GRAFT_RETURN_IF_ERROR(FillSlot(ckpt, cfg, *e, used, bar, &scheme));
  bar.Finish();
  return w;
}

}  // namespace graft

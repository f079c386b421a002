#include "tools/adapter_extract.h"

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "weights/exact.h"
#include "adapters/lora_loader.h"
#include "adapters/weighted_svd.h"
#include "backend/cpu/cpu_ops.h"
#include "io/checkpoint.h"
#include "io/identity.h"
#include "io/model_config.h"
#include "io/safetensors_writer.h"
#include "model/model.h"
#include "model/projections.h"
#include "model/quant_loader.h"
#include "model/weight_table.h"
#include "tools/calibration.h"
#include "tools/token_agreement.h"
#include "util/bf16.h"
#include "util/bytes.h"
#include "util/progress.h"
#include "util/sha256.h"

namespace graft {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;
constexpr const char* kToolVersion = "graft 0.1.0";

// Everything that shapes the forward pass must agree between the two checkpoints.
Status CheckSamePair(const ModelConfig& b, const ModelConfig& m) {
  std::vector<std::string> diffs;
  auto cmp = [&](const char* what, auto x, auto y) {
    if (x != y) diffs.push_back(fmt::format("{}: base {} vs merged {}", what, x, y));
  };
  cmp("architecture", b.arch, m.arch);
  cmp("vocab_size", b.vocab_size, m.vocab_size);
  cmp("hidden_size", b.hidden_size, m.hidden_size);
  cmp("intermediate_size", b.intermediate_size, m.intermediate_size);
  cmp("num_hidden_layers", b.num_layers, m.num_layers);
  cmp("num_attention_heads", b.num_heads, m.num_heads);
  cmp("num_key_value_heads", b.num_kv_heads, m.num_kv_heads);
  cmp("head_dim", b.head_dim, m.head_dim);
  cmp("linear_num_key_heads", b.linear_num_key_heads, m.linear_num_key_heads);
  cmp("linear_num_value_heads", b.linear_num_value_heads, m.linear_num_value_heads);
  cmp("linear_key_head_dim", b.linear_key_head_dim, m.linear_key_head_dim);
  cmp("linear_value_head_dim", b.linear_value_head_dim, m.linear_value_head_dim);
  cmp("tie_word_embeddings", b.tie_word_embeddings, m.tie_word_embeddings);
  if (b.layer_kinds != m.layer_kinds) diffs.push_back("layer_types differ");
  if (diffs.empty()) return Status::Ok();
  return InvalidArgument(fmt::format("base and merged are not the same architecture:\n  - {}", fmt::join(diffs, "\n  - ")));
}

std::string Hex(const std::vector<uint8_t>& bytes) { return Sha256Hex(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size())); }

TensorToWrite F32Tensor(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v, bool as_bf16) {
  TensorToWrite t{name, as_bf16 ? DType::kBF16 : DType::kF32, std::move(shape), {}};
  if (as_bf16) {
    t.bytes.resize(v.size() * 2);
    for (size_t i = 0; i < v.size(); ++i) {
      const uint16_t h = FloatToBf16(v[i]);
      std::memcpy(t.bytes.data() + 2 * i, &h, 2);
    }
  } else {
    t.bytes.resize(v.size() * 4);
    CopyBytes(t.bytes.data(), v.data(), t.bytes.size());
  }
  return t;
}

void RoundInPlace(std::vector<float>& v) {
  for (auto& x : v) x = RoundBf16(x);
}

bool IsFloat(DType t) { return t == DType::kBF16 || t == DType::kF16 || t == DType::kF32; }

// Same values: the same bytes, or (for float tensors stored in different dtypes) the same
// numbers once widened to fp32.
bool SameValues(const TensorRef& a, const TensorRef& b) {
  if (a.info->shape != b.info->shape) return false;
  if (a.info->dtype == b.info->dtype) return std::memcmp(a.data(), b.data(), a.info->num_bytes()) == 0;
  auto x = ReadAsFloat(a), y = ReadAsFloat(b);
  return x.ok() && y.ok() && x.value() == y.value();
}

// merged - base in fp32, without a second full-size copy when both are bf16.
Result<std::vector<float>> Difference(const TensorRef& m, const TensorRef& b) {
  if (m.info->dtype == DType::kBF16 && b.info->dtype == DType::kBF16) {
    const uint64_t n = m.info->num_elements();
    std::vector<float> d(n);
    for (uint64_t i = 0; i < n; ++i) {
      uint16_t x, y;
      std::memcpy(&x, m.data() + 2 * i, 2);
      std::memcpy(&y, b.data() + 2 * i, 2);
      d[i] = Bf16ToFloat(x) - Bf16ToFloat(y);
    }
    return d;
  }
  GRAFT_ASSIGN_OR_RETURN(std::vector<float> d, ReadAsFloat(m));
  GRAFT_ASSIGN_OR_RETURN(std::vector<float> bv, ReadAsFloat(b));
  for (size_t i = 0; i < d.size(); ++i) d[i] -= bv[i];
  return d;
}

// merged - the weight the quantized checkpoint's projection `module` multiplies (WeightRows).
Result<std::vector<float>> DifferenceToServed(const TensorRef& m, const Checkpoint& q, const QuantScheme& scheme,
                                              const std::string& module, int64_t n, int64_t k) {
  std::vector<std::string> used;
  GRAFT_ASSIGN_OR_RETURN(auto qw, ReadQuantizedLinear(q, scheme, module, n, k, used));
  std::vector<float> served;
  if (qw) {
    Weight w;
    w.rows = n;
    w.cols = k;
    w.quant = qw;
    served.resize(static_cast<size_t>(n * k));
    WeightRows(w, 0, n, served.data());
  } else {
    const TensorRef dense = q.Find(module + ".weight");
    if (!dense.file) return NotFound(fmt::format("{}: missing tensor '{}.weight'", q.dir(), module));
    if (dense.info->shape != std::vector<int64_t>{n, k}) {
      return InvalidArgument(fmt::format("{}: '{}.weight' has shape [{}], expected [{}, {}]", q.dir(), module,
                                         fmt::join(dense.info->shape, ", "), n, k));
    }
    GRAFT_ASSIGN_OR_RETURN(served, ReadAsFloat(dense));
  }
  GRAFT_ASSIGN_OR_RETURN(std::vector<float> d, ReadAsFloat(m));
  for (size_t i = 0; i < d.size(); ++i) d[i] -= served[i];
  return d;
}

std::vector<uint16_t> Bf16Copy(const TensorRef& t) {
  std::vector<uint16_t> v(t.info->num_elements());
  CopyBytes(v.data(), t.data(), v.size() * 2);
  return v;
}


Status Quality(const ExtractJob& job, const ModelConfig& cfg, ExtractReport& rep, json& manifest) {
  GRAFT_ASSIGN_OR_RETURN(std::unique_ptr<Model> base, LoadModel(job.quantized_base.empty() ? job.base : job.quantized_base));
  GRAFT_ASSIGN_OR_RETURN(std::unique_ptr<Model> merged, LoadModel(job.merged));
  LoraLoadOptions opt;
  opt.name = "extracted";
  opt.force = true;
  GRAFT_ASSIGN_OR_RETURN(LoraAdapter ad, LoadLoraAdapter(job.out, cfg, opt));
  AdapterSet set;
  set.slots.push_back(&ad);
  CpuOps ops(ActDtype::kF32, job.threads);
  auto run = [&ops](const Model& m, int32_t slot, const AdapterSet* adapters) -> SequenceLogits {
    return [&ops, &m, slot, adapters](const std::vector<int32_t>& ids, float* logits) {
      SequenceState st = m.NewState();
      return m.Forward(ops, ids.data(), static_cast<int>(ids.size()), st, logits, slot, adapters);
    };
  };
  GRAFT_ASSIGN_OR_RETURN(TokenAgreement q, AgreementOnRandomTokens(cfg.vocab_size, job.eval_sequences, job.eval_length, 1234,
                                                                   run(*merged, 0, nullptr), run(*base, 1, &set)));
  rep.mean_kl = q.mean_kl;
  rep.max_kl = q.max_kl;
  rep.top1 = q.top1;
  manifest["quality"] = {{"adapter_on", job.quantized_base.empty() ? "the base" : "the quantized base"},
                         {"tokens", q.positions},
                         {"sequences", job.eval_sequences},
                         {"activations", "float32"},
                         {"mean_kl_merged_vs_adapter", rep.mean_kl},
                         {"max_kl", rep.max_kl},
                         {"top1_agreement", rep.top1}};
  return Status::Ok();
}

}  // namespace

int64_t PeakRssKb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6));
  }
  return 0;
}

Result<ExtractReport> RunExtract(const ExtractJob& job) {
  if (job.rank.rank <= 0 && job.rank.energy <= 0) return InvalidArgument("give --rank R or --energy F");
  GRAFT_ASSIGN_OR_RETURN(ModelConfig bcfg, LoadModelConfig(job.base));
  GRAFT_ASSIGN_OR_RETURN(ModelConfig mcfg, LoadModelConfig(job.merged));
  GRAFT_RETURN_IF_ERROR(CheckSamePair(bcfg, mcfg));
  GRAFT_ASSIGN_OR_RETURN(Checkpoint bck, Checkpoint::Open(job.base));
  GRAFT_ASSIGN_OR_RETURN(Checkpoint mck, Checkpoint::Open(job.merged));
  {
    std::vector<std::string> diffs;
    for (const auto& t : bck.All()) {
      if (SkippedByTextModel(t.info->name, bcfg)) continue;
      TensorRef m = mck.Find(t.info->name);
      if (!m.file) diffs.push_back(fmt::format("{} is only in the base", t.info->name));
      else if (m.info->shape != t.info->shape ||
               (m.info->dtype != t.info->dtype && !(IsFloat(m.info->dtype) && IsFloat(t.info->dtype)))) {
        diffs.push_back(fmt::format("{}: base {} [{}] vs merged {} [{}]", t.info->name, DTypeName(t.info->dtype),
                                    fmt::join(t.info->shape, ", "), DTypeName(m.info->dtype), fmt::join(m.info->shape, ", ")));
      }
    }
    for (const auto& t : mck.All()) {
      if (SkippedByTextModel(t.info->name, mcfg)) continue;
      if (!bck.Has(t.info->name)) diffs.push_back(fmt::format("{} is only in the merged checkpoint", t.info->name));
    }
    if (!diffs.empty()) {
      if (diffs.size() > 20) diffs.resize(20), diffs.push_back("...");
      return InvalidArgument(fmt::format("base and merged checkpoints hold different tensors:\n  - {}", fmt::join(diffs, "\n  - ")));
    }
  }
  GRAFT_ASSIGN_OR_RETURN(IdentityResult bid, CachedIdentity(bck, job.cache_dir));
  GRAFT_ASSIGN_OR_RETURN(IdentityResult mid, CachedIdentity(mck, job.cache_dir));
  if (bid.identity == mid.identity) return InvalidArgument("base and merged checkpoints are identical: nothing to extract");
  // The quantized checkpoint the adapter will be served on, when fitting to it.
  std::optional<Checkpoint> qck;
  QuantScheme qscheme;
  IdentityResult qid;
  if (!job.quantized_base.empty()) {
    if (job.exact) {
      return InvalidArgument("--quantized-base with --exact: exact mode rebuilds the bf16 release weights, which a quantized "
                             "base does not hold; serve exact adapters with --exact-base instead");
    }
    GRAFT_ASSIGN_OR_RETURN(ModelConfig qcfg, LoadModelConfig(job.quantized_base));
    GRAFT_RETURN_IF_ERROR(CheckSamePair(qcfg, mcfg).WithContext("--quantized-base " + job.quantized_base));
    GRAFT_ASSIGN_OR_RETURN(Checkpoint c, Checkpoint::Open(job.quantized_base));
    GRAFT_ASSIGN_OR_RETURN(qscheme, LoadQuantScheme(job.quantized_base));
    if (qscheme.none()) {
      return InvalidArgument(fmt::format("--quantized-base {}: config.json declares no quantization_config (is it the bf16 "
                                         "base?)",
                                         job.quantized_base));
    }
    GRAFT_ASSIGN_OR_RETURN(qid, CachedIdentity(c, job.cache_dir));
    qck.emplace(std::move(c));
  }

  // Activation-aware fitting: what each projection multiplies, on the model the adapter will
  // run on (the quantized checkpoint when fitting to it).
  std::optional<InputGrams> grams;
  if (!job.calibration.empty()) {
    if (job.exact) {
      return InvalidArgument("--calibration with --exact: exact mode reproduces the merged weights bit for bit whatever "
                             "the inputs, so there is nothing to fit to them");
    }
    const std::string& served = job.quantized_base.empty() ? job.base : job.quantized_base;
    GRAFT_ASSIGN_OR_RETURN(std::unique_ptr<Model> cal_model, LoadModel(served));
    GRAFT_ASSIGN_OR_RETURN(InputGrams g, CollectInputGrams(*cal_model, job.base, job.calibration, job.calibration_tokens,
                                                          job.calibration_length, job.threads));
    grams = std::move(g);
  }

  std::error_code ec;
  fs::create_directories(job.out, ec);
  if (ec) return IoError(fmt::format("{}: cannot create: {}", job.out, ec.message()));
  for (const char* stale : {"graft_manifest.json", "graft_exact.safetensors", "graft_full.safetensors"}) {
    fs::remove(fs::path(job.out) / stale, ec);
  }
  const bool as_bf16 = !job.float32_factors && !job.exact;
  const std::string& prefix = bcfg.weight_prefix;

  // Projections to extract, and the bytes they span (for the progress bar).
  struct Item {
    int layer;
    Projection p;
    std::string module, tensor;
  };
  std::vector<Item> items;
  std::set<std::string> projection_tensors;
  uint64_t total_bytes = 0;
  for (int l = 0; l < bcfg.num_layers; ++l) {
    for (const auto& p : LayerProjections(bcfg, bcfg.layer_kinds[l])) {
      const std::string module = fmt::format("{}layers.{}.{}", prefix, l, p.path);
      const std::string short_name = p.path.substr(p.path.find('.') + 1);
      const bool wanted = (job.layers.empty() || job.layers.count(l)) && (job.modules.empty() || job.modules.count(short_name));
      if (!wanted) continue;
      projection_tensors.insert(module + ".weight");
      items.push_back({l, p, module, module + ".weight"});
      total_bytes += bck.Find(module + ".weight").info->num_bytes();
    }
  }

  // Every other tensor that differs is reported; stored whole only when asked.
  std::vector<TensorToWrite> full;
  json other = json::array();
  for (const auto& t : mck.All()) {
    if (projection_tensors.count(t.info->name) || SkippedByTextModel(t.info->name, mcfg)) continue;
    TensorRef b = bck.Find(t.info->name);
    const bool same = SameValues(b, t);
    b.file->Release(*b.info);
    t.file->Release(*t.info);
    if (same) continue;
    GRAFT_ASSIGN_OR_RETURN(std::vector<float> bv, ReadAsFloat(b));
    GRAFT_ASSIGN_OR_RETURN(std::vector<float> mv, ReadAsFloat(t));
    double md = 0;
    for (size_t i = 0; i < bv.size(); ++i) md = std::max(md, static_cast<double>(std::fabs(mv[i] - bv[i])));
    other.push_back({{"tensor", t.info->name}, {"max_abs_diff", md}, {"stored", job.store_full}});
    if (job.store_full) {
      TensorToWrite w{t.info->name, t.info->dtype, t.info->shape, {}};
      w.bytes.assign(t.data(), t.data() + t.info->num_bytes());
      full.push_back(std::move(w));
    }
  }
  if (!other.empty() && !job.store_full) {
    std::vector<std::string> names;
    for (const auto& o : other) names.push_back(fmt::format("{} (max |diff| {:.3g})", o["tensor"].get<std::string>(), o["max_abs_diff"].get<double>()));
    return InvalidArgument(fmt::format("these tensors differ but are not LoRA-extractable projections (or were left out by "
                                       "--modules/--layers); refusing to drop them silently, pass --store-full to keep them:\n  - {}",
                                       fmt::join(names, "\n  - ")));
  }

  ExtractReport rep;
  std::vector<TensorToWrite> lora, exact_tensors;
  json modules_json = json::object(), rank_pattern = json::object(), alpha_pattern = json::object();
  std::vector<std::string> targets;
  std::map<int, int> rank_count;
  Progress bar("extracting", total_bytes, /*bytes=*/true);
  for (const auto& it : items) {
    TensorRef b = bck.Find(it.tensor), m = mck.Find(it.tensor);
    bar.Add(b.info->num_bytes());
    if (SameValues(b, m)) {
      b.file->Release(*b.info);
      m.file->Release(*m.info);
      continue;
    }
    const int64_t n = it.p.rows, k = it.p.cols;
    std::vector<float> d;
    if (qck) {
      GRAFT_ASSIGN_OR_RETURN(d, DifferenceToServed(m, *qck, qscheme, it.module, n, k));
    } else {
      GRAFT_ASSIGN_OR_RETURN(d, Difference(m, b));
    }
    double dnorm = 0;
    for (float x : d) dnorm += static_cast<double>(x) * x;
    const uint64_t seed = std::hash<std::string>{}(it.module);
    LowRank lr;
    if (grams) {
      const auto g = grams->find({it.layer, it.p.target});
      if (g == grams->end() || g->second.k != k) {
        return Internal(fmt::format("calibration: no input statistics for {}", it.module));
      }
      GRAFT_ASSIGN_OR_RETURN(lr, WeightedTruncatedSvd(d.data(), n, k, g->second.g, job.calibration_damp, job.rank, seed));
    } else {
      GRAFT_ASSIGN_OR_RETURN(lr, TruncatedSvd(d.data(), n, k, job.rank, seed));
    }
    if (job.exact) {
      if (b.info->dtype != DType::kBF16 || m.info->dtype != DType::kBF16) {
        return Unsupported(fmt::format("--exact needs bf16 checkpoints; {} is {}", it.tensor, DTypeName(m.info->dtype)));
      }
      const std::vector<uint16_t> bw = Bf16Copy(b), mw = Bf16Copy(m);
      GRAFT_ASSIGN_OR_RETURN(int64_t left, RefitForExact(bw.data(), mw.data(), n, k, lr.rank, lr.a, lr.b, job.exact_iterations, 7));
      std::vector<uint16_t> rec = ReconstructBf16(bw.data(), n, k, lr.a.data(), lr.b.data(), lr.rank);
      ExactResidual res = EncodeResidual(rec, mw.data(), n * k);
      rep.exact_residual_elements += left;
      rep.exact_residual_bytes += res.bytes();
      rep.touched_bf16_bytes += n * k * 2;
      TensorToWrite idx{it.module + ".exact_index", DType::kU8, {static_cast<int64_t>(res.index_stream.size())}, res.index_stream};
      TensorToWrite val{it.module + ".exact_value", DType::kBF16, {static_cast<int64_t>(res.values.size())}, {}};
      val.bytes.resize(res.values.size() * 2);
      CopyBytes(val.bytes.data(), res.values.data(), val.bytes.size());
      exact_tensors.push_back(std::move(idx));
      exact_tensors.push_back(std::move(val));
    }
    if (as_bf16) RoundInPlace(lr.a), RoundInPlace(lr.b);
    // Relative Frobenius error of what is stored.
    double err = 0;
    for (int64_t row = 0; row < n; ++row) {
      for (int64_t c = 0; c < k; ++c) {
        float acc = 0;
        for (int j = 0; j < lr.rank; ++j) acc += lr.b[row * lr.rank + j] * lr.a[j * k + c];
        const double e = d[row * k + c] - acc;
        err += e * e;
      }
    }
    const double rel = dnorm > 0 ? std::sqrt(err / dnorm) : 0.0;
    const std::string key = "base_model.model." + it.module;
    lora.push_back(F32Tensor(key + ".lora_A.weight", {lr.rank, k}, lr.a, as_bf16));
    lora.push_back(F32Tensor(key + ".lora_B.weight", {n, lr.rank}, lr.b, as_bf16));
    modules_json[it.module] = {{"rank", lr.rank}, {"relative_error", rel}, {"kept_energy", lr.kept_energy}};
    targets.push_back(it.module);
    rank_count[lr.rank]++;
    rep.projections++;
    b.file->Release(*b.info);
    m.file->Release(*m.info);
  }
  bar.Finish();
  if (targets.empty()) return InvalidArgument("no selected projection differs between base and merged");

  // PEFT config: scale 1 everywhere (lora_alpha = rank), per-module ranks where they differ.
  int common = 0, most = 0;
  for (const auto& [r, c] : rank_count) if (c > most) common = r, most = c;
  for (const auto& [module, info] : modules_json.items()) {
    const int r = info["rank"].get<int>();
    if (r != common) rank_pattern[module] = r, alpha_pattern[module] = r;
  }
  json cfg = {{"peft_type", "LORA"}, {"task_type", "CAUSAL_LM"}, {"r", common}, {"lora_alpha", common},
              {"rank_pattern", rank_pattern}, {"alpha_pattern", alpha_pattern}, {"target_modules", targets},
              {"use_rslora", false}, {"use_dora", false}, {"bias", "none"}, {"fan_in_fan_out", false},
              {"lora_dropout", 0.0}, {"inference_mode", true}, {"modules_to_save", nullptr},
              {"base_model_name_or_path", job.base}};
  {
    std::ofstream o(fs::path(job.out) / "adapter_config.json");
    o << cfg.dump(2) << "\n";
    if (!o) return IoError(job.out + "/adapter_config.json: write failed");
  }
  json hashes = json::object();
  auto hash_all = [&](const std::string& file, const std::vector<TensorToWrite>& ts) {
    json h = json::object();
    for (const auto& t : ts) {
      h[t.name] = Hex(t.bytes);
      rep.adapter_bytes += static_cast<int64_t>(t.bytes.size());
    }
    hashes[file] = h;
  };
  hash_all("adapter_model.safetensors", lora);
  GRAFT_RETURN_IF_ERROR(WriteSafetensors((fs::path(job.out) / "adapter_model.safetensors").string(), std::move(lora)));
  if (job.exact) {
    hash_all("graft_exact.safetensors", exact_tensors);
    GRAFT_RETURN_IF_ERROR(WriteSafetensors((fs::path(job.out) / "graft_exact.safetensors").string(), std::move(exact_tensors)));
  }
  const bool has_full = !full.empty();
  if (has_full) {
    hash_all("graft_full.safetensors", full);
    GRAFT_RETURN_IF_ERROR(WriteSafetensors((fs::path(job.out) / "graft_full.safetensors").string(), std::move(full)));
  }
  json manifest = {{"format", "graft-adapter-manifest-v1"},
                   {"tool", kToolVersion},
                   {"base_identity", qck ? qid.identity : bid.identity},
                   {"merged_identity", mid.identity},
                   {"base", {{"path", job.base}, {"revision", job.base_revision}}},
                   {"merged", {{"path", job.merged}, {"revision", job.merged_revision}}},
                   {"rank_choice", job.rank.rank > 0 ? json{{"rank", job.rank.rank}} : json{{"energy", job.rank.energy}}},
                   {"factor_dtype", as_bf16 ? "bfloat16" : "float32"},
                   {"default_mode", job.exact ? "exact" : "lora"},
                   {"modules", modules_json},
                   {"other_differences", other},
                   {"tensors", hashes}};
  if (qck) {
    manifest["quantized_base"] = {{"path", job.quantized_base},
                                  {"identity", qid.identity},
                                  {"scheme", qscheme.Describe()},
                                  {"bf16_base_identity", bid.identity},
                                  {"fitted_to", "merged minus the quantized base's served weights"}};
  }
  if (grams) {
    int64_t rows = 0;
    for (const auto& [key, g] : *grams) rows = std::max(rows, g.rows);
    manifest["calibration"] = {{"text", job.calibration},
                               {"tokens", rows},
                               {"sequence_length", job.calibration_length},
                               {"damping", job.calibration_damp},
                               {"fitted_to", "each projection's action on its calibration inputs (activation-aware SVD)"}};
  }
  if (job.exact) {
    manifest["exact"] = {{"file", "graft_exact.safetensors"},
                         {"reconstruction", "bf16(float(W_base) + sum_j B[n][j]*A[j][k]) in fp32, j ascending, no FMA; "
                                            "then residual values at residual indices"},
                         {"refit_iterations", job.exact_iterations},
                         {"residual_elements", rep.exact_residual_elements},
                         {"residual_bytes", rep.exact_residual_bytes},
                         {"touched_projection_bf16_bytes", rep.touched_bf16_bytes}};
  }
  rep.peak_rss_kb = PeakRssKb();
  if (job.eval_sequences > 0 && !has_full) {
    // The quality report loads the models whole; it runs after the streamed extraction.
    GRAFT_RETURN_IF_ERROR(Quality(job, bcfg, rep, manifest));
  }
  std::ofstream o(fs::path(job.out) / "graft_manifest.json");
  o << manifest.dump(2) << "\n";
  if (!o) return IoError(job.out + "/graft_manifest.json: write failed");
  return rep;
}

}  // namespace graft

#include "tools/quantize.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "backend/cpu/cpu_ops.h"
#include "io/checkpoint.h"
#include "io/model_config.h"
#include "io/safetensors_writer.h"
#include "model/model.h"
#include "model/projections.h"
#include "weights/quantized.h"
#include "tools/token_agreement.h"
#include "util/bf16.h"
#include "util/bytes.h"
#include "util/file.h"
#include "util/json_depth.h"
#include "util/parallel.h"
#include "util/progress.h"

namespace graft {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

// A projection the format quantizes: its layer, its place in the fused slot, its module name.
struct Target {
  int layer;
  Projection p;
  std::string module;  // "model.layers.3.self_attn.q_proj"
};

// Projections a format leaves in their original dtype: Qwen3.5's in_proj_a / in_proj_b (the
// official checkpoints keep them bf16), and for int4 any whose K is not a multiple of its
// 128-column groups.
bool KeptHighPrecision(const Projection& p, QuantFormat f) {
  if (p.path == "linear_attn.in_proj_a" || p.path == "linear_attn.in_proj_b") return true;
  if (f == QuantFormat::kInt4Group) return p.cols % 128 != 0;
  return f == QuantFormat::kNvfp4 && p.cols % 16 != 0;
}

template <typename T>
std::vector<uint8_t> Bytes(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  CopyBytes(b.data(), v.data(), b.size());
  return b;
}

// max |v|, or NaN when a value is not finite.
float AbsMax(const float* v, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(v[i])) return std::numeric_limits<float>::quiet_NaN();
    m = std::max(m, std::fabs(v[i]));
  }
  return m;
}

// NVFP4's tensors that vLLM fuses into one module (its packed_modules_mapping: q/k/v,
// gate/up, in_proj_qkv/z; in_proj_b/a stay bf16) are the quantized projections of one of our
// fused slots: a key for that group.
std::pair<int, int> FusedGroup(int layer, const Projection& p) { return {layer, static_cast<int>(p.target)}; }

// The tensors one quantized projection becomes, in the format's standard names.
std::vector<TensorToWrite> Layout(const std::string& module, const QuantizedWeight& q) {
  std::vector<TensorToWrite> out;
  if (q.format == QuantFormat::kFp8Block) {
    out.push_back({module + ".weight", DType::kF8E4M3, {q.rows, q.cols}, q.codes});
    out.push_back({module + ".weight_scale_inv", DType::kF32, {(q.rows + 127) / 128, (q.cols + 127) / 128}, Bytes(q.scale)});
  } else if (q.format == QuantFormat::kNvfp4) {  // compressed-tensors nvfp4-pack-quantized
    out.push_back({module + ".weight_packed", DType::kU8, {q.rows, q.cols / 2}, q.codes});
    out.push_back({module + ".weight_scale", DType::kF8E4M3, {q.rows, q.cols / 16}, q.scale_fp8});
    out.push_back({module + ".weight_global_scale", DType::kF32, {1}, Bytes(std::vector<float>{1.0f / q.global})});
  } else {  // compressed-tensors pack-quantized
    std::vector<uint16_t> scale(q.scale.size());
    for (size_t i = 0; i < scale.size(); ++i) scale[i] = FloatToBf16(q.scale[i]);  // exact: already bf16 values
    out.push_back({module + ".weight_packed", DType::kI32, {q.rows, q.cols / 8}, Bytes(q.words)});
    out.push_back({module + ".weight_scale", DType::kBF16, {q.rows, q.cols / q.group}, Bytes(scale)});
    // int64, as compressed-tensors' compressor writes it (a torch shape tensor) and vLLM's
    // CompressedTensorsWNA16 declares the parameter.
    out.push_back({module + ".weight_shape", DType::kI64, {2}, Bytes(std::vector<int64_t>{q.rows, q.cols})});
  }
  return out;
}

json QuantizationConfig(QuantFormat f, const json& keep) {
  if (f == QuantFormat::kFp8Block) {
    return {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"},
            {"weight_block_size", {128, 128}}, {"modules_to_not_convert", keep}};
  }
  const bool fp4 = f == QuantFormat::kNvfp4;
  const char* format = fp4 ? "nvfp4-pack-quantized" : "pack-quantized";
  json weights = fp4 ? json{{"num_bits", 4}, {"type", "float"}, {"symmetric", true}, {"strategy", "tensor_group"},
                            {"group_size", 16}, {"dynamic", false}, {"observer", "minmax"}}
                     : json{{"num_bits", 4}, {"type", "int"}, {"symmetric", true}, {"strategy", "group"}, {"group_size", 128},
                            {"dynamic", false}, {"actorder", nullptr}, {"observer", "minmax"}};
  return {{"quant_method", "compressed-tensors"},
          {"format", format},
          {"quantization_status", "compressed"},
          {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", weights}, {"input_activations", nullptr},
                                          {"output_activations", nullptr}, {"format", format}}}}},
          {"ignore", keep},
          {"kv_cache_scheme", nullptr}};
}

// The quality report: the original against the written checkpoint as graft serves it (its
// projections multiplied as weights/quantized.h defines for the format).
Status Quality(const QuantizeJob& job, const ModelConfig& cfg, QuantizeReport& rep) {
  GRAFT_ASSIGN_OR_RETURN(std::unique_ptr<Model> orig, LoadModel(job.in));
  GRAFT_ASSIGN_OR_RETURN(std::unique_ptr<Model> quant, LoadModel(job.out));
  CpuOps ops(ActDtype::kF32, job.threads);
  auto run = [&ops](const Model& m) -> SequenceLogits {
    return [&ops, &m](const std::vector<int32_t>& ids, float* logits) {
      SequenceState st = m.NewState();
      return m.Forward(ops, ids.data(), static_cast<int>(ids.size()), st, logits);
    };
  };
  GRAFT_ASSIGN_OR_RETURN(TokenAgreement q, AgreementOnRandomTokens(cfg.vocab_size, job.eval_sequences, job.eval_length, 4321,
                                                                   run(*orig), run(*quant)));
  rep.mean_kl = q.mean_kl;
  rep.max_kl = q.max_kl;
  rep.top1 = q.top1;
  return Status::Ok();
}

}  // namespace

Result<QuantFormat> ParseQuantFormat(const std::string& name) {
  if (name == "fp8-block") return QuantFormat::kFp8Block;
  if (name == "w4a16") return QuantFormat::kInt4Group;
  if (name == "nvfp4") return QuantFormat::kNvfp4;
  return Unsupported(fmt::format("--format {}: graft quantize writes fp8-block, w4a16 and nvfp4", name));
}

Result<QuantFormat> ParseBenchQuantFormat(const std::string& name) {
  if (name == "fp8-channel") return QuantFormat::kFp8Channel;
  if (auto f = ParseQuantFormat(name); f.ok()) return f;
  return Unsupported(fmt::format("{}: the in-memory formats are fp8-block, fp8-channel, w4a16 and nvfp4", name));
}

Status QuantizeWeights(ModelWeights& w, const ModelConfig& cfg, QuantFormat format, int threads) {
  struct Job {
    Weight* slot;
    std::vector<Weight> parts;  // one per tensor, filled in parallel
  };
  std::vector<Job> jobs;
  struct Task {
    size_t job, part;
    const Weight* src;
    Projection p;
  };
  std::vector<Task> tasks;
  uint64_t total = 0;
  for (int l = 0; l < cfg.num_layers; ++l) {
    LayerWeights& lw = w.layers[static_cast<size_t>(l)];
    std::map<int, std::vector<Projection>> by_slot;
    for (const Projection& p : LayerProjections(cfg, lw.kind)) by_slot[static_cast<int>(p.target)].push_back(p);
    for (const auto& [t, ps] : by_slot) {
      Weight& fused = FusedWeight(lw, static_cast<LoraTarget>(t));
      if (fused.empty() || !fused.dense()) continue;
      jobs.push_back({&fused, std::vector<Weight>(ps.size())});
      for (size_t i = 0; i < ps.size(); ++i) {
        tasks.push_back({jobs.size() - 1, i, &fused, ps[i]});
        total += static_cast<uint64_t>(ps[i].rows * ps[i].cols);
      }
    }
  }
  // NVFP4: one global scale per fused group (Quantize's shared_amax), from all its quantized tensors.
  std::vector<float> job_amax(jobs.size(), 0.0f);
  if (format == QuantFormat::kNvfp4) {
    std::vector<float> amax(tasks.size(), 0.0f);
    ParallelFor(static_cast<int64_t>(tasks.size()), threads, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const Task& t = tasks[static_cast<size_t>(i)];
        if (KeptHighPrecision(t.p, format)) continue;
        std::vector<float> v(static_cast<size_t>(t.p.rows * t.p.cols));
        WeightRows(*t.src, t.p.row_offset, t.p.row_offset + t.p.rows, v.data());
        const float a = AbsMax(v.data(), t.p.rows * t.p.cols);
        amax[static_cast<size_t>(i)] = std::isnan(a) ? 0.0f : a;  // Quantize then names the bad tensor
      }
    });
    for (size_t i = 0; i < tasks.size(); ++i) job_amax[tasks[i].job] = std::max(job_amax[tasks[i].job], amax[i]);
  }
  Progress bar(std::string("quantizing to ") + QuantFormatName(format), total, /*bytes=*/false);
  std::vector<Status> errors(tasks.size(), Status::Ok());
  ParallelFor(static_cast<int64_t>(tasks.size()), threads, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const Task& t = tasks[static_cast<size_t>(i)];
      Weight part;
      part.name = t.src->name + ":" + t.p.path;
      part.rows = t.p.rows;
      part.cols = t.p.cols;
      const int64_t r0 = t.p.row_offset, r1 = t.p.row_offset + t.p.rows;
      if (KeptHighPrecision(t.p, format)) {  // as stored
        part.is_bf16 = t.src->is_bf16;
        if (part.is_bf16) part.bf16.assign(t.src->bf16.begin() + r0 * t.p.cols, t.src->bf16.begin() + r1 * t.p.cols);
        else part.f32.assign(t.src->f32.begin() + r0 * t.p.cols, t.src->f32.begin() + r1 * t.p.cols);
      } else {
        std::vector<float> v(static_cast<size_t>(t.p.rows * t.p.cols));
        WeightRows(*t.src, r0, r1, v.data());
        auto q = Quantize(v.data(), t.p.rows, t.p.cols, format, job_amax[t.job]);
        if (!q.ok()) {
          errors[static_cast<size_t>(i)] = q.status().WithContext(part.name);
          continue;
        }
        part.quant = std::make_shared<QuantizedWeight>(std::move(q).value());
      }
      jobs[t.job].parts[t.part] = std::move(part);
      bar.Add(static_cast<uint64_t>(t.p.rows * t.p.cols));
    }
  });
  bar.Finish();
  for (const Status& s : errors) GRAFT_RETURN_IF_ERROR(s);
  for (Job& j : jobs) {
    Weight fused;
    fused.name = j.slot->name;
    fused.rows = j.slot->rows;
    fused.cols = j.slot->cols;
    fused.parts = std::move(j.parts);
    MergeParts(fused);  // stacked as a checkpoint's load stacks them; one part: the slot is that part
    *j.slot = std::move(fused);
  }
  return Status::Ok();
}

Result<QuantizeReport> RunQuantize(const QuantizeJob& job) {
  GRAFT_ASSIGN_OR_RETURN(QuantFormat format, ParseQuantFormat(job.format));
  std::error_code ec;
  if (fs::exists(job.out, ec) && fs::equivalent(job.in, job.out, ec)) {
    return InvalidArgument("--out is the input directory; write the quantized checkpoint somewhere else");
  }
  // A directory already holding a checkpoint would mix the new files with stale ones (an old
  // index naming old shards is read instead of a new single file): refused before any work.
  if (fs::is_directory(job.out, ec)) {
    for (const auto& e : fs::directory_iterator(job.out, ec)) {
      const std::string name = e.path().filename().string();
      if (name == "config.json" || name.ends_with(".safetensors") || name.ends_with(".safetensors.index.json")) {
        return InvalidArgument(fmt::format("--out {} already holds a checkpoint ({}); write into a new or empty "
                                           "directory, so that no stale shard or index is loaded with the new files",
                                           job.out, name));
      }
    }
  }
  GRAFT_ASSIGN_OR_RETURN(std::string cfg_text, ReadFileLimited((fs::path(job.in) / "config.json").string(), 16u << 20));
  GRAFT_RETURN_IF_ERROR(CheckJsonDepth(cfg_text, job.in + "/config.json"));
  json cfg_json = json::parse(cfg_text, nullptr, false);
  if (!cfg_json.is_object()) return InvalidArgument(job.in + "/config.json: not a JSON object");
  if (cfg_json.contains("quantization_config")) {
    return InvalidArgument(fmt::format("{} is already quantized (config.json has a quantization_config); quantize its bf16 "
                                       "original",
                                       job.in));
  }
  GRAFT_ASSIGN_OR_RETURN(ModelConfig cfg, LoadModelConfig(job.in));
  GRAFT_ASSIGN_OR_RETURN(Checkpoint ck, Checkpoint::Open(job.in));
  std::map<std::string, Target> targets;  // by tensor name
  json keep = json::array();
  // lm_head stays high precision, and is listed even when tied to the embeddings: transformers
  // converts every Linear not listed, the tied head included (it then asks for
  // lm_head.weight_scale_inv; seen with transformers 5.17 on the demo base).
  keep.push_back("lm_head");
  for (int l = 0; l < cfg.num_layers; ++l) {
    for (const Projection& p : LayerProjections(cfg, cfg.layer_kinds[static_cast<size_t>(l)])) {
      const std::string module = fmt::format("{}layers.{}.{}", cfg.weight_prefix, l, p.path);
      if (KeptHighPrecision(p, format)) {
        keep.push_back(module);
        continue;
      }
      targets[module + ".weight"] = {l, p, module};
    }
  }
  // NVFP4: the amax of each fused group first (a read of its tensors), so that every tensor of
  // the group gets the same global scale (Quantize's shared_amax).
  std::map<std::pair<int, int>, float> group_amax;
  if (format == QuantFormat::kNvfp4) {
    Progress scan("nvfp4: global scales of fused groups", ck.total_bytes(), /*bytes=*/true);
    for (const auto& file : ck.files()) {
      const std::vector<TensorInfo>& tensors = file->tensors();
      std::vector<float> amax(tensors.size(), 0.0f);
      std::vector<Status> errors(tensors.size(), Status::Ok());
      ParallelFor(static_cast<int64_t>(tensors.size()), job.threads, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const TensorInfo& t = tensors[static_cast<size_t>(i)];
          if (targets.count(t.name)) {
            auto v = ReadAsFloat(TensorRef{file.get(), &t});
            const float a = v.ok() ? AbsMax(v->data(), static_cast<int64_t>(v->size())) : 0.0f;
            Status& err = errors[static_cast<size_t>(i)];
            if (!v.ok()) err = v.status();
            else if (std::isnan(a)) err = InvalidArgument(fmt::format("{}: holds a non-finite value; nothing to quantize", t.name));
            amax[static_cast<size_t>(i)] = a;
            file->Release(t);
          }
          scan.Add(t.num_bytes());
        }
      });
      for (const Status& st : errors) GRAFT_RETURN_IF_ERROR(st);
      for (size_t i = 0; i < tensors.size(); ++i) {  // max is order-free: the same scale at any thread count
        auto it = targets.find(tensors[i].name);
        if (it == targets.end()) continue;
        float& g = group_amax[FusedGroup(it->second.layer, it->second.p)];
        g = std::max(g, amax[i]);
      }
    }
    scan.Finish();
  }
  fs::create_directories(job.out, ec);
  if (ec) return IoError(fmt::format("{}: cannot create: {}", job.out, ec.message()));
  QuantizeReport rep;
  json weight_map = json::object();
  Progress bar("quantizing", ck.total_bytes(), /*bytes=*/true);
  for (const auto& file : ck.files()) {
    const std::string shard = fs::path(file->path()).filename().string();
    // The shard's tensors over job.threads, each one's output kept in its place: the file comes
    // out the same whatever the thread count.
    const std::vector<TensorInfo>& tensors = file->tensors();
    std::vector<std::vector<TensorToWrite>> per(tensors.size());
    std::vector<Status> errors(tensors.size(), Status::Ok());
    ParallelFor(static_cast<int64_t>(tensors.size()), job.threads, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const TensorInfo& t = tensors[static_cast<size_t>(i)];
        const TensorRef ref{file.get(), &t};
        auto it = targets.find(t.name);
        if (it == targets.end()) {
          per[static_cast<size_t>(i)].push_back(
              {t.name, t.dtype, t.shape, std::vector<uint8_t>(ref.data(), ref.data() + t.num_bytes())});
        } else if (t.shape.size() != 2) {
          errors[static_cast<size_t>(i)] = InvalidArgument(fmt::format("{}: expected a 2-D projection weight", t.name));
        } else {
          auto v = ReadAsFloat(ref);
          if (!v.ok()) {
            errors[static_cast<size_t>(i)] = v.status();
          } else {
            const auto shared = group_amax.find(FusedGroup(it->second.layer, it->second.p));
            auto q = Quantize(v->data(), t.shape[0], t.shape[1], format, shared == group_amax.end() ? 0.0f : shared->second);
            if (!q.ok()) errors[static_cast<size_t>(i)] = q.status().WithContext(t.name);
            else per[static_cast<size_t>(i)] = Layout(it->second.module, *q);
          }
        }
        bar.Add(t.num_bytes());
      }
    });
    for (const Status& st : errors) GRAFT_RETURN_IF_ERROR(st);
    std::vector<TensorToWrite> out;
    for (size_t i = 0; i < tensors.size(); ++i) {
      rep.in_bytes += static_cast<int64_t>(tensors[i].num_bytes());
      (targets.count(tensors[i].name) ? rep.quantized : rep.kept)++;
      for (auto& tw : per[i]) {
        weight_map[tw.name] = shard;
        out.push_back(std::move(tw));
      }
      file->Release(tensors[i]);
    }
    for (const auto& w : out) rep.out_bytes += static_cast<int64_t>(w.bytes.size());
    GRAFT_RETURN_IF_ERROR(WriteSafetensors((fs::path(job.out) / shard).string(), std::move(out)));
  }
  bar.Finish();
  if (ck.files().size() > 1) {
    json index = {{"metadata", {{"total_size", rep.out_bytes}}}, {"weight_map", weight_map}};
    std::ofstream o(fs::path(job.out) / "model.safetensors.index.json");
    o << index.dump(2) << "\n";
    if (!o) return IoError(job.out + "/model.safetensors.index.json: write failed");
  }
  cfg_json["quantization_config"] = QuantizationConfig(format, keep);
  {
    std::ofstream o(fs::path(job.out) / "config.json");
    o << cfg_json.dump(2) << "\n";
    if (!o) return IoError(job.out + "/config.json: write failed");
  }
  // Tokenizer, chat template, generation config...: every other regular file, as it is.
  for (const auto& e : fs::directory_iterator(job.in, ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file() || name == "config.json" || name == "model.safetensors.index.json" ||
        e.path().extension() == ".safetensors") {
      continue;
    }
    fs::copy_file(e.path(), fs::path(job.out) / name, fs::copy_options::overwrite_existing, ec);
    if (ec) return IoError(fmt::format("{}: cannot copy: {}", e.path().string(), ec.message()));
  }
  if (job.eval_sequences > 0) GRAFT_RETURN_IF_ERROR(Quality(job, cfg, rep));
  json report = {{"format", job.format},
                 {"input", job.in},
                 {"quantized_tensors", rep.quantized},
                 {"kept_tensors", rep.kept},
                 {"input_bytes", rep.in_bytes},
                 {"output_bytes", rep.out_bytes}};
  if (job.eval_sequences > 0) {
    report["quality"] = {{"reference", "the input model; candidate: the written checkpoint as graft serves it (CPU reference backend)"},
                         {"sequences", job.eval_sequences},
                         {"tokens_each", job.eval_length},
                         {"activations", "float32"},
                         {"mean_kl", rep.mean_kl},
                         {"max_kl", rep.max_kl},
                         {"top1_agreement", rep.top1}};
  }
  std::ofstream o(fs::path(job.out) / "graft_quantize_report.json");
  o << report.dump(2) << "\n";
  if (!o) return IoError(job.out + "/graft_quantize_report.json: write failed");
  return rep;
}

}  // namespace graft

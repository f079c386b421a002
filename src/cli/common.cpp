#include <cstdlib>

#include <fmt/core.h>
#include <spdlog/spdlog.h>

#include "adapters/lora_loader.h"
#include "backend/cpu/cpu_ops.h"
#ifdef GRAFT_HAVE_CUDA
#include "backend/cuda/cuda_ops.h"
#include "engine/decode_graph.h"
#include "kv/kv_pool.h"
#include "model/projections.h"
#endif
#include "io/checkpoint.h"
#include "io/identity.h"
#include "cli/commands.h"

namespace graft::cli {

void AddAdapterDtypeFlag(CLI::App* cmd, ModelSettings& s) {
  cmd->add_option("--adapter-dtype", s.adapter_dtype,
                  "Adapter factors with bf16 activations: bfloat16 rounds float32 / float16 factors to bf16 once at load "
                  "(the faster products; adapters with an exact representation keep theirs), float32 keeps them as "
                  "stored. float32 activations always keep them")
      ->capture_default_str()
      ->check(CLI::IsMember({"bfloat16", "float32"}));
}

void AddModelFlags(CLI::App* cmd, ModelSettings& s) {
  cmd->add_option("--model", s.model, "Model directory (config.json + safetensors)")->required()->check(CLI::ExistingDirectory);
  cmd->add_option("--adapter", s.adapter, "A PEFT LoRA adapter directory to apply")->check(CLI::ExistingDirectory);
  AddAdapterDtypeFlag(cmd, s);
  cmd->add_flag("--force", s.force, "Load the adapter even if its manifest names a different base");
  cmd->add_option("--adapter-mode", s.adapter_mode,
                  "lora (factors added to the base) or exact (the merged release's weights rebuilt bit for bit; needs "
                  "an adapter extracted with --exact). Default: the adapter manifest's default_mode")
      ->check(CLI::IsMember({"lora", "exact"}));
  cmd->add_option("--exact-base", s.exact_base,
                  "Exact mode on a base not stored in bf16: the bf16 checkpoint the adapter was extracted against; a "
                  "resident copy of just the projections it touches is kept (and reported)")
      ->check(CLI::ExistingDirectory);
  AddBackendFlags(cmd, s);
}

void AddBackendFlags(CLI::App* cmd, ModelSettings& s) {
  cmd->add_option("--device", s.device, "Backend: cpu (reference) or cuda (one GPU, sm_90a)")->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--dtype", s.dtype, "Activation dtype: bfloat16 (as the checkpoint runs) or float32")->capture_default_str()
      ->check(CLI::IsMember({"float32", "bfloat16"}));
  cmd->add_option("--threads", s.threads, "CPU threads (cpu backend)")->capture_default_str()->check(CLI::Range(1, 1024));
  cmd->add_option("--gpu-memory", s.gpu_memory_gib,
                  "cuda: GiB of device memory graft reserves for weights, scratch and KV pools (0 = 90% of the free memory)")
      ->capture_default_str()->check(CLI::Range(0.0, 4096.0));
  cmd->add_option("--gpu-scratch", s.gpu_scratch_mib, "cuda: MiB of the activation arena a step may use")->capture_default_str()
      ->check(CLI::Range(16, 1 << 20));
  cmd->add_option("--gemm", s.gemm,
                  "cuda: dense bf16 matrix products by graft's batch-invariant kernels, or by cuBLAS's defaults "
                  "(loads libcublas.so.13; faster on some shapes, but a row's bits then depend on its batch: "
                  "only to measure what invariance costs)")
      ->capture_default_str()->check(CLI::IsMember({"graft", "cublas"}));
}

Status MakeOps(const ModelSettings& s, const Model& model, const AdapterSet& adapters, std::unique_ptr<Ops>* ops) {
  const ActDtype act = s.dtype == "float32" ? ActDtype::kF32 : ActDtype::kBF16;
  GRAFT_ASSIGN_OR_RETURN(const int64_t exact_elements, model.ExactScratchElements(adapters));
  // (model.exact_base(), when loaded, is uploaded with the model below and shown as exact memory.)
  if (exact_elements > 0) {
    spdlog::info("memory: exact-mode scratch {:.1f} MB (the largest fused projection an exact adapter rebuilds, shared by all)",
                 exact_elements * 2 / 1e6);
  }
  if (s.gemm != "graft" && s.device != "cuda") {
    return InvalidArgument("--gemm " + s.gemm + " picks the CUDA backend's matrix products: it needs --device cuda");
  }
  if (s.device == "cpu") {
    *ops = std::make_unique<CpuOps>(act, s.threads);
    return (*ops)->ReserveExact(exact_elements);
  }
#ifdef GRAFT_HAVE_CUDA
  CudaOptions o;
  o.act = act;
  o.budget_bytes = static_cast<int64_t>(s.gpu_memory_gib * (1 << 30));
  o.scratch_bytes = int64_t{s.gpu_scratch_mib} << 20;
  o.op_profile = s.op_profile;
  o.cublas = s.gemm == "cublas";
  GRAFT_ASSIGN_OR_RETURN(std::unique_ptr<CudaOps> cuda, CudaOps::Create(o));
  GRAFT_RETURN_IF_ERROR(cuda->Upload(model.weights()));
  if (model.exact_base()) GRAFT_RETURN_IF_ERROR(cuda->UploadExactBase(*model.exact_base()));
  for (const LoraAdapter* a : adapters.slots) {
    if (a) GRAFT_RETURN_IF_ERROR(cuda->Upload(*a));
  }
  GRAFT_RETURN_IF_ERROR(cuda->ReserveExact(exact_elements));
  spdlog::info("device: {} | {} activations | {} | device memory:\n{}", cuda->device_name(), s.dtype,
               cuda->uses_cublas() ? "products by cuBLAS (rows NOT batch-invariant)" : "batch-invariant products",
               cuda->memory().Table());
  *ops = std::move(cuda);
  return Status::Ok();
#else
  (void)model;
  (void)adapters;
  return Unsupported("--device cuda: this graft was built without the CUDA backend (nvcc was not found at build time)");
#endif
}

Status SizeEnginePools(const Model& model, Ops& ops, const PoolAsk& ask, EngineConfig* ec) {
  const std::shared_ptr<PoolMemory> mem = ops.pool_memory();
  const int64_t left = mem ? mem->budget_left() : -1;
  GRAFT_RETURN_IF_ERROR(CheckPoolAsk(ask));
  if (left < 0) {  // host memory: fixed defaults where not asked
    if (ask.kv_tokens > 0) ec->kv_token_budget = ask.kv_tokens;
    if (ask.decision_tokens > 0) ec->decision_kv_tokens = ask.decision_tokens;
    if (ask.max_running > 0) ec->max_running = ask.max_running;
    if (ask.max_decisions > 0) ec->max_decisions = ask.max_decisions;
    ec->decision_kv_tokens = std::min(ec->decision_kv_tokens, ec->kv_token_budget);  // a part of the pool
    return Status::Ok();
  }
  const ModelConfig& c = model.config();
  PoolNeeds needs;
  needs.kv_bytes_per_token = KvPool::KvBytesPerToken(c, mem->kv_value_bytes());
  needs.slot_bytes = c.num_layers_of(LayerKind::kLinearAttention) > 0 ? KvPool::SlotBytes(c) : 0;
  needs.context = c.max_position_embeddings;
  needs.page_size = ec->page_size;
  GRAFT_ASSIGN_OR_RETURN(const PoolPlan plan, PlanPools(left, needs, ask));
  ec->kv_token_budget = plan.kv_tokens;
  ec->decision_kv_tokens = plan.decision_tokens;
  ec->max_running = plan.max_running;
  ec->max_decisions = plan.max_decisions;
  spdlog::info("pools from the memory budget ({:.2f} GB left after weights, adapters and scratch): {}", left / 1e9,
               plan.Describe());
  return Status::Ok();
}

int64_t RuntimeAdapterSlotBytes(const ModelConfig& c, int max_rank, bool bf16_factors, const Ops& ops) {
  int64_t bytes = 0;
  for (int l = 0; l < c.num_layers; ++l) {
    for (const Projection& p : LayerProjections(c, c.layer_kinds[static_cast<size_t>(l)])) {
      const int64_t a = ops.FactorBytes(int64_t{max_rank} * p.cols, bf16_factors);
      const int64_t b = ops.FactorBytes(p.rows * int64_t{max_rank}, bf16_factors);
      if (a > 0 || b > 0) bytes += a + b + 2 * 256;
    }
  }
  return bytes;
}

DecodeGraphs MakeDecodeGraphs(const Model& model, Ops& ops, bool enabled) {
  DecodeGraphs g;
#ifdef GRAFT_HAVE_CUDA
  auto* cuda = dynamic_cast<CudaOps*>(&ops);
  if (!cuda || !enabled) return g;
  auto cache = std::make_shared<DecodeGraphCache>(model, *cuda);
  g.run = [cache](const StepBatch& b, const AdapterSet& a, float* logits, int32_t* ids) {
    return cache->Run(b, a, logits, ids);
  };
  g.summary = [cache] { return cache->Summary(); };
#else
  (void)model;
  (void)ops;
  (void)enabled;
#endif
  return g;
}

Result<LoadedModel> LoadModelAndAdapter(const ModelSettings& s) {
  LoadedModel lm;
  GRAFT_ASSIGN_OR_RETURN(lm.model, LoadModel(s.model));
  spdlog::info("model: {} ({:.1f} MB of weights; projections {})", lm.model->config().Summary(),
               lm.model->weights().bytes() / 1e6, lm.model->weights().ProjectionStorage());
  lm.slots.exact = 0;  // the base: either mode is the base itself
  if (s.adapter.empty()) return lm;
  lm.slots.exact = -1;
  LoraLoadOptions opt;
  opt.name = s.adapter;
  opt.force = s.force;
  opt.bf16_factors = s.bf16_factors();
  opt.base_identity = [&s]() -> Result<std::string> {
    GRAFT_ASSIGN_OR_RETURN(Checkpoint ck, Checkpoint::Open(s.model));
    GRAFT_ASSIGN_OR_RETURN(IdentityResult id, CachedIdentity(ck, DefaultCacheDir()));
    return id.identity;
  };
  GRAFT_ASSIGN_OR_RETURN(LoraAdapter ad, LoadLoraAdapter(s.adapter, lm.model->config(), opt));
  lm.adapter = std::make_unique<LoraAdapter>(std::move(ad));
  lm.slots.lora = lm.adapters.Add(lm.adapter.get(), false);
  if (lm.adapter->has_exact) lm.slots.exact = lm.adapters.Add(lm.adapter.get(), true);
  lm.slots.default_exact = lm.adapter->default_exact;
  GRAFT_ASSIGN_OR_RETURN(lm.slot, lm.slots.Select(s.adapter_mode, s.adapter));
  GRAFT_RETURN_IF_ERROR(LoadExactBase(s, *lm.model, lm.adapters));
  spdlog::info("adapter {}: {} modules, rank {}..{}, {:.2f} MB of factors ({}){}; serving it as {}", s.adapter,
               lm.adapter->num_modules(), lm.adapter->min_rank(), lm.adapter->max_rank(), lm.adapter->bytes() / 1e6,
               lm.adapter->factor_storage(),
               lm.adapter->has_exact ? fmt::format(" + {:.2f} MB of exact residuals", lm.adapter->exact_bytes() / 1e6) : "",
               lm.slot == lm.slots.exact ? "exact" : "lora");
  return lm;
}

Status LoadExactBase(const ModelSettings& s, Model& model, const AdapterSet& adapters) {
  if (s.exact_base.empty()) return Status::Ok();
  bool any_exact = false;
  for (size_t i = 1; i < adapters.slots.size(); ++i) any_exact |= adapters.is_exact(i) && adapters.slots[i];
  if (!any_exact) return InvalidArgument("--exact-base: no adapter here has an exact representation to serve");
  if (model.ExactScratchElements(adapters).ok()) {
    spdlog::info("--exact-base {}: not needed, the served base holds the touched projections in bf16", s.exact_base);
    return Status::Ok();
  }
  if (!s.force) {
    GRAFT_ASSIGN_OR_RETURN(Checkpoint ck, Checkpoint::Open(s.exact_base));
    GRAFT_ASSIGN_OR_RETURN(IdentityResult id, CachedIdentity(ck, DefaultCacheDir()));
    for (size_t i = 1; i < adapters.slots.size(); ++i) {
      const LoraAdapter* a = adapters.slots[i];
      if (adapters.is_exact(i) && a && !a->base_identity.empty() && a->base_identity != id.identity) {
        return InvalidArgument(fmt::format("--exact-base {}: identity {} but adapter '{}' was extracted against {} "
                                           "(pass --force to use it anyway)",
                                           s.exact_base, id.identity, a->name, a->base_identity));
      }
    }
  }
  GRAFT_ASSIGN_OR_RETURN(int64_t bytes, model.LoadExactBase(s.exact_base, adapters));
  spdlog::info("memory: exact-mode bf16 copy of the touched projections {:.1f} MB (from {})", bytes / 1e6, s.exact_base);
  return Status::Ok();
}

std::string DefaultCacheDir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/graft";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/graft";
  return "";
}

}  // namespace graft::cli

// CudaOps: the ops interface on one CUDA device, every op a kernel of backend/cuda/.
//
// Memory, all reserved when the ops are made or the model is uploaded, inside a budget
// (`--gpu-memory`):
//   weights   each Weight (model and adapters) copied once to the device, in its storage
//             format; norm vectors also as fp32. Upload() does it up front; a weight an op
//             meets that was not uploaded is copied on first use (and counted).
//   scratch   one arena for the forward pass's activations, handed out as a stack
//             (Alloc / Mark / Release), not cleared (Ops::Alloc); host index arrays (token ids,
//             positions, page tables, adapter slots and modules) are staged into it through a
//             pinned host buffer (in a graph step at its top, one copy a step: Stage).
//   pools     KV pages and recurrent states (pool_memory()), allocated by the KvPools.
//   exact     exact mode: adapters' residuals (uploaded with the adapter) and the scratch a
//             merged fused weight is reconstructed into (ReserveExact, bf16).
// Every op runs on one stream in issue order; ToHost waits for it. Ops do not return errors
// (the interface cannot): the first failure is kept, the rest of the step's work is skipped,
// and TakeError() hands it to Model::Forward.
//
// Thread-safety: one thread at a time, like every Ops.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/cuda/device_weight.h"
#include "backend/cuda/exact.h"
#include "backend/cuda/gemm_decode.h"
#include "backend/cuda/gemm_wgmma.h"
#include "backend/cuda/op_profile.h"
#include "backend/ops.h"
#include "util/status.h"

namespace graft {

struct CudaOptions {
  ActDtype act = ActDtype::kBF16;
  int device = 0;
  int64_t budget_bytes = 0;   // device memory graft may use (0: 90% of what is free at start)
  int64_t scratch_bytes = int64_t{1} << 30;
  int64_t pinned_bytes = int64_t{64} << 20;  // host staging: a step's index arrays and, in graphs, its logits
  bool op_profile = false;    // time every op (backend/cuda/op_profile.h); slows the run
  // Dense bf16 products through cuBLAS's defaults instead of graft's kernels (--gemm cublas,
  // backend/cuda/cublas_gemm.h): only to measure what batch invariance costs; rows' bits may
  // then depend on the batch.
  bool cublas = false;
  // Fill every Alloc with NaN (a memset each): the tests' check that no op reads scratch it did
  // not write. Off, Alloc clears nothing (Ops::Alloc).
  bool poison_scratch = false;
};

// Bytes a device reservation holds, for the start-up memory table.
struct CudaMemoryUse {
  int64_t budget = 0, weights = 0, scratch = 0, pinned = 0, pools = 0;
  int64_t exact = 0;  // exact mode: the residuals and their chunk tables, plus the reconstruction scratch
  std::string Table() const;  // one line per item, MB and share of the budget
};

// The device context CudaOps and the KvPools share: the stream every op runs on, and the
// budget every allocation is counted against. As a PoolMemory it holds KV pages and state
// slots. Pools keep it alive (shared_ptr), so it outlives the ops if a pool does.
class CudaPoolMemory final : public PoolMemory {
 public:
  // kv_value_bytes: 2 with bf16 activations (bf16 KV pages), 4 with fp32 ones.
  CudaPoolMemory(void* stream, int64_t budget, int kv_value_bytes)
      : stream_(stream), budget_(budget), kv_value_bytes_(kv_value_bytes) {}
  ~CudaPoolMemory() override;  // frees what is left and destroys the stream
  float* Allocate(int64_t n) override;  // nullptr past the budget or when cudaMalloc fails
  void Free(float* block) override;
  void Copy(const float* src, float* dst, int64_t n) override;
  void Zero(float* dst, int64_t n) override;
  int kv_value_bytes() const override { return kv_value_bytes_; }
  int64_t budget_left() const override { return budget_ - used_; }

  void* stream() const { return stream_; }
  int64_t budget() const { return budget_; }
  int64_t used() const { return used_; }
  int64_t pool_bytes() const { return pool_bytes_; }
  // Device memory for the ops themselves (weights, scratch), inside the budget.
  Result<void*> AllocateBytes(int64_t bytes, const char* what);
  void FreeBytes(void* p);

 private:
  void* stream_;
  int64_t budget_, used_ = 0, pool_bytes_ = 0;
  int kv_value_bytes_;
  std::unordered_map<void*, int64_t> sizes_;
};

namespace cuda {
class CublasGemm;
}

// Runs of consecutive rows [first, second) of a step, in order (an adapter's rows).
using RowRuns = std::vector<std::pair<int64_t, int64_t>>;

class CudaOps final : public Ops {
 public:
  static Result<std::unique_ptr<CudaOps>> Create(const CudaOptions& o);
  ~CudaOps() override;
  CudaOps(const CudaOps&) = delete;
  CudaOps& operator=(const CudaOps&) = delete;

  // Copies the weights to the device now (they must outlive the ops and never change).
  Status Upload(const ModelWeights& w);
  Status Upload(const LoraAdapter& a);
  // One weight now (the ops otherwise copy a weight on its first use): where a test needs to say
  // in which order weights land in device memory.
  Status Upload(const Weight& w);
  // The A factors of one fused projection's LoRA modules (bf16, one K, ranks multiples of 8, none
  // on the device yet; otherwise nothing) uploaded one after another in one block, in the list's
  // order, so that their products run as one stacked weight (LoraTs). Upload(adapter) and
  // PlaceAdapter call it for each target's list before the factors one by one. Whether it did.
  Result<bool> UploadStackedA(const std::vector<LoraModule>& mods);
  // Exact mode's resident bf16 copy of touched projections (Model::exact_base()), counted as
  // exact memory.
  Status UploadExactBase(const ModelWeights& copy);
  CudaMemoryUse memory() const;
  // Adapter rows whose LoRA products ran on the tensor cores so far (bf16 factors).
  int64_t tensor_core_lora_rows() const { return tensor_core_lora_rows_; }
  // Products that ran several modules' A factors as one stacked weight (LoraTs), for tests.
  int64_t stacked_lora_products() const { return stacked_lora_products_; }
  // Adapter rows whose LoRA ran through LoraAdd's decode route (LoraDecodeGroups), for tests.
  int64_t decode_group_lora_rows() const { return decode_group_lora_rows_; }
  std::string device_name() const { return device_name_; }
  bool uses_cublas() const { return cublas_ != nullptr; }
  // The op profile (CudaOptions::op_profile), or nullptr.
  OpProfile* op_profile() { return profile_.get(); }

  // ---- CUDA graphs (driven by engine/decode_graph.h) -------------------------------
  // Capture: the ops between BeginCapture and EndCapture are captured into a graph instead of
  // running; EndCapture instantiates it, runs it once and finishes the host copies (ToHost).
  // Every weight must already be uploaded. Record: the ops between BeginRecord and
  // ReplayRecorded only stage their host inputs (token ids, positions, page tables, adapter
  // slots, GDN chunk counters) into the very buffers the graph reads; ReplayRecorded checks
  // that the recorded work is the captured work — the same kernels with the same parameters,
  // so that only staged values differ — launches the graph and finishes the host copies.
  // Page tables are staged padded to PageTableCapacity() in both, so that a sequence can grow
  // by a page without changing the graph.
  struct CapturedGraph;
  Status BeginCapture();
  Result<std::shared_ptr<CapturedGraph>> EndCapture();
  // A captured graph's kernel nodes and the edges between kernels that let the later one start
  // before the earlier one completes (programmatic dependent launch, pdl.cuh): a graph whose
  // kernels were launched by LaunchPdl has one a kernel that follows a kernel.
  struct GraphShape {
    int kernels = 0, edges = 0, programmatic_edges = 0;
  };
  static GraphShape ShapeOf(const CapturedGraph& g);
  Status BeginRecord();
  Status ReplayRecorded(const CapturedGraph& g);
  void CancelRecord();
  static int PageTableCapacity(int pages);

  ActDtype act_dtype() const override { return act_; }
  std::shared_ptr<PoolMemory> pool_memory() override { return dev_; }
  Status TakeError() override;
  float* Alloc(int64_t n) override;
  size_t Mark() const override { return static_cast<size_t>(top_); }
  void Release(size_t mark) override;
  void ToHost(const float* src, int64_t n, float* host_dst) override;
  void Embed(const Weight& table, const int32_t* ids, int n, float* out) override;
  // Twins in bf16 mode: the tensor-core forms read x as bf16 (cuda::MatMul's xb).
  bool Twins() const override { return bf16(); }
  void RmsNorm(const float* x, const Weight& w, int64_t rows, int dim, float eps, NormKind kind, float* out,
               uint16_t* out_bf16 = nullptr) override;
  void AddRmsNorm(float* h, const float* y, const Weight& w, int64_t rows, int dim, float eps, NormKind kind,
                  float* out, uint16_t* out_bf16 = nullptr) override;
  void MatMul(const float* x, int64_t m, const Weight& w, float* y, bool round_output,
              const uint16_t* xb = nullptr) override;
  void LoraAdd(const LoraArgs& a) override;
  void MatMulLora(const float* x, int64_t m, const Weight& w, float* y, const LoraArgs& lora) override;
  const Weight& ExactWeight(const Weight& base, const std::vector<LoraModule>& modules) override;
  Status ReserveExact(int64_t elements) override;
  void Synchronize() override;
  Status ReserveAdapterSlots(const std::vector<int32_t>& slots, int64_t bytes_each) override;
  Status PlaceAdapter(const LoraAdapter& a, int32_t slot) override;
  void ForgetAdapter(int32_t slot) override;
  int64_t FactorBytes(int64_t elements, bool is_bf16) const override;
  void TopK(const float* x, int64_t rows, int vocab, const float* temperature, int k, float* values,
            int32_t* ids) override;
  void CopyBlock(const float* src, int64_t src_stride, int64_t src_col, float* dst, int64_t dst_stride,
                 int64_t dst_col, int64_t rows, int64_t cols) override;
  void CopyBlocks(const float* src, int64_t src_stride, int64_t src_col, int64_t src_step, float* dst,
                  int64_t dst_stride, int64_t dst_col, int64_t dst_step, int64_t rows, int64_t cols,
                  int count) override;
  void ScatterRows(const float* src, int64_t width, const int32_t* rows, int n, float* dst) override;
  void ScatterKv(const float* src, int64_t width, const int32_t* rows, int n, void* pages) override;  // bf16 pages in bf16 mode
  void Rope(float* x, int n, int heads, int head_dim, int rot_dim, const int32_t* pos, const float* inv_freq,
            float attn_scale) override;
  void Attention(const AttentionArgs& a) override;
  void SiluMul(const float* gu, int64_t n, int64_t inter, float* out, uint16_t* out_bf16 = nullptr) override;
  void SwiGluMlp(const float* x, int64_t n, const Weight& gate_up, const Weight& down, float* out,
                 const uint16_t* xb = nullptr) override;
  void SwiGluMlpLora(const float* x, int64_t n, const Weight& gate_up, const Weight& down, float* out,
                     const int32_t* row_slot, const std::vector<const std::vector<LoraModule>*>* gate_up_modules,
                     const std::vector<const std::vector<LoraModule>*>* down_modules,
                     const uint16_t* xb = nullptr) override;
  void Add(float* x, const float* y, int64_t n) override;
  void SigmoidGateMul(float* x, const float* gate, int64_t gate_stride, int64_t rows, int64_t cols,
                      uint16_t* x_bf16 = nullptr) override;
  void CausalConvSilu(const float* x, int64_t x_stride, int n, int channels, const Weight& w, float* conv_state,
                      float* out) override;
  void GdnGates(const float* in, int64_t stride, int64_t b_col, int64_t a_col, int n, int hv, const Weight& a_log,
                const Weight& dt_bias, float* beta, float* g) override;
  void GdnCore(const GdnCoreArgs& a) override;
  void GdnCoreSeqs(const GdnCoreArgs* seqs, int count) override;
  void AttentionSeqs(const AttentionArgs* seqs, int count) override;
  void CausalConvSiluSeqs(const float* x, int64_t x_stride, const int* seq_start, int count, int channels,
                          const Weight& w, float* const* conv_states, float* out) override;
  void GatedRmsNorm(const float* x, const float* z, int64_t z_stride, int64_t z_col, int n, int hv, int dv,
                    const Weight& w, float eps, float* out, uint16_t* out_bf16 = nullptr) override;
  void GdnGatedCoreSeqs(const GdnCoreArgs* seqs, int count, const GdnGatedArgs& l) override;
  void QkvPrep(const QkvPrepArgs& a) override;

 private:
  struct DevCopy {
    cuda::DevWeight w;          // storage format
    float* f32 = nullptr;       // fp32 copy (vectors used by norms), made on demand
  };
  enum class Mode { kEager, kRecord, kCapture };
  explicit CudaOps(const CudaOptions& o);
  bool bf16() const { return act_ == ActDtype::kBF16; }
  // Whether ops launch work now (eager) or into the graph being captured; not when recording.
  bool Launches() const { return mode_ != Mode::kRecord; }
  // Appends launch parameters to the signature of the step being recorded or captured.
  template <typename... T>
  void Sign(const T&... v) {
    if (mode_ != Mode::kEager) (SignBytes(&v, sizeof(v)), ...);
  }
  void SignBytes(const void* p, size_t n) { signature_.append(static_cast<const char*>(p), n); }
  // ToHost's copies out of the pinned buffer, done after a graph has run.
  struct HostCopy {
    const char* from;
    void* to;
    int64_t bytes;
  };
  // Device -> host copy of `bytes` after the work before it (ToHost's body, any element type).
  void CopyOut(const void* src, int64_t bytes, void* host_dst);
  // Host -> device copy of an upload (weights, factors, residuals, an oversized Embed), done when
  // it returns. Not a plain cudaMemcpy: from pageable memory that returns once the bytes are
  // staged, before the DMA into dst has landed, and it runs on the legacy stream, which stream_
  // (non-blocking) does not wait for — a kernel launched right after could read a partly copied
  // weight (seen: a weight's first matmul off in a few rows, now and then). Nothing for 0 bytes.
  Status CopyIn(void* dst, const void* host, int64_t bytes);
  void FinishHostCopies();
  bool Failed() const { return !error_.ok(); }
  void Note(const Status& s);  // keeps the first error
  // The device copy of w (uploads it on first use); nullptr after an error.
  const DevCopy* Dev(const Weight& w);
  const DevCopy* DevQuantized(const Weight& w);
  // Alloc without the tests' poison (CudaOptions::poison_scratch): a kernel's own scratch (bf16
  // copies of x, slice partials), which the kernels around it write before they read.
  float* AllocRaw(int64_t n);
  // An fp32 LoRA factor for bf16 activations: [rows, 3 * cols] bf16, each row its three exact
  // pieces (SplitBf16x3) side by side, so the factor's products run on the bf16 tensor cores.
  const cuda::DevWeight* DevSplit(const Weight& w);
  void MatMulColumns(const float* x, int64_t m, const Weight& w, float* y, int64_t ldy, bool round_output,
                     const uint16_t* xb = nullptr);
  // A fused weight of a 4-bit part and a few bf16 rows after it (Qwen3.5's GDN in-projection and
  // its b / a) at decode sizes, in one launch (gemm_decode_w4.h: each part's bits as it has them
  // alone). False, with nothing launched, where that form does not take it.
  bool MatMulW4WithTail(const float* x, int64_t m, const Weight& w, float* y, bool round_output);
  // cuda::MatMul on device weight w with its scratch taken from (and given back to) the arena;
  // with CudaOptions::cublas, dense bf16 weights go to cuBLAS instead (x copied to bf16 the
  // same way, the result rounded after).
  void DevMatMul(const float* x, int64_t m, const cuda::DevWeight& w, float* y, int64_t ldy, bool round_output,
                 const uint16_t* xb = nullptr);
  // x [n] as bf16 for the tensor-core forms: its twin where the caller has one they can read
  // (cuda::UsableTwin), else a copy in the arena made now (null when the arena is exhausted).
  const uint16_t* Bf16Of(const float* x, int64_t n, const uint16_t* twin);
  const float* DevF32(const Weight& w);
  // LoraAdd for one adapter's rows gathered: two projections through MatMul (with bf16
  // activations, the tensor cores: bf16 factors as they are, fp32 factors as three exact bf16
  // pieces against the input repeated three times; with fp32 activations the SIMT kernels in
  // the CPU's order), then the deltas scattered back.
  void LoraGathered(const LoraArgs& a, int32_t slot, const std::vector<const LoraModule*>& modules, bool tensor);
  // LoraAdd's decode route (bf16 activations, graft's own GEMMs, 1 to cuda::kDecodeMaxRows rows):
  // the adapters whose modules all have bf16 factors of the decode form's shapes, together in
  // four launches — x's bf16 copy, every module's A product split along K (cuda::GemmDecodeGroups),
  // their slices' sums (cuda::SumSplitsBf16Groups; with few rows each B product makes its own
  // sums as it reads them, DecodeGroup::x_partial, and this launch goes), every module's B product
  // added into its adapter's rows (GemmDecodeGroups) — where LoraGathered spends a gather and a copy an adapter
  // and three launches a module: the same products, slices and sums, so the same bits. Sets
  // done[slot] for the adapters it took.
  // xb: x's bf16 copy where the caller has one (MatMulLora's base product made it), else null.
  // base: the projection's own product on xb (MatMulLora's), launched with the A products (alone
  // when no adapter takes the route), or null.
  void LoraDecodeGroups(const LoraArgs& a, std::vector<char>& done, const uint16_t* xb,
                        const cuda::DecodeGroup* base = nullptr);
  // LoraAdd, LoraDecodeGroups given x's bf16 copy xb (or null) and the base product (or null).
  void LoraAddFrom(const LoraArgs& a, const uint16_t* xb, const cuda::DecodeGroup* base = nullptr);
  // Each module's t = r(x · Aᵀ) for m rows of bf16 x [m, k] (bf16 A factors), as LoraAdd makes it
  // (MatMulSplitK's slices, summed and rounded), in bf16 [m, rank] in the arena (held until the
  // caller releases; entries nullptr after an error). A run of modules whose A factors lie one after
  // another on the device (UploadStackedA) is one product over the stacked weight and one sum into
  // each module's own block (cuda::SumSplitsBf16Blocks): each output column's slices and sum are
  // those of its module alone, the same bits in fewer launches. With `runs` (runs of consecutive
  // rows [first, second)) t is made on those rows alone, a product a run written into its rows
  // (cuda::BlockRows), and is zeros on every other row: one adapter's t in a product it shares with
  // other adapters' rows (GemmWgmmaLora reads a row's t for every segment its tile runs).
  std::vector<const uint16_t*> LoraTs(const uint16_t* xb, int64_t k, int64_t m, const std::vector<const LoraModule*>& mods,
                                      const RowRuns& runs = {});
  // The fused delta segments (GemmWgmmaLora) of the `mods` of adapter `slot`, whose rows are `rows`
  // (runs of them), on x: each one's t (LoraTs, on all m rows, or with t_on_rows on `rows` alone),
  // its B, its columns (row_offset, B's rows), rank, scale, slot, and the rows from the adapter's
  // first to past its last; cut short after an error.
  std::vector<cuda::WgmmaLoraSegment> LoraSegments(const uint16_t* xb, int64_t k, int64_t m,
                                                   const std::vector<const LoraModule*>& mods, int32_t slot,
                                                   const RowRuns& rows, bool t_on_rows);
  // Whether a module's factors can go into a fused delta: bf16, a rank that is a multiple of 8,
  // A [rank, k] on the bf16 mma.sync forms at m rows.
  bool FusableFactor(int64_t m, int64_t k, const LoraModule& mod);
  // FusableFactor at m rows and, its t made on `runs` alone (LoraTs), at each run's rows.
  bool FusableOnRuns(int64_t m, int64_t k, const LoraModule& mod, const RowRuns& runs);
  // GdnCoreSeqs' pieces of 16 tokens and more (two or more, one head shape, the tensor-core
  // form, an eager step): one launch of the chunk kernels for them all.
  void GdnChunkPieces(const std::vector<GdnCoreArgs>& pieces);
  // AttentionSeqs' pieces of 2 to 64 rows (two or more, one shape, the tensor-core kernel, an
  // eager step): one cuda::FlashAttentionPieces launch.
  void AttentionPieces(const std::vector<AttentionArgs>& pieces);
  // Exact mode: device copies of raw host bytes (counted as exact memory) and of a residual.
  void* UploadBytes(const void* host, int64_t bytes, const char* what);
  void UploadResidual(const IndexedResidual& r);
  // Copies `bytes` of host memory into the scratch arena (through the pinned buffer). In a
  // graph capture or record the bytes are laid out instead at the arena's top (growing down,
  // stage_floor_) and, mirrored, at the pinned buffer's end: LaunchGraph copies them all at once
  // before the graph runs — one copy a step, not a memcpy node an array (~250 a Qwen3.5-27B
  // decode step, each costing about what a small kernel does).
  void* Stage(const void* host, int64_t bytes);
  // The bytes the step being (or last) captured or recorded staged.
  int64_t StagedBytes() const { return (arena_floats_ - stage_floor_) * 4; }
  // The staged bytes of the step to their device places, then the graph.
  Status LaunchGraph(void* exec);
  const int32_t* StageInts(const int32_t* host, int64_t n) {
    return static_cast<const int32_t*>(Stage(host, n * 4));
  }

  ActDtype act_;
  int device_ = 0;
  bool poison_scratch_ = false;
  std::string device_name_;
  std::shared_ptr<CudaPoolMemory> dev_;  // stream and budget
  void* stream_ = nullptr;               // dev_->stream(), a cudaStream_t
  Status error_;
  int64_t weight_bytes_ = 0;
  float* arena_ = nullptr;
  int64_t arena_floats_ = 0, top_ = 0;
  // Graph modes (both set when one opens): the arena's floats from stage_floor_ up hold the
  // step's staged arrays, and no buffer of the step ever reached above top_high_ (the staged
  // values are copied in before the graph runs: no kernel of it may write where they lie).
  // Eager steps use the whole arena whatever they hold.
  int64_t stage_floor_ = 0, top_high_ = 0;
  char* pinned_ = nullptr;
  int64_t pinned_bytes_ = 0, pinned_top_ = 0;
  std::unordered_map<const Weight*, DevCopy> weights_;
  std::unordered_map<const Weight*, cuda::DevWeight> split_;
  // Exact mode: residuals by module (uploaded with their adapter), the scratch and the Weight
  // that names it (its DevCopy in weights_ is repointed by every ExactWeight call).
  std::unordered_map<const IndexedResidual*, cuda::DevResidual> residuals_;
  uint16_t* exact_scratch_ = nullptr;
  int64_t exact_elements_ = 0, exact_bytes_ = 0;
  Weight exact_weight_;
  std::unique_ptr<OpProfile> profile_;
  std::unique_ptr<cuda::CublasGemm> cublas_;  // CudaOptions::cublas
  // Times the enclosing op when profiling (eager mode only).
  OpProfile::Scope Time(const char* name, double flops = 0) {
    return OpProfile::Scope(mode_ == Mode::kEager ? profile_.get() : nullptr, name, flops);
  }
  std::vector<void*> allocations_;  // weight copies and the arena, freed with the ops
  // Run-time adapters: a region by engine slot (ReserveAdapterSlots), the factors placed in it.
  struct AdapterRegion {
    char* base = nullptr;
    int64_t size = 0, used = 0;
    std::vector<const Weight*> factors;
  };
  std::unordered_map<int32_t, AdapterRegion> adapter_regions_;
  AdapterRegion* filling_ = nullptr;  // PlaceAdapter's region while it uploads
  // Device bytes for a weight copy: from filling_ while an adapter is placed, else a new
  // allocation inside the budget (counted as weights).
  Result<void*> WeightMemory(int64_t bytes, const std::string& what);
  // A LoRA factor on the device as the LoRA kernels read it: fp32 factors as three bf16 pieces
  // with bf16 activations (DevSplit), the rest as stored (Dev).
  void DevFactor(const Weight& f);
  // UploadStackedA for each fused projection's module list of `a` (errors noted).
  void UploadStackedA(const LoraAdapter& a);
  int64_t tensor_core_lora_rows_ = 0;
  int64_t stacked_lora_products_ = 0;
  int64_t decode_group_lora_rows_ = 0;
  Mode mode_ = Mode::kEager;
  std::string signature_;
  std::vector<HostCopy> host_copies_;
};

}  // namespace graft

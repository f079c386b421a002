// The ops interface: every computation the Qwen3 / Qwen3.5 forward passes perform.
//
// Backends: cpu/ (the reference: plain loops, fp32 accumulation, multithreaded) and, later,
// cuda/. Activation pointers live in the backend's memory space and come from its scratch
// stack (Alloc / Mark / Release), so a forward pass never touches host memory for them; index
// arrays and small tables (token ids, positions, page tables, adapter slots, RoPE frequencies)
// are host arrays the backend stages itself. Shapes are written beside each argument. Activations are float arrays; in bf16 mode (ActDtype::kBF16) every value an op
// writes is first rounded to bf16 at the points named below, exactly where transformers'
// bf16 run rounds, so the stored floats always hold bf16 values. In f32 mode nothing rounds.
//
// Numerics shared by all ops: every reduction accumulates in fp32 in a fixed order that depends
// only on the reduced length, never on how many rows an op is handed or where a row sits in
// them, so a row's bits do not depend on its neighbours (docs/design.md §3.2).
#pragma once

#include <cstdint>
#include <memory>

#include "weights/lora.h"
#include "backend/pool_memory.h"
#include "util/status.h"
#include "weights/weights.h"

namespace graft {

enum class ActDtype { kF32, kBF16 };
enum class NormKind {
  kPlainW,    // Qwen3RMSNorm:      out = r(w * r(x * rsqrt(mean(x²) + eps)))
  kOnePlusW,  // Qwen3_5RMSNorm:    out = r(x * rsqrt(mean(x²) + eps) * (1 + w))
};

// Causal GQA attention of one sequence over its paged KV cache: key position j lives in page
// page_table[j / page_size], row j % page_size of that page. The pages hold the backend's KV
// values (PoolMemory::kv_value_bytes of pool_memory(): fp32, or bf16 on a device in bf16 mode).
struct AttentionArgs {
  const float* q;          // [n, num_heads, head_dim]
  const void* k_pages;     // [num_pages, page_size, num_kv_heads, head_dim], post-RoPE
  const void* v_pages;     // [num_pages, page_size, num_kv_heads, head_dim]
  const int32_t* page_table;  // the sequence's pages, covering positions 0..pos[n-1]
  int page_size;
  const int32_t* pos;      // [n] query positions; query t attends keys 0..pos[t]
  int n, num_heads, num_kv_heads, head_dim;
  float scale;             // usually head_dim^-0.5
  float* out;              // [n, num_heads * head_dim]
};

// State of one Gated DeltaNet layer for one sequence (fp32 throughout).
// Chunk-consistent form: tokens are grouped in chunks of kGdnChunk positions counted from the
// sequence start. S is the state at the start of the current chunk; the rows of the current
// chunk seen so far are kept (k, the corrected values Vn, the cumulative log-decay gam), and S
// advances only when a chunk is complete. Prefill and token-by-token decode therefore run the
// very same arithmetic per token and agree bit for bit.
inline constexpr int kGdnChunk = 64;
// The arrays live in the backend's memory (a KvPool's state slot); this is a view of them.
struct GdnState {
  float* conv = nullptr;  // [conv_dim, K-1] the last K-1 pre-conv inputs, oldest first
  float* S = nullptr;     // [Hv, dk, dv]
  int pending = 0;        // rows of the current chunk already processed (0..63)
  float* pk = nullptr;    // [kGdnChunk, Hv, dk]  fp32 mode: L2-normalised keys; bf16 mode: raw keys (bf16 values)
  float* pvn = nullptr;   // [kGdnChunk, Hv, dv]  Vn rows
  float* pgam = nullptr;  // [kGdnChunk, Hv]      cumulative log-decay inside the chunk
  float* pkinv = nullptr; // [kGdnChunk, Hv]      bf16 mode: the keys' inverse L2 norms (unused in fp32 mode)
};

struct GdnCoreArgs {
  const float* qkv;     // [n, conv_dim] post-conv: q [Hk*dk] | k [Hk*dk] | v [Hv*dv]
  const float* beta;    // [n, Hv]
  const float* g;       // [n, Hv] log-decay (<= 0)
  int n, hk, hv, dk, dv;
  GdnState* state;
  float* out;           // [n, Hv, dv]
};

// An attention layer's input (QkvPrep): a fused projection's rows split into q, k, v — and with
// Qwen3.5's gated attention a gate — q and k normed per head and rotated.
struct QkvPrepArgs {
  const float* qkv;               // [n, qkv_w]: gated, per query head q_h | gate_h (hd each), then k [nkv * hd],
                                  // then v; ungated (gate == nullptr, Qwen3), q [nh * hd] | k | v
  int n, nh, nkv, hd, rot_dim;
  const Weight* q_norm;           // [hd]
  const Weight* k_norm;           // [hd]
  NormKind norm_kind;             // Qwen3: plain w; Qwen3.5: one-plus-w
  float eps;
  const int32_t* pos;             // [n] host positions
  const float* inv_freq;          // [rot_dim / 2] host
  float attn_scale;
  float *q, *gate;                // [n, nh * hd]; gate nullptr: the ungated layout
  float *k, *v;                   // [n, nkv * hd]
};

// The ops of a Gated DeltaNet layer between its conv and its out projection (GdnGatedCoreSeqs):
// the gates from the in-projection's rows, the delta rule of each sequence, the gated norm.
struct GdnGatedArgs {
  const float* in;                // [n, stride] the in-projection's rows: b, a at b_col, a_col; z at z_col
  int64_t stride, b_col, a_col, z_col;
  int n, hv, dv;                  // rows in all (every sequence's), value heads, value head width
  const Weight* a_log;            // [hv]
  const Weight* dt_bias;          // [hv]
  const Weight* norm;             // [dv] the gated norm's weight
  float eps;
  float* beta;                    // [n, hv]
  float* g;                       // [n, hv]
  float* core;                    // [n, hv, dv] the delta rule's output
  float* normed;                  // [n, hv * dv]
  uint16_t* normed_bf16 = nullptr;  // null, or normed's twin (Ops::Twins)
};

// LoRA deltas for the rows that select an adapter (see weights/lora.h for the arithmetic).
// Rows whose slot is 0, or whose adapter has no module on this projection, are not touched.
struct LoraArgs {
  const float* x;            // [m, k] the projection's input
  int64_t m, k;
  const int32_t* row_slot;   // [m] adapter slot per row, 0 = base
  // By slot: the modules of that adapter on this fused projection (nullptr or empty: none).
  const std::vector<const std::vector<LoraModule>*>* modules;
  float* y;                  // [m, y_stride] the base matmul's output, updated in place
  int64_t y_stride;
  const uint16_t* xb = nullptr;  // null, or x's twin (Ops::Twins)
};

class Ops {
 public:
  virtual ~Ops() = default;
  virtual ActDtype act_dtype() const = 0;
  // Where KV pages and recurrent states must live for this backend (nullptr: host memory).
  virtual std::shared_ptr<PoolMemory> pool_memory() { return nullptr; }
  // The first error an op met since the last call, then ok again. Ops cannot fail on the
  // CPU; a device backend can (a launch, an exhausted scratch arena), and then skips the rest
  // of the step's work: Model::Forward reports it.
  virtual Status TakeError() { return Status::Ok(); }
  // Waits until every op issued so far has run (a device backend runs them asynchronously; for
  // timing a phase of work). The CPU's ops are done when they return.
  virtual void Synchronize() {}

  // Scratch memory in the backend's space, as a stack: Alloc(n) hands out n floats that stay
  // valid until Release(m) with a mark taken before them. Their contents are unspecified: every
  // op writes its outputs whole, so nothing needs them cleared (on a device, clearing was a
  // memset in the step's graph for every buffer, ~500 a Qwen3.5-27B decode step). The CPU fills
  // them with NaN, and the CUDA tests ask for the same, so a read before a write shows. A forward pass takes a
  // Mark() on entry and releases it on exit (model/blocks.h: Scratch).
  virtual float* Alloc(int64_t n) = 0;
  virtual size_t Mark() const = 0;
  virtual void Release(size_t mark) = 0;
  // Copies n floats of backend memory to host memory (after the work that writes them).
  virtual void ToHost(const float* src, int64_t n, float* host_dst) = 0;

  // out[t] = table[ids[t]]. ids are checked by the caller. out: [n, table.cols]
  virtual void Embed(const Weight& table, const int32_t* ids, int n, float* out) = 0;
  // Bf16 twins. In bf16 mode every activation is a bf16 value, and a backend whose tensor-core
  // products read their input as bf16 would convert x before every product. A twin is x's values
  // as bf16 [rows, dim], written by the op that writes x (a norm, given out_bf16) and handed to the
  // products that read x (xb): each then reads it as it is. Twins(): whether this backend reads
  // twins — the model asks for them only then (nothing computed depends on whether it does).
  virtual bool Twins() const { return false; }
  // Per-row RMSNorm over `dim` (rows of x and out contiguous). out may alias x. out_bf16: null,
  // or where out's values also go as bf16 (its twin).
  virtual void RmsNorm(const float* x, const Weight& w, int64_t rows, int dim, float eps, NormKind kind, float* out,
                       uint16_t* out_bf16 = nullptr) = 0;
  // The residual step between sublayers: h = r(h + y) over rows x dim, then out = RmsNorm(h)
  // (out_bf16 as there). The same bits as Add then RmsNorm, which is what this default does; a
  // backend may fuse them (one launch instead of two, twice a layer).
  virtual void AddRmsNorm(float* h, const float* y, const Weight& w, int64_t rows, int dim, float eps, NormKind kind,
                          float* out, uint16_t* out_bf16 = nullptr) {
    Add(h, y, rows * dim);
    RmsNorm(h, w, rows, dim, eps, kind, out, out_bf16);
  }
  // y[m, N] = x[m, K] · Wᵀ with W [N, K]; fp32 accumulation; rounds once at the end when
  // round_output (logits are kept in fp32: pass false). xb: null, or x's twin.
  virtual void MatMul(const float* x, int64_t m, const Weight& w, float* y, bool round_output,
                      const uint16_t* xb = nullptr) = 0;
  // Sampling candidates: for each row r of x [rows, vocab], y = x / temperature[r] (fp32
  // division; y = x where temperature[r] == 0) and its k best entries in descending order of y,
  // ascending id on ties (a total order: the choice never depends on the backend). Writes host
  // arrays values [rows, k] (the y) and ids [rows, k]; temperature is a host array [rows].
  // k <= min(vocab, kMaxTopK). The engine samples from these instead of copying whole rows.
  static constexpr int kMaxTopK = 64;
  virtual void TopK(const float* x, int64_t rows, int vocab, const float* temperature, int k, float* values,
                    int32_t* ids) = 0;
  // y += LoRA deltas, per row by its adapter (LoraArgs).
  virtual void LoraAdd(const LoraArgs& a) = 0;
  // A projection and its LoRA deltas: MatMul(x, m, w, y, round_output = true), then LoraAdd(lora)
  // (lora.x == x, lora.m == m, lora.y == y) — the two ops, which a backend may fuse with the
  // same bits (CUDA: the deltas in the product's epilogue where every row is on one adapter).
  virtual void MatMulLora(const float* x, int64_t m, const Weight& w, float* y, const LoraArgs& lora) {
    MatMul(x, m, w, y, true, lora.x == x ? lora.xb : nullptr);
    LoraAdd(lora);
  }
  // Exact mode: the fused bf16 weight `base` with the rows of every module in `modules`
  // (one fused slot of one adapter, each carrying its residual) replaced by the merged
  // release's rows, reconstructed as weights/exact.h defines bit for bit — so it equals the
  // merged checkpoint's weight at this slot. Written into the backend's exact scratch and
  // valid until the next call; pass it to MatMul, which then runs the very kernel the merged
  // checkpoint would run.
  virtual const Weight& ExactWeight(const Weight& base, const std::vector<LoraModule>& modules) = 0;
  // Reserves that scratch for fused weights of up to `elements` bf16 values (start-up; the
  // CPU also grows it on demand, a device backend refuses larger ones).
  virtual Status ReserveExact(int64_t elements) = 0;
  // Run-time adapters (graft serve --allow-runtime-adapters). A backend whose weights live in
  // its own memory reserves a region of `bytes_each` for each adapter slot in `slots` at
  // start-up; PlaceAdapter puts an adapter's LoRA factors into its slot's region (no allocation:
  // kResourceExhausted when they do not fit), ForgetAdapter drops them so the region takes the
  // next adapter. Called between steps, on the ops' thread. FactorBytes: what `elements` values
  // of a factor (bf16 or not) take in this backend's memory. The CPU reads the host's factors
  // where they are: none of it is needed there.
  virtual Status ReserveAdapterSlots(const std::vector<int32_t>& slots, int64_t bytes_each) {
    (void)slots, (void)bytes_each;
    return Status::Ok();
  }
  virtual Status PlaceAdapter(const LoraAdapter& a, int32_t slot) {
    (void)a, (void)slot;
    return Status::Ok();
  }
  virtual void ForgetAdapter(int32_t slot) { (void)slot; }
  virtual int64_t FactorBytes(int64_t elements, bool is_bf16) const {
    (void)elements, (void)is_bf16;
    return 0;
  }
  // Strided 2-D copy: dst[r, dst_col + c] = src[r, src_col + c], c < cols.
  virtual void CopyBlock(const float* src, int64_t src_stride, int64_t src_col, float* dst, int64_t dst_stride,
                         int64_t dst_col, int64_t rows, int64_t cols) = 0;
  // CopyBlock of `count` blocks, block b from column src_col + b * src_step to column
  // dst_col + b * dst_step (every head's q and gate halves of a fused projection at once). The
  // same as CopyBlock on each block in turn, which is what this default does; a backend may do
  // it in one launch.
  virtual void CopyBlocks(const float* src, int64_t src_stride, int64_t src_col, int64_t src_step, float* dst,
                          int64_t dst_stride, int64_t dst_col, int64_t dst_step, int64_t rows, int64_t cols,
                          int count) {
    for (int b = 0; b < count; ++b) {
      CopyBlock(src, src_stride, src_col + b * src_step, dst, dst_stride, dst_col + b * dst_step, rows, cols);
    }
  }
  // Scatter: dst[rows[t] * width + c] = src[t * width + c] for t < n, c < width (rows: host
  // array, distinct). Writes a step's K/V rows into the paged cache: the destinations are data,
  // not parameters, so a captured decode step stays valid as its sequences grow.
  virtual void ScatterRows(const float* src, int64_t width, const int32_t* rows, int n, float* dst) = 0;
  // ScatterRows into KV pages, which hold the backend's KV values (AttentionArgs): the same
  // values, stored in that width (fp32 pages: ScatterRows itself, this default).
  virtual void ScatterKv(const float* src, int64_t width, const int32_t* rows, int n, void* pages) {
    ScatterRows(src, width, rows, n, static_cast<float*>(pages));
  }
  // NeoX RoPE, in place, on the first rot_dim dims of each head of x [n, heads, head_dim]:
  // angle = float(pos) * inv_freq[i] (inv_freq [rot_dim/2]); c = r(cos(angle) * attn_scale),
  // s = r(sin(angle) * attn_scale); y[i] = r(r(x[i]c) + r(-x[i+R/2]s)), y[i+R/2] = r(r(x[i+R/2]c) + r(x[i]s)).
  virtual void Rope(float* x, int n, int heads, int head_dim, int rot_dim, const int32_t* pos, const float* inv_freq,
                    float attn_scale) = 0;
  // Scores r(r(q·k) * scale), softmax in fp32, probabilities rounded, out = r(Σ p v).
  virtual void Attention(const AttentionArgs& a) = 0;
  // Attention for several sequences (a batch's, each on its own pages): the same results as
  // Attention on each in turn, which is what this default does; a backend may run them in one
  // launch (a decode step's one row per sequence).
  virtual void AttentionSeqs(const AttentionArgs* seqs, int count) {
    for (int i = 0; i < count; ++i) Attention(seqs[i]);
  }
  // out[t, i] = r(r(silu(gu[t, i])) * gu[t, I + i]), gu: [n, 2I], out: [n, I]; out_bf16: null or
  // out's twin.
  virtual void SiluMul(const float* gu, int64_t n, int64_t inter, float* out, uint16_t* out_bf16 = nullptr) = 0;
  // The SwiGLU MLP of n rows x [n, gate_up.cols]: out [n, down.rows] = down · SiluMul(gate_up · x),
  // both products rounded — MatMul, SiluMul, MatMul, which is what this default does. A backend
  // may fuse them (CUDA past the decode form's rows in bf16: the activation never leaves the GEMM as fp32; the
  // same bits). Rows that need a LoRA delta or an exact weight on either projection take the ops
  // one at a time instead (model/blocks.cpp).
  // xb: null, or x's twin (for the gate_up product).
  virtual void SwiGluMlp(const float* x, int64_t n, const Weight& gate_up, const Weight& down, float* out,
                         const uint16_t* xb = nullptr) {
    ThreeOpMlp(x, n, gate_up, down, out, nullptr, nullptr, nullptr, xb);  // no module
  }
  // The SwiGLU MLP where rows take LoRA deltas: MatMulLora on gate_up (into the op's own gate|up
  // buffer), SiluMul, MatMulLora on down — what this default does. row_slot [n]: each row's
  // adapter slot (0 = base; may be null when both module lists are); gate_up_modules / down_modules:
  // by slot, that adapter's modules on the projection (LoraArgs::modules; nullptr: no row has one
  // there, and the plain product runs).
  // Rows on an exact slot take no part (model/blocks.cpp runs those an op at a time). A backend
  // may fuse (CUDA past the decode form's rows in bf16, one adapter's rows beside base rows: the gate and up
  // deltas and the activation in the product's epilogue); the same bits.
  // xb: null, or x's twin.
  virtual void SwiGluMlpLora(const float* x, int64_t n, const Weight& gate_up, const Weight& down, float* out,
                             const int32_t* row_slot, const std::vector<const std::vector<LoraModule>*>* gate_up_modules,
                             const std::vector<const std::vector<LoraModule>*>* down_modules,
                             const uint16_t* xb = nullptr) {
    ThreeOpMlp(x, n, gate_up, down, out, row_slot, gate_up_modules, down_modules, xb);
  }
  // x = r(x + y), [n]
  virtual void Add(float* x, const float* y, int64_t n) = 0;
  // x[r, c] = r(x[r, c] * r(sigmoid(gate[r, gate_col + c]))), x: [rows, cols], gate rows of gate_stride;
  // x_bf16: null or the result's twin.
  virtual void SigmoidGateMul(float* x, const float* gate, int64_t gate_stride, int64_t rows, int64_t cols,
                              uint16_t* x_bf16 = nullptr) = 0;
  // Depthwise causal conv (kernel K = w.cols) + SiLU over x's first `channels` columns.
  // x rows have stride x_stride. Uses and updates conv_state [channels, K-1].
  // out [n, channels] = r(silu(r(Σ_j w[c, j] · X(t-(K-1)+j)))).
  virtual void CausalConvSilu(const float* x, int64_t x_stride, int n, int channels, const Weight& w,
                              float* conv_state, float* out) = 0;
  // CausalConvSilu for several sequences (a batch's, in order): sequence i's rows are
  // [seq_start[i], seq_start[i + 1]) of x and out, its state conv_states[i]. The same results as
  // CausalConvSilu on each in turn, which is what this default does; a backend may run them in
  // one launch.
  virtual void CausalConvSiluSeqs(const float* x, int64_t x_stride, const int* seq_start, int count, int channels,
                                  const Weight& w, float* const* conv_states, float* out) {
    for (int i = 0; i < count; ++i) {
      CausalConvSilu(x + int64_t{seq_start[i]} * x_stride, x_stride, seq_start[i + 1] - seq_start[i], channels, w,
                     conv_states[i], out + int64_t{seq_start[i]} * channels);
    }
  }
  // beta = r(sigmoid(b)), g = -exp(A_log) * softplus(a + dt_bias) in fp32.
  // b, a: columns of rows with stride `stride`: b at b_col, a at a_col; beta, g: [n, hv]
  virtual void GdnGates(const float* in, int64_t stride, int64_t b_col, int64_t a_col, int n, int hv,
                        const Weight& a_log, const Weight& dt_bias, float* beta, float* g) = 0;
  // The delta rule (chunk-consistent, see GdnState). q, k are L2-normalised in fp32
  // (eps 1e-6 inside the rsqrt), q scaled by dk^-0.5; out rounded to the activation dtype. In
  // bf16 mode the norms are applied as factors after the dots over q and k's bf16 values (the
  // tensor-core form, backend/cuda/gdn.h; the CPU reference: cpu_gdn.cpp's GdnCoreRaw).
  virtual void GdnCore(const GdnCoreArgs& a) = 0;
  // GdnCore for several sequences (a batch's, each on its own state, in order): the same results
  // as GdnCore on each in turn, which is what this default does; a backend may run them in one
  // launch (a decode step's one row per sequence).
  virtual void GdnCoreSeqs(const GdnCoreArgs* seqs, int count) {
    for (int i = 0; i < count; ++i) GdnCore(seqs[i]);
  }
  // Per (row, head): n = r(w * r(x * rsqrt(mean(x²) + eps))), out = r(n * silu(z)).
  // x: [rows, dv]; z columns at z_col of rows with stride z_stride per token (rows = n * hv).
  // out_bf16: null, or out's twin.
  virtual void GatedRmsNorm(const float* x, const float* z, int64_t z_stride, int64_t z_col, int n, int hv, int dv,
                            const Weight& w, float eps, float* out, uint16_t* out_bf16 = nullptr) = 0;
  // Splits a.qkv into q and gate (CopyBlocks; ungated: q by CopyBlock), k and v (CopyBlock); q
  // and k through RmsNorm per head (q_norm, k_norm; a.norm_kind) and Rope — in that order, which
  // is what this default does. A backend may run it as one kernel (CUDA: one launch where there
  // were eight, or seven ungated).
  virtual void QkvPrep(const QkvPrepArgs& a) {
    const int64_t q_w = int64_t{a.nh} * a.hd, kv_w = int64_t{a.nkv} * a.hd;
    const int64_t q_span = a.gate != nullptr ? 2 * q_w : q_w, qkv_w = q_span + 2 * kv_w;
    if (a.gate != nullptr) {
      CopyBlocks(a.qkv, qkv_w, 0, 2 * a.hd, a.q, q_w, 0, a.hd, a.n, a.hd, a.nh);
      CopyBlocks(a.qkv, qkv_w, a.hd, 2 * a.hd, a.gate, q_w, 0, a.hd, a.n, a.hd, a.nh);
    } else {
      CopyBlock(a.qkv, qkv_w, 0, a.q, q_w, 0, a.n, q_w);
    }
    CopyBlock(a.qkv, qkv_w, q_span, a.k, kv_w, 0, a.n, kv_w);
    CopyBlock(a.qkv, qkv_w, q_span + kv_w, a.v, kv_w, 0, a.n, kv_w);
    RmsNorm(a.q, *a.q_norm, int64_t{a.n} * a.nh, a.hd, a.eps, a.norm_kind, a.q);
    RmsNorm(a.k, *a.k_norm, int64_t{a.n} * a.nkv, a.hd, a.eps, a.norm_kind, a.k);
    Rope(a.q, a.n, a.nh, a.hd, a.rot_dim, a.pos, a.inv_freq, a.attn_scale);
    Rope(a.k, a.n, a.nkv, a.hd, a.rot_dim, a.pos, a.inv_freq, a.attn_scale);
  }
  // GdnGates over the n rows of l.in into l.beta, l.g; GdnCoreSeqs(seqs, count), whose beta, g and
  // out are those rows' (sequence i's rows of l.beta, l.g, l.core); GatedRmsNorm of l.core with z
  // from l.in into l.normed — in that order, which is what this default does. A backend may run
  // them as one kernel: every output is still each op's own (CUDA: one launch for a decode step,
  // where there were three).
  virtual void GdnGatedCoreSeqs(const GdnCoreArgs* seqs, int count, const GdnGatedArgs& l) {
    GdnGates(l.in, l.stride, l.b_col, l.a_col, l.n, l.hv, *l.a_log, *l.dt_bias, l.beta, l.g);
    GdnCoreSeqs(seqs, count);
    GatedRmsNorm(l.core, l.in, l.stride, l.z_col, l.n, l.hv, l.dv, *l.norm, l.eps, l.normed, l.normed_bf16);
  }

 protected:
  // SwiGluMlpLora's three ops (SwiGluMlp's with no module), gate_up reading xb when given.
  void ThreeOpMlp(const float* x, int64_t n, const Weight& gate_up, const Weight& down, float* out,
                  const int32_t* row_slot, const std::vector<const std::vector<LoraModule>*>* gate_up_modules,
                  const std::vector<const std::vector<LoraModule>*>* down_modules, const uint16_t* xb) {
    const size_t mark = Mark();
    const int64_t inter = down.cols;
    float* gu = Alloc(n * 2 * inter);
    float* act = Alloc(n * inter);
    uint16_t* act_b = Twins() ? reinterpret_cast<uint16_t*>(Alloc((n * inter + 1) / 2)) : nullptr;  // act's twin
    if (gate_up_modules) {
      MatMulLora(x, n, gate_up, gu, LoraArgs{x, n, gate_up.cols, row_slot, gate_up_modules, gu, gate_up.rows, xb});
    } else {
      MatMul(x, n, gate_up, gu, true, xb);
    }
    SiluMul(gu, n, inter, act, act_b);
    if (down_modules) {
      MatMulLora(act, n, down, out, LoraArgs{act, n, inter, row_slot, down_modules, out, down.rows, act_b});
    } else {
      MatMul(act, n, down, out, true, act_b);
    }
    Release(mark);
  }
};

// Scratch memory in the backend's space (Ops::Alloc) for one scope — a forward pass, an op that
// allocates: everything taken after it was made (through it or the backend's own allocations) is
// given back when it goes out of scope, whichever way out.
class Scratch {
 public:
  explicit Scratch(Ops& ops) : ops_(ops), mark_(ops.Mark()) {}
  ~Scratch() { ops_.Release(mark_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  float* operator()(int64_t n) { return ops_.Alloc(n); }
  // Room for n bf16 values (a twin), or null where the backend reads no twins (Ops::Twins).
  uint16_t* Twin(int64_t n) { return ops_.Twins() ? reinterpret_cast<uint16_t*>(ops_.Alloc((n + 1) / 2)) : nullptr; }

 private:
  Ops& ops_;
  size_t mark_;
};

}  // namespace graft

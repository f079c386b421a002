// CudaOps: set-up and the ops. Its other jobs: cuda_ops_memory.cpp (pools, scratch, staging),
// cuda_ops_weights.cpp (device weights, uploads, exact mode), cuda_ops_graphs.cpp (CUDA graphs),
// cuda_ops_lora.cpp (LoRA deltas, alone and fused into the projection).
#include "backend/cuda/cuda_ops.h"

#include <cuda_runtime_api.h>
#include <fmt/core.h>

#include <algorithm>

#include "backend/cuda/attention.h"
#include "backend/cuda/attention_prep.h"
#include "backend/cuda/cublas_gemm.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/gdn.h"
#include "backend/cuda/gemm_decode_w4.h"
#include "backend/cuda/gemm_pipe.h"
#include "backend/cuda/matmul.h"
#include "backend/cuda/mlp.h"
#include "backend/cuda/rmsnorm.h"
#include "backend/cuda/topk.h"
#include "util/bf16.h"
#include "backend/cuda/cuda_ops_detail.h"

namespace graft {

using namespace cuda_ops_detail;

// ---- CudaOps: set-up ----------------------------------------------------------------------

CudaOps::CudaOps(const CudaOptions& o) : act_(o.act), device_(o.device), poison_scratch_(o.poison_scratch) {}

Result<std::unique_ptr<CudaOps>> CudaOps::Create(const CudaOptions& o) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return Unavailable("--device cuda: no CUDA device is visible (cudaGetDeviceCount found none)");
  }
  if (o.device < 0 || o.device >= count) {
    return InvalidArgument(fmt::format("CUDA device {} does not exist ({} visible)", o.device, count));
  }
  GRAFT_CUDA_CHECK(cudaSetDevice(o.device));
  cudaDeviceProp prop{};
  GRAFT_CUDA_CHECK(cudaGetDeviceProperties(&prop, o.device));
  if (prop.major < 9) {
    return Unsupported(fmt::format("CUDA device {} ({}) is sm_{}{}; graft's kernels are built for sm_90a (Hopper)",
                                   o.device, prop.name, prop.major, prop.minor));
  }
  size_t free_b = 0, total_b = 0;
  GRAFT_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  int64_t budget = o.budget_bytes > 0 ? o.budget_bytes : static_cast<int64_t>(0.9 * static_cast<double>(free_b));
  if (budget > static_cast<int64_t>(free_b)) {
    return ResourceExhausted(fmt::format("--gpu-memory asks for {} but device {} has only {} free", Mb(budget),
                                         o.device, Mb(static_cast<int64_t>(free_b))));
  }
  std::unique_ptr<CudaOps> ops(new CudaOps(o));
  ops->device_name_ = prop.name;
  cudaStream_t stream = nullptr;
  GRAFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  ops->dev_ = std::make_shared<CudaPoolMemory>(stream, budget, ops->bf16() ? 2 : 4);
  ops->stream_ = stream;
  GRAFT_ASSIGN_OR_RETURN(void* arena, ops->dev_->AllocateBytes(o.scratch_bytes, "the scratch arena"));
  ops->allocations_.push_back(arena);
  ops->arena_ = static_cast<float*>(arena);
  ops->arena_floats_ = o.scratch_bytes / 4;
  void* pinned = nullptr;
  GRAFT_CUDA_CHECK(cudaMallocHost(&pinned, static_cast<size_t>(o.pinned_bytes)));
  ops->pinned_ = static_cast<char*>(pinned);
  ops->pinned_bytes_ = o.pinned_bytes;
  if (o.cublas) {
    constexpr int64_t kWorkspace = int64_t{32} << 20;
    GRAFT_ASSIGN_OR_RETURN(void* workspace, ops->dev_->AllocateBytes(kWorkspace, "the cuBLAS workspace"));
    ops->allocations_.push_back(workspace);
    GRAFT_ASSIGN_OR_RETURN(ops->cublas_, cuda::CublasGemm::Create(stream, workspace, kWorkspace));
  }
  if (o.op_profile) {
    ops->profile_ = std::make_unique<OpProfile>([stream] { cudaStreamSynchronize(stream); });
  }
  return ops;
}

CudaOps::~CudaOps() {
  if (stream_) cudaStreamSynchronize(S(stream_));
  cublas_.reset();  // before its workspace goes
  for (void* p : allocations_) dev_->FreeBytes(p);
  if (pinned_) cudaFreeHost(pinned_);
}

void CudaOps::Synchronize() {
  Note(CudaStatus(cudaStreamSynchronize(S(stream_)), "cudaStreamSynchronize", __FILE__, __LINE__));
}

CudaMemoryUse CudaOps::memory() const {
  CudaMemoryUse m;
  m.budget = dev_->budget();
  m.weights = weight_bytes_;
  m.scratch = arena_floats_ * 4;
  m.pinned = pinned_bytes_;
  m.pools = dev_->pool_bytes();
  m.exact = exact_bytes_;
  return m;
}

void CudaOps::Note(const Status& s) {
  if (error_.ok() && !s.ok()) error_ = s;
}

Status CudaOps::TakeError() {
  if (error_.ok()) Note(CudaStatus(cudaGetLastError(), "kernel launch", __FILE__, __LINE__));
  Status e = error_;
  error_ = Status::Ok();
  return e;
}

// ---- ops ----------------------------------------------------------------------------------

void CudaOps::Embed(const Weight& table, const int32_t* ids, int n, float* out) {
  const auto timer = Time("Embed");
  const DevCopy* t = Dev(table);
  const int32_t* d_ids = StageInts(ids, n);
  if (Failed()) return;
  Sign(1, t->w.data, d_ids, n, out);
  if (!Launches()) return;
  Note(cuda::Embed(t->w, d_ids, n, bf16(), out, stream_));
}

void CudaOps::RmsNorm(const float* x, const Weight& w, int64_t rows, int dim, float eps, NormKind kind, float* out,
                      uint16_t* out_bf16) {
  const auto timer = Time("RmsNorm");
  const float* dw = DevF32(w);
  if (Failed()) return;
  Sign(2, x, dw, rows, dim, eps, kind, out, out_bf16);
  if (!Launches()) return;
  Note(cuda::RmsNorm(x, dw, rows, dim, eps, kind == NormKind::kPlainW ? cuda::NormKind::kPlainW : cuda::NormKind::kOnePlusW,
                     bf16(), out, stream_, out_bf16));
}

void CudaOps::AddRmsNorm(float* h, const float* y, const Weight& w, int64_t rows, int dim, float eps, NormKind kind,
                         float* out, uint16_t* out_bf16) {
  const auto timer = Time("AddRmsNorm");
  const float* dw = DevF32(w);
  if (Failed()) return;
  Sign(33, h, y, dw, rows, dim, eps, kind, out, out_bf16);
  if (!Launches()) return;
  Note(cuda::AddRmsNorm(h, y, dw, rows, dim, eps,
                        kind == NormKind::kPlainW ? cuda::NormKind::kPlainW : cuda::NormKind::kOnePlusW, bf16(), out,
                        stream_, out_bf16));
}

void CudaOps::MatMul(const float* x, int64_t m, const Weight& w, float* y, bool round_output, const uint16_t* xb) {
  const auto timer = Time(m > cuda::kDecodeFormRows ? "MatMul (prefill form)" : "MatMul (decode form)", 2.0 * static_cast<double>(m) * w.rows * w.cols);
  if (w.parts.empty()) {
    MatMulColumns(x, m, w, y, w.rows, round_output, xb);
    return;
  }
  if (MatMulW4WithTail(x, m, w, y, round_output)) return;
  int64_t col = 0;  // each tensor of a mixed-storage fused weight fills its own columns of y
  for (const Weight& p : w.parts) {
    MatMulColumns(x, m, p, y + col, w.rows, round_output, xb);
    col += p.rows;
  }
}

bool CudaOps::MatMulW4WithTail(const float* x, int64_t m, const Weight& w, float* y, bool round_output) {
  // cuBLAS (CudaOptions::cublas) takes dense bf16 weights with its own order: not fused then.
  if (!bf16() || cublas_ || w.parts.size() != 2 || reinterpret_cast<uintptr_t>(x) % 16 != 0) return false;
  const DevCopy* a = Dev(w.parts[0]);
  const DevCopy* b = Dev(w.parts[1]);
  if (Failed() || !cuda::DecodeW4a16TailFits(m, a->w, b->w)) return false;
  const size_t mark = Mark();
  const int64_t bytes = cuda::DecodeW4a16ScratchBytes(m, a->w, &b->w);
  void* scratch = bytes > 0 ? AllocRaw((bytes + 3) / 4) : nullptr;
  Sign(34, x, m, a->w.data, b->w.data, y, w.rows, round_output);
  if (!Failed() && Launches()) {
    Note(cuda::GemmDecodeW4a16(x, m, a->w, y, w.rows, round_output, stream_, scratch, &b->w));
  }
  Release(mark);
  return true;
}

void CudaOps::MatMulColumns(const float* x, int64_t m, const Weight& w, float* y, int64_t ldy, bool round_output,
                            const uint16_t* xb) {
  const DevCopy* d = Dev(w);
  if (Failed() || m == 0) return;
  if (d->w.fp8()) {
    const size_t mark = Mark();
    float* scratch = Alloc(cuda::Fp8ScratchFloats(m, d->w));
    if (Failed()) return;
    Sign(31, x, m, d->w.data, scratch, y, ldy, round_output);
    if (Launches()) Note(cuda::MatMulFp8(x, m, d->w, scratch, y, ldy, round_output, bf16(), stream_));
    Release(mark);
    return;
  }
  Sign(3, x, m, d->w.data, y, ldy, round_output, xb);
  DevMatMul(x, m, d->w, y, ldy, round_output, xb);
}

const uint16_t* CudaOps::Bf16Of(const float* x, int64_t n, const uint16_t* twin) {
  if (const uint16_t* usable = cuda::UsableTwin(twin)) return usable;
  auto* copy = reinterpret_cast<uint16_t*>(AllocRaw((n + 1) / 2));
  if (Failed()) return nullptr;
  Sign(44, x, n, copy);
  if (Launches()) Note(cuda::ToBf16(x, n, copy, stream_));
  return copy;
}

void CudaOps::DevMatMul(const float* x, int64_t m, const cuda::DevWeight& w, float* y, int64_t ldy, bool round_output,
                        const uint16_t* twin) {
  const size_t mark = Mark();
  if (cublas_ && bf16() && w.bf16 && !w.quantized() && w.cols % 8 == 0) {
    const uint16_t* xb = Bf16Of(x, m * w.cols, twin);
    if (!Failed() && Launches()) {
      Note(cublas_->Gemm(xb, m, static_cast<const uint16_t*>(w.data), w.rows, w.cols, y, ldy));
      if (round_output) Note(cuda::RoundBlockBf16(y, ldy, m, w.rows, stream_));
    }
    Release(mark);
    return;
  }
  const int64_t bytes = cuda::MatMulScratchBytes(m, w, bf16());
  void* scratch = bytes > 0 ? AllocRaw((bytes + 3) / 4) : nullptr;
  if (!Failed() && Launches()) Note(cuda::MatMul(x, m, w, y, ldy, round_output, bf16(), stream_, scratch, twin));
  Release(mark);
}

void CudaOps::TopK(const float* x, int64_t rows, int vocab, const float* temperature, int k, float* values,
                   int32_t* ids) {
  const auto timer = Time("TopK");
  if (Failed() || rows == 0) return;
  const float* d_temp = static_cast<const float*>(Stage(temperature, rows * 4));
  float* d_vals = Alloc(rows * k);
  auto* d_ids = reinterpret_cast<int32_t*>(Alloc(rows * k));
  if (Failed()) return;
  Sign(16, x, rows, vocab, d_temp, k, d_vals, d_ids);
  if (Launches()) Note(cuda::TopK(x, rows, vocab, d_temp, k, d_vals, d_ids, stream_));
  CopyOut(d_vals, rows * k * 4, values);
  CopyOut(d_ids, rows * k * 4, ids);
}

void CudaOps::CopyBlock(const float* src, int64_t src_stride, int64_t src_col, float* dst, int64_t dst_stride,
                        int64_t dst_col, int64_t rows, int64_t cols) {
  const auto timer = Time("CopyBlock");
  if (Failed()) return;
  Sign(5, src, src_stride, src_col, dst, dst_stride, dst_col, rows, cols);
  if (!Launches()) return;
  Note(cuda::CopyBlock(src, src_stride, src_col, dst, dst_stride, dst_col, rows, cols, stream_));
}

void CudaOps::CopyBlocks(const float* src, int64_t src_stride, int64_t src_col, int64_t src_step, float* dst,
                         int64_t dst_stride, int64_t dst_col, int64_t dst_step, int64_t rows, int64_t cols,
                         int count) {
  const auto timer = Time("CopyBlocks");
  if (Failed()) return;
  Sign(32, src, src_stride, src_col, src_step, dst, dst_stride, dst_col, dst_step, rows, cols, count);
  if (!Launches()) return;
  Note(cuda::CopyBlocks(src, src_stride, src_col, src_step, dst, dst_stride, dst_col, dst_step, rows, cols, count,
                        stream_));
}

void CudaOps::ScatterRows(const float* src, int64_t width, const int32_t* rows, int n, float* dst) {
  const auto timer = Time("ScatterRows");
  const int32_t* d_rows = StageInts(rows, n);
  if (Failed() || n == 0) return;
  Sign(15, src, width, d_rows, n, dst);
  if (!Launches()) return;
  Note(cuda::ScatterRows(src, width, d_rows, n, dst, stream_));
}

void CudaOps::ScatterKv(const float* src, int64_t width, const int32_t* rows, int n, void* pages) {
  if (!bf16()) return ScatterRows(src, width, rows, n, static_cast<float*>(pages));
  const auto timer = Time("ScatterRows");
  const int32_t* d_rows = StageInts(rows, n);
  if (Failed() || n == 0) return;
  Sign(35, src, width, d_rows, n, pages);
  if (!Launches()) return;
  Note(cuda::ScatterRowsBf16(src, width, d_rows, n, pages, stream_));
}

void CudaOps::Rope(float* x, int n, int heads, int head_dim, int rot_dim, const int32_t* pos, const float* inv_freq,
                   float attn_scale) {
  const auto timer = Time("Rope");
  const int32_t* d_pos = StageInts(pos, n);
  const float* d_freq = static_cast<const float*>(Stage(inv_freq, int64_t{rot_dim / 2} * 4));
  if (Failed()) return;
  Sign(6, x, n, heads, head_dim, rot_dim, d_pos, d_freq, attn_scale);
  if (!Launches()) return;
  Note(cuda::Rope(x, n, heads, head_dim, rot_dim, d_pos, d_freq, attn_scale, bf16(), stream_));
}

// The device arguments of an attention call's shape and operands (its q, cache and out pointers
// are device pointers already); the page table and positions are staged by the caller.
static cuda::AttentionArgs DeviceAttentionArgs(const AttentionArgs& a, bool bf16) {
  cuda::AttentionArgs d{};
  d.q = a.q;
  d.k_pages = a.k_pages;
  d.v_pages = a.v_pages;
  d.page_size = a.page_size;
  d.n = a.n;
  d.num_heads = a.num_heads;
  d.num_kv_heads = a.num_kv_heads;
  d.head_dim = a.head_dim;
  d.scale = a.scale;
  d.bf16 = bf16;
  d.out = a.out;
  return d;
}

void CudaOps::Attention(const AttentionArgs& a) {
  // FLOPs of causal attention over the cache: q·k and p·v for every query and key before it.
  double keys = 0;
  for (int t = 0; t < a.n; ++t) keys += static_cast<double>(a.pos[t]) + 1;
  const auto timer = Time("Attention", 4.0 * keys * a.num_heads * a.head_dim);
  if (Failed() || a.n == 0) return;
  const int pages = a.pos[a.n - 1] / a.page_size + 1;
  cuda::AttentionArgs d = DeviceAttentionArgs(a, bf16());
  d.kv_rows = int64_t{*std::max_element(a.page_table, a.page_table + pages) + 1} * a.page_size;  // the pages this call reads
  if (mode_ == Mode::kEager) {
    d.page_table = StageInts(a.page_table, pages);
  } else {
    std::vector<int32_t> padded(static_cast<size_t>(PageTableCapacity(pages)), 0);
    std::copy(a.page_table, a.page_table + pages, padded.begin());
    d.page_table = StageInts(padded.data(), static_cast<int64_t>(padded.size()));
  }
  d.pos = StageInts(a.pos, a.n);
  if (Failed()) return;
  Sign(7, d.kv_rows, d.q, d.k_pages, d.v_pages, d.page_table, d.page_size, d.pos, d.n, d.num_heads, d.num_kv_heads, d.head_dim,
       d.scale, d.out);
  if (!Launches()) return;
  Note(cuda::Attention(d, stream_));
}

// Whether a and b share the pages and the shape a batched attention launch is made of.
static bool SameAttentionShape(const AttentionArgs& a, const AttentionArgs& b) {
  return a.num_heads == b.num_heads && a.num_kv_heads == b.num_kv_heads && a.head_dim == b.head_dim &&
         a.page_size == b.page_size && a.scale == b.scale && a.k_pages == b.k_pages && a.v_pages == b.v_pages;
}

void CudaOps::AttentionSeqs(const AttentionArgs* seqs, int count) {
  // A decode step's sequences (one query row each, one shape, the kernel Attention would pick
  // for each) share one launch; in an eager step so do pieces of 2 to 64 rows on the tensor-core
  // kernel (AttentionPieces: a decision's question runs); the rest run one by one.
  const auto flash = [&](const AttentionArgs& a) { return cuda::FlashAttentionFits(DeviceAttentionArgs(a, bf16())); };
  if (mode_ == Mode::kEager && count >= 2) {
    std::vector<AttentionArgs> pieces, rest;
    for (int i = 0; i < count; ++i) {
      const AttentionArgs& a = seqs[i];
      const bool piece = a.n >= 2 && a.n <= cuda::kAttnPieceMaxRows && SameAttentionShape(a, seqs[0]) && flash(a);
      (piece ? pieces : rest).push_back(a);
    }
    if (pieces.size() >= 2) {
      AttentionPieces(pieces);
      if (!rest.empty()) AttentionSeqs(rest.data(), static_cast<int>(rest.size()));  // (no pieces left)
      return;
    }
  }
  const bool flash0 = count > 0 && flash(seqs[0]);
  std::vector<char> shares(static_cast<size_t>(std::max(count, 0)));  // whether sequence i joins the launch
  int sharing = 0;
  for (int i = 0; i < count; ++i) {
    const AttentionArgs& a = seqs[i];
    shares[i] = a.n == 1 && SameAttentionShape(a, seqs[0]) && flash(a) == flash0;
    sharing += shares[i] ? 1 : 0;
  }
  if (sharing < 2) {
    Ops::AttentionSeqs(seqs, count);
    return;
  }
  double keys = 0;
  std::vector<int32_t> ints;  // each shared sequence's page table (padded in graphs), then its position
  std::vector<size_t> table_at;
  for (int i = 0; i < count; ++i) {
    const AttentionArgs& a = seqs[i];
    if (!shares[i]) {
      Attention(a);
      continue;
    }
    keys += static_cast<double>(a.pos[0]) + 1;
    const int pages = a.pos[0] / a.page_size + 1;
    table_at.push_back(ints.size());
    ints.insert(ints.end(), a.page_table, a.page_table + pages);
    if (mode_ != Mode::kEager) ints.resize(ints.size() + static_cast<size_t>(PageTableCapacity(pages) - pages), 0);
  }
  const size_t pos_at = ints.size();
  for (int i = 0; i < count; ++i) {
    if (shares[i]) ints.push_back(seqs[i].pos[0]);
  }
  const auto timer = Time("Attention", 4.0 * keys * seqs[0].num_heads * seqs[0].head_dim);
  const int32_t* d_ints = StageInts(ints.data(), static_cast<int64_t>(ints.size()));
  std::vector<cuda::AttnSeq> batch;
  for (int i = 0; i < count; ++i) {
    if (!shares[i]) continue;
    const size_t j = batch.size();
    batch.push_back({seqs[i].q, d_ints + table_at[j], d_ints + pos_at + j, seqs[i].out});
  }
  const auto* d = static_cast<const cuda::AttnSeq*>(Stage(batch.data(), static_cast<int64_t>(batch.size() * sizeof(cuda::AttnSeq))));
  if (Failed()) return;
  const AttentionArgs& a0 = seqs[0];
  cuda::AttentionArgs shape = DeviceAttentionArgs(a0, bf16());  // the batch's shape: q, n, out per sequence
  shape.q = nullptr;
  shape.n = 0;
  shape.out = nullptr;
  Sign(16, flash0, d, d_ints, ints.size(), batch.size(), shape.k_pages, shape.v_pages, shape.page_size, shape.num_heads,
       shape.num_kv_heads, shape.head_dim, shape.scale);
  for (const cuda::AttnSeq& q : batch) Sign(q.q, q.out);
  if (!Launches()) return;
  Note(cuda::AttentionSeqs(shape, d, static_cast<int>(batch.size()), flash0, stream_));
}

void CudaOps::AttentionPieces(const std::vector<AttentionArgs>& pieces) {
  double keys = 0;
  std::vector<int32_t> ints;  // each piece's page table, then its positions
  std::vector<size_t> at, pages;
  for (const AttentionArgs& a : pieces) {
    for (int t = 0; t < a.n; ++t) keys += static_cast<double>(a.pos[t]) + 1;
    at.push_back(ints.size());
    pages.push_back(static_cast<size_t>(a.pos[a.n - 1] / a.page_size + 1));
    ints.insert(ints.end(), a.page_table, a.page_table + pages.back());
    ints.insert(ints.end(), a.pos, a.pos + a.n);
  }
  const AttentionArgs& a0 = pieces[0];
  const auto timer = Time("Attention", 4.0 * keys * a0.num_heads * a0.head_dim);
  const int32_t* d_ints = StageInts(ints.data(), static_cast<int64_t>(ints.size()));
  if (Failed()) return;
  std::vector<cuda::AttnPiece> host;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const AttentionArgs& a = pieces[i];
    const int32_t* table = d_ints + at[i];
    host.push_back({a.q, table, table + pages[i], a.n, a.out});
  }
  const auto* d = static_cast<const cuda::AttnPiece*>(Stage(host.data(), static_cast<int64_t>(host.size() * sizeof(host[0]))));
  if (Failed()) return;
  cuda::AttentionArgs shape = DeviceAttentionArgs(a0, bf16());  // q, page_table, pos, n, out per piece
  shape.q = nullptr;
  shape.page_table = nullptr;
  shape.pos = nullptr;
  shape.n = 0;
  shape.out = nullptr;
  Note(cuda::FlashAttentionPieces(shape, d, static_cast<int>(host.size()), stream_));
}

void CudaOps::SiluMul(const float* gu, int64_t n, int64_t inter, float* out, uint16_t* out_bf16) {
  const auto timer = Time("SiluMul");
  if (Failed()) return;
  Sign(8, gu, n, inter, out, out_bf16);
  if (!Launches()) return;
  Note(cuda::SiluMul(gu, n, inter, bf16(), out, stream_, out_bf16));
}

void CudaOps::SwiGluMlp(const float* x, int64_t n, const Weight& gate_up, const Weight& down, float* out,
                        const uint16_t* xb) {
  // Fused past 64 rows (cuda/mlp.h); cuBLAS (CudaOptions::cublas) and every other case run the
  // three ops.
  const DevCopy* gu = gate_up.parts.empty() && down.parts.empty() && !cublas_ ? Dev(gate_up) : nullptr;
  const DevCopy* dn = gu != nullptr ? Dev(down) : nullptr;
  if (Failed()) return;
  if (dn == nullptr || !cuda::SwiGluMlpFits(n, gu->w, dn->w, bf16())) {
    Ops::SwiGluMlp(x, n, gate_up, down, out, xb);
    return;
  }
  const auto timer = Time("SwiGluMlp (prefill form)", 6.0 * static_cast<double>(n) * down.cols * down.rows);
  const size_t mark = Mark();
  void* scratch = AllocRaw((cuda::SwiGluMlpScratchBytes(n, gu->w) + 3) / 4);
  Sign(36, x, n, gu->w.data, dn->w.data, out, xb);
  if (!Failed() && Launches()) Note(cuda::SwiGluMlp(x, n, gu->w, dn->w, out, down.rows, stream_, scratch, xb));
  Release(mark);
}

void CudaOps::Add(float* x, const float* y, int64_t n) {
  const auto timer = Time("Add");
  if (Failed()) return;
  Sign(9, x, y, n);
  if (!Launches()) return;
  Note(cuda::Add(x, y, n, bf16(), stream_));
}

void CudaOps::SigmoidGateMul(float* x, const float* gate, int64_t gate_stride, int64_t rows, int64_t cols,
                             uint16_t* x_bf16) {
  const auto timer = Time("SigmoidGateMul");
  if (Failed()) return;
  Sign(10, x, gate, gate_stride, rows, cols, x_bf16);
  if (!Launches()) return;
  Note(cuda::SigmoidGateMul(x, gate, gate_stride, rows, cols, bf16(), stream_, x_bf16));
}

void CudaOps::CausalConvSilu(const float* x, int64_t x_stride, int n, int channels, const Weight& w, float* conv_state,
                             float* out) {
  const auto timer = Time("CausalConvSilu");
  const DevCopy* d = Dev(w);
  if (Failed()) return;
  Sign(11, x, x_stride, n, channels, d->w.data, conv_state, out);
  if (!Launches()) return;
  Note(cuda::CausalConvSilu(x, x_stride, n, channels, d->w, conv_state, bf16(), out, stream_));
}

void CudaOps::CausalConvSiluSeqs(const float* x, int64_t x_stride, const int* seq_start, int count, int channels,
                                 const Weight& w, float* const* conv_states, float* out) {
  // A decode step's sequences (pieces under 16 tokens: the token kernel's) share one launch; in an
  // eager step, so do the pieces of 16 tokens and more (the token-parallel kernels'). Alone, or
  // longer pieces under a graph, a piece takes CausalConvSilu's launch.
  std::vector<cuda::ConvSeq> shorts, longs;
  int longest = 0;
  for (int i = 0; i < count; ++i) {
    const int n = seq_start[i + 1] - seq_start[i];
    if (n <= 0) continue;
    (n < cuda::kGdnParallelMinTokens ? shorts : longs).push_back({seq_start[i], n, conv_states[i]});
    if (n >= cuda::kGdnParallelMinTokens) longest = std::max(longest, n);
  }
  // What shares no launch runs alone: a lone short piece; the long pieces unless two or more of
  // them are in an eager step.
  auto run_alone = [&](std::vector<cuda::ConvSeq>& group) {
    for (const cuda::ConvSeq& q : group) {
      CausalConvSilu(x + int64_t{q.row0} * x_stride, x_stride, q.n, channels, w, q.conv_state, out + int64_t{q.row0} * channels);
    }
    group.clear();
  };
  if (shorts.size() == 1) run_alone(shorts);
  if (mode_ != Mode::kEager || longs.size() < 2) run_alone(longs);
  const DevCopy* d = Dev(w);
  if (Failed()) return;
  if (!longs.empty()) {
    const auto timer = Time("CausalConvSilu");
    const auto* seqs =
        static_cast<const cuda::ConvSeq*>(Stage(longs.data(), static_cast<int64_t>(longs.size() * sizeof(cuda::ConvSeq))));
    if (Failed()) return;
    Note(cuda::CausalConvSiluPieces(x, x_stride, seqs, static_cast<int>(longs.size()), longest, channels, d->w, bf16(),
                                    out, stream_));
  }
  if (shorts.empty()) return;
  const auto timer = Time("CausalConvSilu");
  const auto* seqs =
      static_cast<const cuda::ConvSeq*>(Stage(shorts.data(), static_cast<int64_t>(shorts.size() * sizeof(cuda::ConvSeq))));
  if (Failed()) return;
  Sign(15, x, x_stride, seqs, shorts.size(), channels, d->w.data, out);
  for (const cuda::ConvSeq& q : shorts) Sign(q.row0, q.n, q.conv_state);
  if (!Launches()) return;
  Note(cuda::CausalConvSiluSeqs(x, x_stride, seqs, static_cast<int>(shorts.size()), channels, d->w, bf16(), out, stream_));
}

void CudaOps::GdnGates(const float* in, int64_t stride, int64_t b_col, int64_t a_col, int n, int hv,
                       const Weight& a_log, const Weight& dt_bias, float* beta, float* g) {
  const auto timer = Time("GdnGates");
  const DevCopy* al = Dev(a_log);
  const DevCopy* dt = Dev(dt_bias);
  if (Failed()) return;
  Sign(12, in, stride, b_col, a_col, n, hv, al->w.data, dt->w.data, beta, g);
  if (!Launches()) return;
  Note(cuda::GdnGates(in, stride, b_col, a_col, n, hv, al->w, dt->w, bf16(), beta, g, stream_));
}

void CudaOps::GdnCore(const GdnCoreArgs& a) {
  const auto timer = Time("GdnCore");
  if (Failed()) return;
  GdnState& st = *a.state;
  cuda::DevGdnState ds{st.conv, st.S, st.pk, st.pvn, st.pgam, st.pkinv, st.pending};
  cuda::GdnCoreArgs d{};
  d.qkv = a.qkv;
  d.beta = a.beta;
  d.g = a.g;
  d.n = a.n;
  d.hk = a.hk;
  d.hv = a.hv;
  d.dk = a.dk;
  d.dv = a.dv;
  d.state = &ds;
  d.bf16 = bf16();
  d.out = a.out;
  if (mode_ != Mode::kEager) {
    const int32_t pending = st.pending;
    d.pending_dev = StageInts(&pending, 1);
  }
  // Token-parallel from 16 tokens on: scratch for every chunk's coefficients.
  if (a.n >= 16) d.scratch = AllocRaw(cuda::GdnChunkScratchFloats(a.n, a.hk, a.hv, a.dk, a.dv));
  Sign(13, d.qkv, d.beta, d.g, d.n, d.hk, d.hv, d.dk, d.dv, ds.conv, ds.S, ds.pk, ds.pvn, ds.pgam, ds.pkinv, d.out,
       d.pending_dev, d.scratch);
  if (Launches()) Note(cuda::GdnCore(d, stream_));
  else if (st.pending < 0 || st.pending >= kGdnChunk) Note(Internal("GDN state: bad chunk counter"));
  st.pending = (st.pending + a.n) % kGdnChunk;
}

// Whether a is a token-kernel piece (under 16 tokens) of first's shape: such pieces share one
// launch of cuda::GdnCoreSeqs.
static bool TokenPiece(const GdnCoreArgs& a, const GdnCoreArgs& first) {
  return a.n > 0 && a.n < cuda::kGdnParallelMinTokens && a.hk == first.hk && a.hv == first.hv && a.dk == first.dk &&
         a.dv == first.dv;
}

// a's entry of a cuda::GdnCoreSeqs launch (its state's pending before the call).
static cuda::GdnSeq DeviceSeq(const GdnCoreArgs& a) {
  const GdnState& st = *a.state;
  return {a.qkv, a.beta, a.g, a.out, a.n, {st.conv, st.S, st.pk, st.pvn, st.pgam, st.pkinv, st.pending}};
}

// Whether a is a chunk-kernel piece (16 tokens or more) of first's shape in the tensor-core form:
// in an eager step such pieces share one launch of cuda::GdnCoreTcChunkedSeqs.
static bool ChunkPiece(const GdnCoreArgs& a, const GdnCoreArgs& first, bool bf16) {
  return a.n >= cuda::kGdnParallelMinTokens && cuda::GdnTensorCoreForm(bf16, a.dk) && a.hk == first.hk &&
         a.hv == first.hv && a.dk == first.dk && a.dv == first.dv;
}

void CudaOps::GdnCoreSeqs(const GdnCoreArgs* seqs, int count) {
  // A decode step's sequences (pieces under 16 tokens: the token kernel's) share one launch; in an
  // eager step, so do the pieces of 16 tokens and more (a decision's question runs, several chat
  // prompts), in the chunk kernels' launch (GdnChunkPieces). Graphs take the longer pieces one by
  // one, as GdnCore.
  if (mode_ == Mode::kEager && count >= 2) {
    std::vector<GdnCoreArgs> chunked, rest;
    for (int i = 0; i < count; ++i) (ChunkPiece(seqs[i], seqs[0], bf16()) ? chunked : rest).push_back(seqs[i]);
    if (chunked.size() >= 2) {
      GdnChunkPieces(chunked);
      if (!rest.empty()) GdnCoreSeqs(rest.data(), static_cast<int>(rest.size()));  // (no chunk pieces left)
      return;
    }
  }
  const auto shares = [&](const GdnCoreArgs& a) { return TokenPiece(a, seqs[0]); };
  int sharing = 0;
  for (int i = 0; i < count; ++i) sharing += shares(seqs[i]) ? 1 : 0;
  if (sharing < 2) {
    Ops::GdnCoreSeqs(seqs, count);
    return;
  }
  std::vector<cuda::GdnSeq> batch;
  for (int i = 0; i < count; ++i) {
    const GdnCoreArgs& a = seqs[i];
    if (!shares(a)) {
      GdnCore(a);
      continue;
    }
    if (a.state->pending < 0 || a.state->pending >= kGdnChunk) Note(Internal("GDN state: bad chunk counter"));
    batch.push_back(DeviceSeq(a));
  }
  const auto timer = Time("GdnCore");
  const auto* d = static_cast<const cuda::GdnSeq*>(Stage(batch.data(), static_cast<int64_t>(batch.size() * sizeof(cuda::GdnSeq))));
  if (Failed()) return;
  const GdnCoreArgs& a0 = seqs[0];
  Sign(14, d, batch.size(), a0.hk, a0.hv, a0.dk, a0.dv);
  for (const cuda::GdnSeq& q : batch) {
    Sign(q.qkv, q.beta, q.g, q.out, q.n, q.state.S, q.state.pk, q.state.pvn, q.state.pgam, q.state.pkinv);
  }
  if (Launches()) Note(cuda::GdnCoreSeqs(d, static_cast<int>(batch.size()), a0.hk, a0.hv, a0.dk, a0.dv, bf16(), stream_));
  for (int i = 0; i < count; ++i) {
    if (shares(seqs[i])) seqs[i].state->pending = (seqs[i].state->pending + seqs[i].n) % kGdnChunk;
  }
}

void CudaOps::GdnChunkPieces(const std::vector<GdnCoreArgs>& pieces) {
  const auto timer = Time("GdnCore");
  std::vector<cuda::GdnChunkSeq> host;
  for (const GdnCoreArgs& a : pieces) {
    GdnState& st = *a.state;
    if (st.pending < 0 || st.pending >= kGdnChunk) Note(Internal("GDN state: bad chunk counter"));
    cuda::GdnChunkSeq q{};
    q.a = {.qkv = a.qkv, .beta = a.beta, .g = a.g, .n = a.n, .hk = a.hk, .hv = a.hv, .dk = a.dk, .dv = a.dv,
           .state = nullptr, .bf16 = bf16(), .out = a.out};
    q.a.scratch = AllocRaw(cuda::GdnChunkScratchFloats(a.n, a.hk, a.hv, a.dk, a.dv));
    q.st = {st.conv, st.S, st.pk, st.pvn, st.pgam, st.pkinv, st.pending};
    q.pending = st.pending;
    host.push_back(q);
  }
  const auto* d = static_cast<const cuda::GdnChunkSeq*>(Stage(host.data(), static_cast<int64_t>(host.size() * sizeof(host[0]))));
  if (Failed()) return;
  Note(cuda::GdnCoreTcChunkedSeqs(d, host.data(), static_cast<int>(host.size()), stream_));
  for (const GdnCoreArgs& a : pieces) a.state->pending = (a.state->pending + a.n) % kGdnChunk;
}

void CudaOps::GatedRmsNorm(const float* x, const float* z, int64_t z_stride, int64_t z_col, int n, int hv, int dv,
                           const Weight& w, float eps, float* out, uint16_t* out_bf16) {
  const auto timer = Time("GatedRmsNorm");
  const DevCopy* d = Dev(w);
  if (Failed()) return;
  Sign(14, x, z, z_stride, z_col, n, hv, dv, d->w.data, eps, out, out_bf16);
  if (!Launches()) return;
  Note(cuda::GatedRmsNorm(x, z, z_stride, z_col, n, hv, dv, d->w, eps, bf16(), out, stream_, out_bf16));
}

void CudaOps::QkvPrep(const QkvPrepArgs& a) {
  // One launch (attention_prep.h) for heads up to 256 wide; wider ones take the separate ops.
  if (a.hd > cuda::kQkvPrepMaxHeadDim || a.rot_dim % 2 != 0 || a.rot_dim > a.hd) {
    Ops::QkvPrep(a);
    return;
  }
  const auto timer = Time("QkvPrep");
  const float* qn = DevF32(*a.q_norm);
  const float* kn = DevF32(*a.k_norm);
  const int32_t* d_pos = StageInts(a.pos, a.n);
  const float* d_freq = static_cast<const float*>(Stage(a.inv_freq, int64_t{a.rot_dim / 2} * 4));
  if (Failed()) return;
  const int kind = a.norm_kind == NormKind::kOnePlusW ? 1 : 0;
  Sign(22, a.qkv, a.n, a.nh, a.nkv, a.hd, a.rot_dim, qn, kn, kind, a.eps, d_pos, d_freq, a.attn_scale, a.q, a.gate, a.k,
       a.v);
  if (!Launches()) return;
  const cuda::QkvPrepDevArgs d{.qkv = a.qkv, .n = a.n, .nh = a.nh, .nkv = a.nkv, .hd = a.hd, .rot_dim = a.rot_dim,
                               .q_norm = qn, .k_norm = kn, .norm_kind = kind, .eps = a.eps, .pos = d_pos,
                               .inv_freq = d_freq, .attn_scale = a.attn_scale, .q = a.q, .gate = a.gate, .k = a.k,
                               .v = a.v};
  Note(cuda::QkvPrep(d, bf16(), stream_));
}

void CudaOps::GdnGatedCoreSeqs(const GdnCoreArgs* seqs, int count, const GdnGatedArgs& l) {
  // One launch (the token kernel with the gates and the gated norm inside) when every sequence is
  // a token-kernel piece (a decode step's rows) and the sequences' rows are l's, in order;
  // otherwise the three ops.
  const int64_t width = int64_t{l.hv} * l.dv;
  bool fuse = count >= 1;
  int64_t r0 = 0;
  for (int i = 0; i < count && fuse; ++i) {
    const GdnCoreArgs& a = seqs[i];
    fuse = TokenPiece(a, seqs[0]) && a.hv == l.hv && a.dv == l.dv && a.beta == l.beta + r0 * l.hv &&
           a.g == l.g + r0 * l.hv && a.out == l.core + r0 * width;
    r0 += a.n;
  }
  if (!fuse || r0 != l.n) {
    Ops::GdnGatedCoreSeqs(seqs, count, l);
    return;
  }
  const auto timer = Time("GdnGatedCore");
  const DevCopy* al = Dev(*l.a_log);
  const DevCopy* dt = Dev(*l.dt_bias);
  const DevCopy* nw = Dev(*l.norm);
  if (Failed()) return;
  std::vector<cuda::GdnSeq> batch;
  r0 = 0;
  for (int i = 0; i < count; ++i) {
    const GdnCoreArgs& a = seqs[i];
    if (a.state->pending < 0 || a.state->pending >= kGdnChunk) Note(Internal("GDN state: bad chunk counter"));
    cuda::GdnSeq q = DeviceSeq(a);
    q.in = l.in + r0 * l.stride;
    q.normed = l.normed + r0 * width;
    q.normed_b = l.normed_bf16 != nullptr ? l.normed_bf16 + r0 * width : nullptr;
    q.beta_out = l.beta + r0 * l.hv;
    q.g_out = l.g + r0 * l.hv;
    batch.push_back(q);
    r0 += a.n;
  }
  const auto* d = static_cast<const cuda::GdnSeq*>(Stage(batch.data(), static_cast<int64_t>(batch.size() * sizeof(cuda::GdnSeq))));
  if (Failed()) return;
  const GdnCoreArgs& a0 = seqs[0];
  const cuda::GdnGateNorm gn{l.stride, l.b_col, l.a_col, l.z_col, al->w, dt->w, nw->w, l.eps};
  Sign(21, d, count, a0.hk, l.hv, a0.dk, l.dv, l.in, l.stride, l.b_col, l.a_col, l.z_col, al->w.data, dt->w.data,
       nw->w.data, l.eps);
  for (const cuda::GdnSeq& q : batch) {
    Sign(q.qkv, q.out, q.n, q.state.S, q.state.pk, q.state.pvn, q.state.pgam, q.state.pkinv, q.in, q.normed, q.normed_b,
         q.beta_out, q.g_out);
  }
  if (Launches()) Note(cuda::GdnCoreSeqs(d, count, a0.hk, l.hv, a0.dk, l.dv, bf16(), stream_, &gn));
  for (int i = 0; i < count; ++i) seqs[i].state->pending = (seqs[i].state->pending + seqs[i].n) % kGdnChunk;
}

}  // namespace graft

// CudaOps' weights: device copies of dense, split and quantized weights, uploads, exact mode's
// residuals and rebuilt weights.
#include "backend/cuda/cuda_ops.h"

#include <cuda_runtime_api.h>
#include <fmt/core.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops_detail.h"
#include "backend/cuda/exact.h"
#include "backend/cuda/int4_lanes.h"
#include "backend/cuda/nvfp4_table.h"
#include "util/bf16.h"
#include "util/parallel.h"

namespace graft {

using namespace cuda_ops_detail;

const CudaOps::DevCopy* CudaOps::Dev(const Weight& w) {
  auto it = weights_.find(&w);
  if (it != weights_.end()) return &it->second;
  if (Failed()) return nullptr;
  if (mode_ == Mode::kCapture) {
    Note(Internal("weight '" + w.name + "' is not on the device: upload the model and adapters before capturing a graph"));
    return nullptr;
  }
  if (!w.parts.empty()) {
    Note(Internal("weight '" + w.name + "' is stored in parts: upload and multiply each part"));
    return nullptr;
  }
  if (w.quant) return DevQuantized(w);
  const int64_t bytes = w.bytes();
  auto mem = WeightMemory(bytes, w.name.empty() ? "a weight" : w.name);
  if (!mem.ok()) {
    Note(mem.status());
    return nullptr;
  }
  void* p = mem.value();
  const void* src = w.is_bf16 ? static_cast<const void*>(w.bf16.data()) : static_cast<const void*>(w.f32.data());
  Status s = CopyIn(p, src, bytes);
  if (!s.ok()) {
    Note(s);
    return nullptr;
  }
  DevCopy d;
  d.w = {p, w.rows, w.cols, w.is_bf16};
  if (!w.is_bf16) d.f32 = static_cast<float*>(p);
  return &weights_.emplace(&w, d).first->second;
}

const cuda::DevWeight* CudaOps::DevSplit(const Weight& w) {
  auto it = split_.find(&w);
  if (it != split_.end()) return &it->second;
  if (Failed()) return nullptr;
  if (mode_ == Mode::kCapture || w.is_bf16 || w.quant || !w.parts.empty()) {
    Note(Internal("LoRA factor '" + w.name + "' has no split bf16 copy on the device"));
    return nullptr;
  }
  const int64_t rows = w.rows, cols = w.cols;
  std::vector<uint16_t> host(static_cast<size_t>(rows * cols * 3));
  for (int64_t r = 0; r < rows; ++r) {
    uint16_t* row = host.data() + r * cols * 3;
    for (int64_t c = 0; c < cols; ++c) {
      uint16_t p[3];
      SplitBf16x3(w.f32[static_cast<size_t>(r * cols + c)], p);
      for (int i = 0; i < 3; ++i) row[i * cols + c] = p[i];
    }
  }
  const int64_t bytes = static_cast<int64_t>(host.size()) * 2;
  auto mem = WeightMemory(bytes, w.name.empty() ? "a LoRA factor" : w.name);
  if (!mem.ok()) {
    Note(mem.status());
    return nullptr;
  }
  Status s = CopyIn(mem.value(), host.data(), bytes);
  if (!s.ok()) {
    Note(s);
    return nullptr;
  }
  return &split_.emplace(&w, cuda::DevWeight{mem.value(), rows, cols * 3, true}).first->second;
}

// One allocation holding the tensor's arrays, each at a 256-byte boundary.
const CudaOps::DevCopy* CudaOps::DevQuantized(const Weight& w) {
  const QuantizedWeight& q = *w.quant;
  cuda::DevWeight d{nullptr, q.rows, q.cols, false};
  switch (q.format) {
    case QuantFormat::kFp8Block: d.format = cuda::DevFormat::kFp8Block; break;
    case QuantFormat::kFp8Channel: d.format = cuda::DevFormat::kFp8Channel; break;
    case QuantFormat::kInt4Group: d.format = cuda::DevFormat::kInt4; break;
    case QuantFormat::kNvfp4: d.format = cuda::DevFormat::kNvfp4; break;
  }
  d.group = q.group;
  d.global = q.global;
  // int4 words and NVFP4 bytes (the same nibble order) go up in the lane order the decode form
  // reads (int4_lanes.h); every kernel reads them through the same positions, so only the layout
  // on the device changes. NVFP4 also gets its global scale's dequantization table (nvfp4_table.h).
  std::vector<int32_t> lanes;
  const bool w4 = q.format == QuantFormat::kInt4Group || q.format == QuantFormat::kNvfp4;
  if (w4 && q.cols % cuda::kInt4LaneBlock == 0 && (!q.words.empty() || !q.codes.empty())) {
    std::vector<int32_t> nvfp4_words;
    const int32_t* words = q.words.data();
    if (q.format == QuantFormat::kNvfp4) {  // bytes as little-endian words: column 8j + i in nibble i of word j
      nvfp4_words.resize(q.codes.size() / 4);
      std::memcpy(nvfp4_words.data(), q.codes.data(), nvfp4_words.size() * 4);
      words = nvfp4_words.data();
    }
    lanes.resize(q.format == QuantFormat::kNvfp4 ? nvfp4_words.size() : q.words.size());
    const int threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 16u));
    ParallelFor(static_cast<int64_t>(lanes.size()) / cuda::kInt4LaneWords, threads,
                [&](int64_t b0, int64_t b1) { cuda::Int4ToLaneOrder(words, b0, b1, lanes.data()); });
    d.int4_lanes = true;
    d.scale_bf16 = q.format == QuantFormat::kInt4Group &&
                   std::all_of(q.scale.begin(), q.scale.end(), [](float v) { return v == RoundBf16(v); });
  }
  std::vector<cuda::Nvfp4Entry> table;
  if (q.format == QuantFormat::kNvfp4) {
    table.resize(cuda::kNvfp4TableEntries);
    cuda::BuildNvfp4Table(q.global, table.data());
  }
  const void* main = !lanes.empty()       ? static_cast<const void*>(lanes.data())
                     : q.words.empty() ? static_cast<const void*>(q.codes.data())
                                       : static_cast<const void*>(q.words.data());
  const int64_t main_bytes = q.words.empty() ? static_cast<int64_t>(q.codes.size()) : static_cast<int64_t>(q.words.size()) * 4;
  struct Piece {
    const void* src;
    int64_t bytes;
  };
  const Piece pieces[5] = {{main, main_bytes},
                           {q.scale.data(), static_cast<int64_t>(q.scale.size()) * 4},
                           {q.scale_fp8.data(), static_cast<int64_t>(q.scale_fp8.size())},
                           {q.zero_words.data(), static_cast<int64_t>(q.zero_words.size()) * 4},
                           {table.data(), static_cast<int64_t>(table.size() * sizeof(cuda::Nvfp4Entry))}};
  int64_t offsets[5], total = 0;
  for (int i = 0; i < 5; ++i) {
    offsets[i] = total;
    total += (pieces[i].bytes + 255) / 256 * 256;
  }
  auto mem = dev_->AllocateBytes(std::max<int64_t>(total, 1), w.name.empty() ? "a quantized weight" : w.name.c_str());
  if (!mem.ok()) {
    Note(mem.status());
    return nullptr;
  }
  char* base = static_cast<char*>(mem.value());
  allocations_.push_back(base);
  weight_bytes_ += total;
  for (int i = 0; i < 5; ++i) {
    Status s = CopyIn(base + offsets[i], pieces[i].src, pieces[i].bytes);
    if (!s.ok()) {
      Note(s);
      return nullptr;
    }
  }
  d.data = base + offsets[0];
  if (!q.scale.empty()) d.scale = reinterpret_cast<const float*>(base + offsets[1]);
  if (!q.scale_fp8.empty()) d.scale_fp8 = reinterpret_cast<const uint8_t*>(base + offsets[2]);
  if (!q.zero_words.empty()) d.zero = reinterpret_cast<const int32_t*>(base + offsets[3]);
  if (!table.empty()) d.nvfp4_table = reinterpret_cast<const cuda::Nvfp4Entry*>(base + offsets[4]);
  DevCopy c;
  c.w = d;
  return &weights_.emplace(&w, c).first->second;
}

const float* CudaOps::DevF32(const Weight& w) {
  const DevCopy* d = Dev(w);
  if (!d) return nullptr;
  if (d->f32) return d->f32;
  const int64_t n = w.rows * w.cols;
  std::vector<float> host(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) host[static_cast<size_t>(i)] = w.at(i);
  auto mem = dev_->AllocateBytes(n * 4, "an fp32 norm weight");
  if (!mem.ok()) {
    Note(mem.status());
    return nullptr;
  }
  allocations_.push_back(mem.value());
  weight_bytes_ += n * 4;
  Status s = CopyIn(mem.value(), host.data(), n * 4);
  if (!s.ok()) {
    Note(s);
    return nullptr;
  }
  weights_[&w].f32 = static_cast<float*>(mem.value());
  return weights_[&w].f32;
}

Status CudaOps::Upload(const ModelWeights& w) {
  auto up = [this](const Weight& x) {
    if (x.empty()) return;
    if (x.parts.empty()) Dev(x);
    for (const Weight& p : x.parts) Dev(p);
  };
  up(w.embed);
  up(w.final_norm);
  DevF32(w.final_norm);
  up(w.lm_head);
  for (const LayerWeights& l : w.layers) {
    for (const Weight* x : {&l.input_norm, &l.post_norm, &l.attn.q_norm, &l.attn.k_norm}) {
      if (!x->empty()) DevF32(*x);
    }
    for (const Weight* x : {&l.attn.qkv, &l.attn.o, &l.gdn.in_proj, &l.gdn.conv, &l.gdn.a_log, &l.gdn.dt_bias,
                            &l.gdn.norm, &l.gdn.out, &l.gate_up, &l.down}) {
      up(*x);
    }
  }
  return TakeError().WithContext("uploading the model to the device");
}

// f(m) for every LoRA module of `a`.
template <typename F>
static void ForEachModule(const LoraAdapter& a, F f) {
  for (const LoraLayer& l : a.layers) {
    for (const auto& mods : l.targets) {
      for (const LoraModule& m : mods) f(m);
    }
  }
}

void CudaOps::DevFactor(const Weight& f) {
  if (bf16() && !f.is_bf16) DevSplit(f);
  else Dev(f);
}

Result<bool> CudaOps::UploadStackedA(const std::vector<LoraModule>& mods) {
  // Only where it can pay: bf16 activations, two or more bf16 A factors on one K with ranks that
  // keep each block's t 16-byte aligned (LoraTs), none on the device yet.
  if (!bf16() || mods.size() < 2) return false;
  int64_t bytes = 0;
  for (const LoraModule& m : mods) {
    if (!m.a.is_bf16 || m.a.cols != mods[0].a.cols || m.a.rows % 8 != 0 || m.a.quant || !m.a.parts.empty() ||
        weights_.count(&m.a)) {
      return false;
    }
    bytes += m.a.bytes();
  }
  GRAFT_ASSIGN_OR_RETURN(void* p, WeightMemory(bytes, "LoRA A factors of " + mods[0].a.name));
  char* at = static_cast<char*>(p);
  for (const LoraModule& m : mods) {
    GRAFT_RETURN_IF_ERROR(CopyIn(at, m.a.bf16.data(), m.a.bytes()));
    DevCopy d;
    d.w = {at, m.a.rows, m.a.cols, true};
    weights_.emplace(&m.a, d);
    at += m.a.bytes();
  }
  return true;
}

Status CudaOps::Upload(const Weight& w) {
  Dev(w);
  return TakeError().WithContext("uploading " + (w.name.empty() ? std::string("a weight") : w.name));
}

void CudaOps::UploadStackedA(const LoraAdapter& a) {
  for (const LoraLayer& l : a.layers) {
    for (const auto& mods : l.targets) Note(UploadStackedA(mods).status());
  }
}

Status CudaOps::Upload(const LoraAdapter& a) {
  UploadStackedA(a);
  ForEachModule(a, [&](const LoraModule& m) {
    DevFactor(m.a);
    DevFactor(m.b);
    if (m.exact && !residuals_.count(m.exact.get())) UploadResidual(*m.exact);
  });
  return TakeError().WithContext("uploading adapter " + a.name + " to the device");
}

Result<void*> CudaOps::WeightMemory(int64_t bytes, const std::string& what) {
  if (filling_ != nullptr) {
    constexpr int64_t kAlign = 256;
    const int64_t at = (filling_->used + kAlign - 1) / kAlign * kAlign;
    if (at + bytes > filling_->size) {
      return ResourceExhausted(fmt::format("{} does not fit the adapter slot's reserved {} ({} used)", what,
                                           Mb(filling_->size), Mb(at)));
    }
    filling_->used = at + bytes;
    return static_cast<void*>(filling_->base + at);
  }
  GRAFT_ASSIGN_OR_RETURN(void* p, dev_->AllocateBytes(bytes, what.c_str()));
  allocations_.push_back(p);
  weight_bytes_ += bytes;
  return p;
}

int64_t CudaOps::FactorBytes(int64_t elements, bool is_bf16) const {
  // bf16 factors as they are; float factors as three bf16 pieces with bf16 activations (DevSplit),
  // as floats with fp32 activations.
  return elements * (is_bf16 ? 2 : bf16() ? 6 : 4);
}

Status CudaOps::ReserveAdapterSlots(const std::vector<int32_t>& slots, int64_t bytes_each) {
  for (int32_t slot : slots) {
    if (adapter_regions_.count(slot)) return InvalidArgument(fmt::format("adapter slot {} already has a region", slot));
    GRAFT_ASSIGN_OR_RETURN(void* p, dev_->AllocateBytes(bytes_each, "a run-time adapter slot (--max-adapters)"));
    allocations_.push_back(p);
    weight_bytes_ += bytes_each;
    adapter_regions_[slot] = AdapterRegion{static_cast<char*>(p), bytes_each, 0, {}};
  }
  return Status::Ok();
}

Status CudaOps::PlaceAdapter(const LoraAdapter& a, int32_t slot) {
  auto it = adapter_regions_.find(slot);
  if (it == adapter_regions_.end()) return Internal(fmt::format("adapter slot {} has no reserved region", slot));
  AdapterRegion& region = it->second;
  if (!region.factors.empty()) return Internal(fmt::format("adapter slot {}'s region still holds an adapter", slot));
  GRAFT_RETURN_IF_ERROR(TakeError());
  filling_ = &region;
  UploadStackedA(a);
  ForEachModule(a, [&](const LoraModule& m) {
    for (const Weight* f : {&m.a, &m.b}) {
      DevFactor(*f);
      region.factors.push_back(f);
    }
  });
  filling_ = nullptr;
  Status s = TakeError();
  if (!s.ok()) {
    ForgetAdapter(slot);
    return s.WithContext("placing adapter " + a.name + " on the device");
  }
  return cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)) == cudaSuccess
             ? Status::Ok()
             : Internal("placing adapter " + a.name + ": the copies failed");
}

void CudaOps::ForgetAdapter(int32_t slot) {
  auto it = adapter_regions_.find(slot);
  if (it == adapter_regions_.end()) return;
  for (const Weight* f : it->second.factors) {
    weights_.erase(f);
    split_.erase(f);
  }
  it->second.factors.clear();
  it->second.used = 0;
}

Status CudaOps::UploadExactBase(const ModelWeights& copy) {
  const int64_t before = weight_bytes_;
  for (const LayerWeights& l : copy.layers) {
    for (const Weight* x : {&l.attn.qkv, &l.attn.o, &l.gdn.in_proj, &l.gdn.out, &l.gate_up, &l.down}) {
      if (!x->empty()) Dev(*x);
    }
  }
  exact_bytes_ += weight_bytes_ - before;
  weight_bytes_ = before;
  return TakeError().WithContext("uploading the exact-mode bf16 copy to the device");
}

void* CudaOps::UploadBytes(const void* host, int64_t bytes, const char* what) {
  if (Failed()) return nullptr;
  auto mem = dev_->AllocateBytes(std::max<int64_t>(bytes, 1), what);
  if (!mem.ok()) {
    Note(mem.status());
    return nullptr;
  }
  allocations_.push_back(mem.value());
  exact_bytes_ += bytes;
  Note(CopyIn(mem.value(), host, bytes));
  return mem.value();
}

void CudaOps::UploadResidual(const IndexedResidual& r) {
  cuda::DevResidual d;
  const char* what = "an exact residual";
  d.stream = static_cast<const uint8_t*>(UploadBytes(r.res.index_stream.data(), static_cast<int64_t>(r.res.index_stream.size()), what));
  d.values = static_cast<const uint16_t*>(UploadBytes(r.res.values.data(), r.values() * 2, what));
  d.chunk_byte = static_cast<const uint32_t*>(UploadBytes(r.chunk_byte.data(), r.chunks() * 4, what));
  d.chunk_prev = static_cast<const int64_t*>(UploadBytes(r.chunk_prev.data(), r.chunks() * 8, what));
  d.num_values = r.values();
  d.chunks = r.chunks();
  if (!Failed()) residuals_.emplace(&r, d);
}

Status CudaOps::ReserveExact(int64_t elements) {
  if (elements <= exact_elements_) return Status::Ok();
  if (exact_scratch_) {
    return Internal("the exact scratch is reserved once, at start-up (ask for the largest weight first)");
  }
  auto mem = dev_->AllocateBytes(elements * 2, "the exact-mode scratch");
  if (!mem.ok()) return mem.status();
  allocations_.push_back(mem.value());
  exact_scratch_ = static_cast<uint16_t*>(mem.value());
  exact_elements_ = elements;
  exact_bytes_ += elements * 2;
  return Status::Ok();
}

const Weight& CudaOps::ExactWeight(const Weight& base, const std::vector<LoraModule>& modules) {
  const auto timer = Time("ExactWeight");
  const int64_t n = base.rows, k = base.cols;
  exact_weight_.name = base.name + " (exact)";
  exact_weight_.rows = n;
  exact_weight_.cols = k;
  exact_weight_.is_bf16 = true;
  DevCopy& self = weights_[&exact_weight_];
  self.w = {exact_scratch_, n, k, true};
  self.f32 = nullptr;
  if (Failed()) return exact_weight_;
  if (mode_ != Mode::kEager) {
    Note(Internal("exact-mode rows never run inside a CUDA graph (the decode-graph cache runs them eagerly)"));
    return exact_weight_;
  }
  if (n * k > exact_elements_) {
    Note(ResourceExhausted(fmt::format("exact mode: {} needs {} of scratch but {} were reserved at start-up", base.name,
                                       Mb(n * k * 2), Mb(exact_elements_ * 2))));
    return exact_weight_;
  }
  const DevCopy* bd = Dev(base);
  if (Failed()) return exact_weight_;
  const auto* src = static_cast<const uint16_t*>(bd->w.data);
  // Rows no module covers: the base's own.
  std::vector<std::pair<int64_t, int64_t>> covered;
  for (const LoraModule& m : modules) covered.push_back({m.row_offset, m.row_offset + m.b.rows});
  std::sort(covered.begin(), covered.end());
  int64_t at = 0;
  covered.push_back({n, n});
  for (const auto& [r0, r1] : covered) {
    if (r0 > at) {
      Note(CudaStatus(cudaMemcpyAsync(exact_scratch_ + at * k, src + at * k, static_cast<size_t>((r0 - at) * k * 2),
                                      cudaMemcpyDeviceToDevice, S(stream_)),
                      "cudaMemcpyAsync", __FILE__, __LINE__));
    }
    at = std::max(at, r1);
  }
  for (const LoraModule& m : modules) {
    const DevCopy* a = Dev(m.a);
    const DevCopy* b = Dev(m.b);
    auto res = residuals_.find(m.exact.get());
    if (Failed()) return exact_weight_;
    if (res == residuals_.end()) {
      Note(Internal("exact mode: the residual of " + m.name + " is not on the device (upload the adapter)"));
      return exact_weight_;
    }
    uint16_t* dst = exact_scratch_ + m.row_offset * k;
    Note(cuda::ExactReconstruct(src + m.row_offset * k, m.b.rows, k, a->w, b->w, m.rank, dst, stream_));
    Note(cuda::ExactResidualApply(res->second, dst, stream_));
  }
  return exact_weight_;
}

}  // namespace graft

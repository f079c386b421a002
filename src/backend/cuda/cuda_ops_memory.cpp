// CudaOps' memory: the device pools' memory (CudaPoolMemory), the memory table, the scratch arena
// and the pinned staging of host data.
#include "backend/cuda/cuda_ops.h"

#include <cuda_runtime_api.h>
#include <fmt/core.h>

#include <algorithm>
#include <cstring>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops_detail.h"

namespace graft {

using namespace cuda_ops_detail;

// ---- CudaPoolMemory -----------------------------------------------------------------------

CudaPoolMemory::~CudaPoolMemory() {
  for (auto& [p, n] : sizes_) cudaFree(p);
  if (stream_) cudaStreamDestroy(S(stream_));
}

Result<void*> CudaPoolMemory::AllocateBytes(int64_t bytes, const char* what) {
  bytes = std::max<int64_t>(bytes, 4);
  if (used_ + bytes > budget_) {
    return ResourceExhausted(fmt::format("device memory: {} needs {} but only {} of the {} budget (--gpu-memory) is left",
                                         what, Mb(bytes), Mb(budget_ - used_), Mb(budget_)));
  }
  void* p = nullptr;
  if (cudaMalloc(&p, static_cast<size_t>(bytes)) != cudaSuccess) {
    cudaGetLastError();
    return ResourceExhausted(fmt::format("device memory: cudaMalloc of {} for {} failed", Mb(bytes), what));
  }
  sizes_[p] = bytes;
  used_ += bytes;
  return p;
}

void CudaPoolMemory::FreeBytes(void* p) {
  auto it = sizes_.find(p);
  if (it == sizes_.end()) return;
  cudaStreamSynchronize(S(stream_));  // work queued on the block must finish first
  cudaFree(p);
  used_ -= it->second;
  sizes_.erase(it);
}

float* CudaPoolMemory::Allocate(int64_t n) {
  auto r = AllocateBytes(n * 4, "the KV pool");
  if (!r.ok()) return nullptr;
  float* p = static_cast<float*>(r.value());
  cudaMemsetAsync(p, 0, static_cast<size_t>(std::max<int64_t>(n, 1)) * 4, S(stream_));
  pool_bytes_ += sizes_[p];
  return p;
}

void CudaPoolMemory::Free(float* block) {
  auto it = sizes_.find(block);
  if (it != sizes_.end()) pool_bytes_ -= it->second;
  FreeBytes(block);
}

void CudaPoolMemory::Copy(const float* src, float* dst, int64_t n) {
  if (n > 0) cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * 4, cudaMemcpyDeviceToDevice, S(stream_));
}

void CudaPoolMemory::Zero(float* dst, int64_t n) {
  if (n > 0) cudaMemsetAsync(dst, 0, static_cast<size_t>(n) * 4, S(stream_));
}

// ---- CudaMemoryUse ------------------------------------------------------------------------

std::string CudaMemoryUse::Table() const {
  auto line = [this](const char* what, int64_t b) {
    return fmt::format("  {:<10} {:>10}  {:5.1f}%\n", what, Mb(b), budget ? 100.0 * b / budget : 0.0);
  };
  return line("weights", weights) + line("scratch", scratch) + line("kv pools", pools) +
         (exact ? line("exact", exact) : std::string()) +
         fmt::format("  {:<10} {:>10}  (host, pinned)\n", "staging", Mb(pinned)) +
         line("free", budget - weights - scratch - pools - exact) + fmt::format("  {:<10} {:>10}\n", "budget", Mb(budget));
}

// ---- scratch ------------------------------------------------------------------------------

float* CudaOps::Alloc(int64_t n) {
  float* p = AllocRaw(n);
  if (poison_scratch_ && !Failed() && Launches()) {  // 0xffffffff: a NaN
    Note(CudaStatus(cudaMemsetAsync(p, 0xff, static_cast<size_t>(n) * 4, S(stream_)), "cudaMemsetAsync", __FILE__,
                    __LINE__));
  }
  return p;
}

float* CudaOps::AllocRaw(int64_t n) {
  const int64_t take = BlockFloats(n);
  if (top_ + take > (mode_ == Mode::kEager ? arena_floats_ : stage_floor_)) {
    Note(ResourceExhausted(fmt::format("the step needs more than the {} device scratch arena (--gpu-scratch); "
                                       "run fewer tokens per step (--max-step-tokens) or raise it",
                                       Mb(arena_floats_ * 4))));
    return arena_;  // nothing runs after an error
  }
  float* p = arena_ + top_;
  top_ += take;
  top_high_ = std::max(top_high_, top_);
  Sign(top_);
  return p;
}

void CudaOps::Release(size_t mark) { top_ = std::min<int64_t>(top_, static_cast<int64_t>(mark)); }

void* CudaOps::Stage(const void* host, int64_t bytes) {
  if (mode_ != Mode::kEager) {
    // Graphs: at the arena's top, below what the step staged before, and at the same distance
    // from the pinned buffer's end; capture and record stage the same sizes in the same order
    // (the signature holds them), so a replay's values land where the graph reads them.
    Sign(bytes);
    const int64_t take = BlockFloats((bytes + 3) / 4);
    if (Failed()) return arena_;
    if (stage_floor_ - take < top_high_) {
      Note(ResourceExhausted(fmt::format("a graph step stages more than the {} device scratch arena holds beside its "
                                         "buffers (--gpu-scratch)", Mb(arena_floats_ * 4))));
      return arena_;
    }
    if (StagedBytes() + take * 4 + pinned_top_ > pinned_bytes_) {
      Note(ResourceExhausted(fmt::format("a graph step stages more than the {} pinned buffer", Mb(pinned_bytes_))));
      return arena_;
    }
    stage_floor_ -= take;
    Sign(stage_floor_);
    if (bytes > 0) std::memcpy(pinned_ + pinned_bytes_ - StagedBytes(), host, static_cast<size_t>(bytes));
    return arena_ + stage_floor_;
  }
  float* dst = Alloc((bytes + 3) / 4);
  Sign(bytes);
  if (Failed() || bytes == 0) return dst;
  if (bytes > pinned_bytes_) {  // too big for the staging buffer: a plain (synchronising) copy
    Note(CopyIn(dst, host, bytes));
    return dst;
  }
  if (pinned_top_ + bytes > pinned_bytes_) {
    // Every earlier staged copy must have left the buffer before it is reused.
    Note(CudaStatus(cudaStreamSynchronize(S(stream_)), "cudaStreamSynchronize", __FILE__, __LINE__));
    pinned_top_ = 0;
  }
  char* src = pinned_ + pinned_top_;
  std::memcpy(src, host, static_cast<size_t>(bytes));
  pinned_top_ += (bytes + 255) / 256 * 256;
  Note(CudaStatus(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, S(stream_)),
                  "cudaMemcpyAsync", __FILE__, __LINE__));
  return dst;
}

Status CudaOps::CopyIn(void* dst, const void* host, int64_t bytes) {
  if (bytes <= 0) return Status::Ok();
  GRAFT_RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(dst, host, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, S(stream_)),
                                   "cudaMemcpyAsync", __FILE__, __LINE__));
  return CudaStatus(cudaStreamSynchronize(S(stream_)), "cudaStreamSynchronize", __FILE__, __LINE__);
}

void CudaOps::ToHost(const float* src, int64_t n, float* host_dst) { CopyOut(src, n * 4, host_dst); }

void CudaOps::CopyOut(const void* src, int64_t bytes, void* host_dst) {
  if (Failed() || bytes <= 0) return;
  Sign(src, bytes);
  if (mode_ != Mode::kEager) {  // into the pinned buffer; copied out once the graph has run
    if (pinned_top_ + bytes + StagedBytes() > pinned_bytes_) {
      Note(ResourceExhausted(fmt::format("a graph step's {} of logits exceed the {} pinned buffer", Mb(bytes),
                                         Mb(pinned_bytes_))));
      return;
    }
    char* at = pinned_ + pinned_top_;
    pinned_top_ += (bytes + 255) / 256 * 256;
    host_copies_.push_back({at, host_dst, bytes});
    if (mode_ == Mode::kCapture) {
      Note(CudaStatus(cudaMemcpyAsync(at, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, S(stream_)),
                      "cudaMemcpyAsync", __FILE__, __LINE__));
    }
    return;
  }
  Note(CudaStatus(cudaMemcpyAsync(host_dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, S(stream_)),
                  "cudaMemcpyAsync", __FILE__, __LINE__));
  Note(CudaStatus(cudaStreamSynchronize(S(stream_)), "cudaStreamSynchronize", __FILE__, __LINE__));
  pinned_top_ = 0;  // the stream is idle: every staged copy is done
}

}  // namespace graft

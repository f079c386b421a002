// PoolMemory: where a KvPool keeps its KV pages and recurrent-state slots, in the backend's
// memory space — host memory for the CPU backend (HostPoolMemory), device memory for CUDA.
// Blocks come zeroed and never move; Free gives one back. Pools reserve their memory up front
// (docs/design.md §3.5); only growable pools (offline tools) allocate later. The memory also
// says how its backend stores a cached K / V value (kv_value_bytes): 4 for fp32 (the CPU, and
// CUDA with fp32 activations), 2 for bf16 (CUDA with bf16 activations: the values the cache
// holds are bf16 values either way, so the narrower pages change no bit, only the memory).
//
// Thread-safety: none; the pool's thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace graft {

class PoolMemory {
 public:
  virtual ~PoolMemory() = default;
  virtual float* Allocate(int64_t n) = 0;  // n floats, zeroed; nullptr when memory is exhausted
  virtual void Free(float* block) = 0;
  virtual void Copy(const float* src, float* dst, int64_t n) = 0;
  virtual void Zero(float* dst, int64_t n) = 0;
  virtual int kv_value_bytes() const { return 4; }
  // Bytes this memory can still hand out under a budget of its own (a device's --gpu-memory:
  // what weights, adapters and scratch left), from which the pools are sized by default
  // (engine/pool_plan.h); -1: no such budget (host memory: the pools keep fixed sizes).
  virtual int64_t budget_left() const { return -1; }
};

// Host memory up to a limit (default: the machine's physical memory, so a pool sized past it is
// refused with the pool's own error before anything is touched, never an exception or the OOM
// killer); an allocation the limit or the allocator refuses returns nullptr.
class HostPoolMemory final : public PoolMemory {
 public:
  explicit HostPoolMemory(int64_t limit_bytes = MachineBytes());
  static int64_t MachineBytes();
  float* Allocate(int64_t n) override;
  void Free(float* block) override;
  void Copy(const float* src, float* dst, int64_t n) override;
  void Zero(float* dst, int64_t n) override;

 private:
  std::vector<std::unique_ptr<float[]>> blocks_;
  std::vector<int64_t> sizes_;  // bytes of blocks_[i]
  int64_t limit_, used_ = 0;
};

}  // namespace graft

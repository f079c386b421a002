// CUDA LoRA deltas for the rows that select an adapter: the contract of Ops::LoraAdd.
//
// For each row r with slot s > 0 and each module of slot s on this projection:
//   t = r(x_r · Aᵀ) (rank values), then y_r[off + n] = r(y_r[off + n] + r(r(t · B_n) * scale)).
// Sums run in the CPU reference's 16-lane order. One block per row: a row reads only its own
// x and writes only its own y, so base rows (slot 0) are never touched and a row's bits never
// depend on which adapters its neighbours use. (SIMT for now; grouping rows by adapter onto
// tensor cores is the speed work of a later issue and must keep this contract.)
#pragma once

#include <cstdint>

#include "backend/cuda/device_weight.h"
#include "util/status.h"

namespace graft::cuda {

inline constexpr int kMaxLoraRank = 1024;

struct DevLoraModule {
  DevWeight a;             // [rank, K]
  DevWeight b;             // [N, rank]
  int rank = 0;
  float scale = 1.0f;
  int64_t row_offset = 0;  // first output column in y
};

struct LoraArgs {
  const float* x;                  // [m, k]
  int64_t m, k;
  const int32_t* row_slot;         // [m] device
  const DevLoraModule* modules;    // device array, grouped by slot
  const int32_t* slot_begin;       // [num_slots + 1] device: slot s owns modules [slot_begin[s], slot_begin[s+1])
  int num_slots;
  int max_rank;                    // the largest module rank (<= kMaxLoraRank), checked here
  float* y;                        // [m, y_stride]
  int64_t y_stride;
  bool bf16;
};

Status LoraAdd(const LoraArgs& a, void* stream);

}  // namespace graft::cuda

// CUDA LoRA deltas for the rows that select an adapter: the contract of Ops::LoraAdd.
//
// For each row r with slot s > 0 and each module of slot s on this projection:
//   t = r(x_r · Aᵀ) (rank values), then y_r[off + n] = r(y_r[off + n] + r(r(t · B_n) * scale)).
// Sums run in the CPU reference's 16-lane order, each by a half-warp whose lane l owns the
// reference's partial sum l (the chain over i = l, l + 16, ...), joined by shuffles in the
// reference's pairwise tree: the CPU's bits, with K spread over 16 lanes. Two launches, each
// over (output, row, module): t for every module, then the deltas. A row reads only its own x
// and writes only its own y, so base rows (slot 0) are never touched and a row's bits never
// depend on which adapters its neighbours use. The modules of one slot write disjoint columns
// (the slices of a fused projection). CudaOps uses this kernel only with fp32 activations and
// at most 8 rows of an adapter; with bf16 activations every adapter runs on the tensor cores
// (MatMulSplitK, MatMul, then LoraScatterAdd below, grouped by adapter): same contract.
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
  int max_modules;                 // the most modules any slot has
  int64_t max_out;                 // the most output columns (B rows) any module has
  float* scratch;                  // [m, max_modules, max_rank] device floats for t
};

Status LoraAdd(const LoraArgs& a, void* stream);

// The tensor-core form, for one adapter's rows (CudaOps gathers them): the products run as
// two projections (MatMul: bf16 WMMA when the factors are bf16), then
//   y[rows[t] * y_stride + row_offset + n] = r(y + r(u[t, n] * scale))  for t < m, n < cols.
// u [m, cols] and rows [m] on the device. Rows are distinct.
Status LoraScatterAdd(const float* u, int64_t m, int64_t cols, const int32_t* rows, float scale, int64_t row_offset,
                      float* y, int64_t y_stride, bool bf16, void* stream);

}  // namespace graft::cuda

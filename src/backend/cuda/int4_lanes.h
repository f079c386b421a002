// The device copy's order of int4 nibbles (DevWeight::int4_lanes): within each 32-column block
// of a row (four 32-bit words, 16 bytes), the nibbles are permuted so that the lane (g, t) of an
// m16n8k16 mma finds the eight weights it needs for two K16 steps in one word, t, already in the
// halves of the bf16x2 fragment registers:
//
//   column j = 16h + 8q + 2t + e of the block (h: which K16 step, q: b0 or b1, t: lane in its
//   group of four, e: low or high half of the register)  ->  word t, nibble 4e + 2h + q.
//
// So (word >> 4(2h + q)) & 0x000F000F puts the two nibbles of fragment b_q of step h in bits
// 0..3 and 16..19 — one shift and one mask per register instead of a shift, mask and move per
// weight. Only the position changes: values, scales and zero points are the checkpoint's.
// Plain C++ (host upload, tests) and CUDA (quant_weight.cuh, gemm_decode_w4.cu).
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define GRAFT_HOST_DEVICE __host__ __device__
#else
#define GRAFT_HOST_DEVICE
#endif

namespace graft::cuda {

constexpr int kInt4LaneBlock = 32;  // columns a permuted block; a row's columns must be a multiple

struct Int4LanePos {
  int word;    // 0..3 within the block
  int nibble;  // 0..7 within the word (bits 4·nibble .. 4·nibble + 3)
};

// Where column j (0..31) of a block lives.
GRAFT_HOST_DEVICE constexpr Int4LanePos Int4LaneOf(int j) {
  return Int4LanePos{(j / 2) % 4, 4 * (j % 2) + 2 * (j / 16) + (j / 8) % 2};
}

// Checkpoint words (eight nibbles each, lowest column first) -> lane order; `cols` % 32 == 0.
inline void Int4ToLaneOrder(const int32_t* words, int64_t rows, int64_t cols, int32_t* out) {
  for (int64_t b = 0; b < rows * cols / kInt4LaneBlock; ++b) {
    const uint32_t* in = reinterpret_cast<const uint32_t*>(words) + 4 * b;
    uint32_t o[4] = {0, 0, 0, 0};
    for (int j = 0; j < kInt4LaneBlock; ++j) {
      const uint32_t nib = (in[j / 8] >> (4 * (j % 8))) & 0xfu;
      const Int4LanePos p = Int4LaneOf(j);
      o[p.word] |= nib << (4 * p.nibble);
    }
    for (int i = 0; i < 4; ++i) out[4 * b + i] = static_cast<int32_t>(o[i]);
  }
}

}  // namespace graft::cuda

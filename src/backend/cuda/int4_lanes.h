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

// One block: in[w] holds columns 8w .. 8w+7 (lowest first), so byte t of in[w] is columns
// 8w + 2t (low nibble) and + 1 (high): they go to word t, nibbles w and 4 + w (Int4LaneOf).
inline void Int4BlockToLaneOrder(const uint32_t (&in)[4], uint32_t (&out)[4]) {
  for (int t = 0; t < 4; ++t) {
    uint32_t o = 0;
    for (int w = 0; w < 4; ++w) {
      const uint32_t byte = (in[w] >> (8 * t)) & 0xffu;
      o |= (byte & 0xfu) << (4 * w) | (byte >> 4) << (16 + 4 * w);
    }
    out[t] = o;
  }
}

// Checkpoint words (eight nibbles each, lowest column first) -> lane order, blocks [b0, b1) of
// a row-major tensor whose columns are a multiple of 32 (block b: words 4b .. 4b+3).
inline void Int4ToLaneOrder(const int32_t* words, int64_t b0, int64_t b1, int32_t* out) {
  for (int64_t b = b0; b < b1; ++b) {
    const uint32_t in[4] = {static_cast<uint32_t>(words[4 * b]), static_cast<uint32_t>(words[4 * b + 1]),
                            static_cast<uint32_t>(words[4 * b + 2]), static_cast<uint32_t>(words[4 * b + 3])};
    uint32_t o[4];
    Int4BlockToLaneOrder(in, o);
    for (int i = 0; i < 4; ++i) out[4 * b + i] = static_cast<int32_t>(o[i]);
  }
}

}  // namespace graft::cuda

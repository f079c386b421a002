// The device copy's order of int4 nibbles (DevWeight::int4_lanes): within each 128-column block
// of a row (sixteen 32-bit words, 64 bytes), the nibbles are permuted so that the lane (g, t) of
// an m16n8k16 mma finds the eight weights it needs for two K16 steps in one word, already in the
// halves of the bf16x2 fragment registers, and its four such words of the block side by side:
//
//   column j = 32b + 16h + 8q + 2t + e of the block (b: which 32-column step, h: which K16 step
//   of it, q: b0 or b1, t: lane in its group of four, e: low or high half of the register)
//   ->  word 4t + b, nibble 4e + 2h + q.
//
// So (word >> 4(2h + q)) & 0x000F000F puts the two nibbles of fragment b_q of step h in bits
// 0..3 and 16..19 — one shift and one mask per register instead of a shift, mask and move per
// weight — and a lane reads a row's 128 columns as one 16-byte load (words 4t .. 4t + 3), the
// four lanes of a group 64 contiguous bytes. Only the position changes: values, scales and zero
// points are the checkpoint's. Plain C++ (host upload, tests) and CUDA (quant_weight.cuh,
// gemm_decode_w4.cu).
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define GRAFT_HOST_DEVICE __host__ __device__
#else
#define GRAFT_HOST_DEVICE
#endif

namespace graft::cuda {

constexpr int kInt4LaneBlock = 128;  // columns a permuted block; a row's columns must be a multiple
constexpr int kInt4LaneWords = kInt4LaneBlock / 8;

struct Int4LanePos {
  int word;    // 0..15 within the block
  int nibble;  // 0..7 within the word (bits 4·nibble .. 4·nibble + 3)
};

// Where column j (0..127) of a block lives.
GRAFT_HOST_DEVICE constexpr Int4LanePos Int4LaneOf(int j) {
  const int b = j / 32, i = j % 32;
  return Int4LanePos{4 * ((i / 2) % 4) + b, 4 * (i % 2) + 2 * (i / 16) + (i / 8) % 2};
}

// One block: in[w] holds columns 8w .. 8w+7 (lowest first), so byte t of in[4b + w] is columns
// 32b + 8w + 2t (low nibble) and + 1 (high): they go to word 4t + b, nibbles w and 4 + w
// (Int4LaneOf).
inline void Int4BlockToLaneOrder(const uint32_t (&in)[kInt4LaneWords], uint32_t (&out)[kInt4LaneWords]) {
  for (int b = 0; b < 4; ++b) {
    for (int t = 0; t < 4; ++t) {
      uint32_t o = 0;
      for (int w = 0; w < 4; ++w) {
        const uint32_t byte = (in[4 * b + w] >> (8 * t)) & 0xffu;
        o |= (byte & 0xfu) << (4 * w) | (byte >> 4) << (16 + 4 * w);
      }
      out[4 * t + b] = o;
    }
  }
}

// Checkpoint words (eight nibbles each, lowest column first) -> lane order, blocks [b0, b1) of
// a row-major tensor whose columns are a multiple of 128 (block b: words 16b .. 16b + 15).
inline void Int4ToLaneOrder(const int32_t* words, int64_t b0, int64_t b1, int32_t* out) {
  for (int64_t b = b0; b < b1; ++b) {
    uint32_t in[kInt4LaneWords], o[kInt4LaneWords];
    for (int i = 0; i < kInt4LaneWords; ++i) in[i] = static_cast<uint32_t>(words[kInt4LaneWords * b + i]);
    Int4BlockToLaneOrder(in, o);
    for (int i = 0; i < kInt4LaneWords; ++i) out[kInt4LaneWords * b + i] = static_cast<int32_t>(o[i]);
  }
}

}  // namespace graft::cuda

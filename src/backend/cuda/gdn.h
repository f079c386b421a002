// CUDA Gated DeltaNet ops: the contracts of Ops::CausalConvSilu, Ops::GdnCore and
// Ops::GatedRmsNorm (backend/ops.h), on device pointers.
//
// GdnCore runs the chunk-consistent form of the CPU reference: the state S advances only at
// 64-token chunk ends, rows inside the open chunk use the chunk formula. A token's output
// therefore depends only on its own sequence, never on how the sequence is split into calls,
// and prefill and decode run the same arithmetic. Two forms, fixed per model by the activation
// mode (GdnTensorCoreForm), each with a token kernel (decode steps, pieces under 16 tokens) and
// chunk kernels of the same bits:
// - fp32 activations (and heads wider than kGdnTcMaxDk): the SIMT form. q and k L2-normalised
//   first; every product an fp32 fused multiply-add in the CPU reference's order (token by token:
//   one block per value head, one thread per value column; chunk-parallel, gdn_chunk.cu: the
//   coefficients of every chunk at once, then per chunk its products with S and outputs at once,
//   only the 64-step triangular recurrence in order). It agrees with the CPU within rounding.
// - bf16 activations: the tensor-core form (gdn_tc.cuh). The products with S, the chunk's
//   coefficient dots and the state update run as mma.sync on q and k's raw bf16 values (their
//   norms applied as fp32 factors after) and on S and the update's values split into three bf16
//   terms (24 significant bits, so fp32's precision); the triangular recurrence and the output
//   sums stay fp32 chains in ascending chunk row. The open chunk keeps raw keys and their inverse
//   norms (pkinv). Chunk kernels: gdn_tc_chunk.cu; token kernel: gdn_tc_tokens.cu.
// CausalConvSilu likewise has a token-by-token and a token-parallel kernel with equal bits.
#pragma once

#include <cstdint>

#include "backend/cuda/device_weight.h"
#include "util/status.h"

namespace graft::cuda {

inline constexpr int kGdnChunk = 64;  // must equal graft::kGdnChunk (backend/ops.h)
// From this many tokens on, CausalConvSilu and GdnCore take their token-parallel kernels.
inline constexpr int kGdnParallelMinTokens = 16;

// One GDN layer's state for one sequence, in device memory (fp32), as GdnState on the CPU.
struct DevGdnState {
  float* conv;   // [conv_dim, K-1]
  float* S;      // [Hv, dk, dv]
  float* pk;     // [kGdnChunk, Hv, dk] normalised keys (SIMT form); raw bf16 keys (tensor-core form)
  float* pvn;    // [kGdnChunk, Hv, dv]
  float* pgam;   // [kGdnChunk, Hv]
  float* pkinv;  // [kGdnChunk, Hv] the keys' inverse norms (tensor-core form; unused by the SIMT form)
  int pending;   // host-side: rows of the open chunk already processed; GdnCore advances it
};

// The widest key head the tensor-core form takes (its K steps live in registers).
inline constexpr int kGdnTcMaxDk = 128;
// Whether GdnCore runs the tensor-core form: bf16 activations and keys up to kGdnTcMaxDk wide.
// A model's layers keep one form for their whole life (the open chunk's keys are stored as the
// form needs them).
inline bool GdnTensorCoreForm(bool bf16, int dk) { return bf16 && dk <= kGdnTcMaxDk; }

// out [n, channels] = r(silu(r(Σ_j w[c, j] · X(t-(K-1)+j)))), X from conv_state then x (rows of
// x_stride); conv_state [channels, K-1] updated to the last K-1 inputs. K <= 8.
Status CausalConvSilu(const float* x, int64_t x_stride, int n, int channels, const DevWeight& w, float* conv_state,
                      bool bf16, float* out, void* stream);

// One sequence of a CausalConvSiluSeqs call: its rows [row0, row0 + n) of x and out, its state.
struct ConvSeq {
  int row0, n;
  float* conv_state;
};
// CausalConvSilu over `count` sequences in one launch (seqs a device array; one block column a
// sequence), each with exactly CausalConvSilu's token-kernel bits: for a decode step's one row
// per sequence and pieces under 16 tokens.
Status CausalConvSiluSeqs(const float* x, int64_t x_stride, const ConvSeq* seqs, int count, int channels,
                          const DevWeight& w, bool bf16, float* out, void* stream);

// CausalConvSilu's token-parallel kernels over `count` pieces (seqs a device array, each piece
// max_n tokens or fewer) in one launch each: every piece gets exactly the bits CausalConvSilu gives
// it alone, whatever its length (a step's question runs, several prompts' chunks).
Status CausalConvSiluPieces(const float* x, int64_t x_stride, const ConvSeq* seqs, int count, int max_n, int channels,
                            const DevWeight& w, bool bf16, float* out, void* stream);

struct GdnCoreArgs {
  const float* qkv;   // [n, conv_dim] post-conv: q [Hk*dk] | k [Hk*dk] | v [Hv*dv]
  const float* beta;  // [n, Hv]
  const float* g;     // [n, Hv]
  int n, hk, hv, dk, dv;  // dk, dv <= 256
  DevGdnState* state;
  bool bf16;
  float* out;         // [n, Hv, dv]
  // When set, the kernel reads the open chunk's row count from this device int instead of
  // state->pending (which it must equal): a captured CUDA graph then stays valid from one
  // decode step to the next, its launch parameters unchanged.
  const int32_t* pending_dev = nullptr;
  // Device scratch of GdnChunkScratchFloats(n, hk, hv, dk, dv) floats for the chunk-parallel kernel (from
  // 16 tokens on; without it GdnCore runs the token kernel).
  float* scratch = nullptr;
};
Status GdnCore(const GdnCoreArgs& a, void* stream);
// One sequence of a GdnCoreSeqs call: its rows (as GdnCoreArgs') and its state, state.pending
// the open chunk's rows before the call (read on the device: a captured graph stays valid when
// the array is restaged each step).
struct GdnSeq {
  const float* qkv;
  const float* beta;
  const float* g;
  float* out;
  int n;
  DevGdnState state;
  // With a GdnGateNorm: the sequence's rows of the in-projection (b, a, z), of the gated norm's
  // output [n, hv * dv], and of the gates computed (beta_out, g_out [n, hv]; beta and g unread).
  const float* in = nullptr;
  float* normed = nullptr;
  uint16_t* normed_b = nullptr;  // (fused) null, or where normed's values also go as bf16 (a twin)
  float* beta_out = nullptr;
  float* g_out = nullptr;
};
// Ops::GdnGatedCoreSeqs's gates and gated norm, fused into the token kernel (GdnCoreSeqs): each
// block computes its head's beta and g from the in-projection row (GdnGates' arithmetic, also
// stored) before the token and, after it, the gated norm of its head's output row (GatedRmsNorm's
// arithmetic on the values it stores) — the same bits as the three launches.
struct GdnGateNorm {
  int64_t stride, b_col, a_col, z_col;  // the in-projection's rows
  DevWeight a_log, dt_bias, norm;
  float eps;
};
// The token kernel over `count` sequences in one launch (one block per value head and
// sequence; seqs a device array): each sequence's rows get exactly GdnCore's token-kernel bits.
// For decode steps (a batch's one row per sequence) and pieces under 16 tokens — longer ones
// belong to GdnCore's chunk-parallel kernel. The caller advances each state's pending.
// fused: the gates and the gated norm too (GdnGateNorm; every sequence's in, normed, beta_out
// and g_out set).
Status GdnCoreSeqs(const GdnSeq* seqs, int count, int hk, int hv, int dk, int dv, bool bf16, void* stream,
                   const GdnGateNorm* fused = nullptr);
// The chunk-parallel kernel alone (GdnCore picks it from 16 tokens on); it leaves
// a.state->pending for the caller to advance. Needs GdnChunkSharedBytes(dk) of shared memory.
Status GdnCoreChunked(const GdnCoreArgs& a, void* stream);
inline constexpr int64_t kGdnMaxSharedBytes = 227 * 1024;  // Hopper's per-block dynamic shared memory
int64_t GdnChunkSharedBytes(int dk);
// Column groups (32 value columns each) a block of the chunk kernel takes: 2 where one group a
// block would need more blocks than the device has multiprocessors (each block walks every chunk
// of the call, so a second wave doubles the critical path; two groups share the staged rows)
// and two groups' shared memory fits; else 1. The bits are the same either way (tested).
int GdnChunkGroups(int hv, int dk, int dv);
// Scratch floats a chunk-parallel GdnCore of n tokens needs, either form.
int64_t GdnChunkScratchFloats(int64_t n, int hk, int hv, int dk, int dv);
// The tensor-core form's chunk kernels (gdn_tc_chunk.cu; GdnCore picks them from 16 tokens on in
// that form); they leave a.state->pending for the caller to advance.
Status GdnCoreTcChunked(const GdnCoreArgs& a, void* stream);
int64_t GdnTcChunkScratchFloats(int64_t n, int hk, int hv, int dk, int dv);
// One sequence of a GdnCoreTcChunkedSeqs call: GdnCoreTcChunked's arguments (a.scratch its own
// GdnTcChunkScratchFloats(a.n) floats, a.state and a.pending_dev unused), its state, and the
// open chunk's rows before the call.
struct GdnChunkSeq {
  GdnCoreArgs a;
  DevGdnState st;
  int pending;
};
// GdnCoreTcChunked for `count` sequences of one head shape, 16 tokens or more each, in one launch
// of each kernel (the sequence a grid dimension): each sequence's rows and state get exactly
// GdnCoreTcChunked's bits — a block computes what it would alone. For a step's several prefill
// pieces (a decision's question runs), whose short pieces alone would leave most of the device
// idle, launch after launch. seqs on the device, host the same array on the host (shapes, the
// longest sequence); the caller advances each state's pending.
Status GdnCoreTcChunkedSeqs(const GdnChunkSeq* seqs, const GdnChunkSeq* host, int count, void* stream);
// The tensor-core form's token kernel over `count` sequences (gdn_tc_tokens.cu): GdnCoreSeqs'
// contract (the caller advances each state's pending), and for one sequence GdnCore's.
Status GdnCoreTcSeqs(const GdnSeq* seqs, int count, int hk, int hv, int dk, int dv, void* stream,
                     const GdnGateNorm* fused);
Status GdnCoreTcTokens(const GdnCoreArgs& a, void* stream);

// Per (row, head): n = r(w * r(x * rsqrt(mean(x²) + eps))), out = r(n * silu(z)); out_bf16: null,
// or where out's values also go as bf16 (a twin).
Status GatedRmsNorm(const float* x, const float* z, int64_t z_stride, int64_t z_col, int n, int hv, int dv,
                    const DevWeight& w, float eps, bool bf16, float* out, void* stream,
                    uint16_t* out_bf16 = nullptr);

}  // namespace graft::cuda

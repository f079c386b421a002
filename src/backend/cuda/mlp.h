// The SwiGLU MLP's prefill on the GPU, the contract of Ops::SwiGluMlp (backend/ops.h) for more
// than kDecodeFormRows rows of bf16 activations against dense bf16 weights: x copied to bf16 once, the gate|up
// product and its activation in one wgmma pass that writes the activation as bf16
// (GemmWgmmaSwiGlu), the down projection reading that as it is (MatMulBf16). The same products
// and roundings as MatMul, SiluMul, MatMul — bit for bit (tested) — without the 2·inter fp32
// gate|up outputs, the fp32 activation and its bf16 copy going through memory.
#pragma once

#include <cstdint>

#include "backend/cuda/device_weight.h"
#include "util/status.h"

namespace graft::cuda {

// Whether SwiGluMlp takes these rows and weights: bf16 activations, more than kDecodeFormRows rows (matmul.h), both
// weights on MatMul's plain prefill form (dense bf16, aligned), gate_up [2 inter, hidden] and
// down [hidden', inter] with inter % 8 == 0 (the activation's rows are the down product's TMA rows).
bool SwiGluMlpFits(int64_t m, const DevWeight& gate_up, const DevWeight& down, bool bf16);
// Device scratch SwiGluMlp needs (16-byte aligned): x's bf16 copy and the bf16 activation.
int64_t SwiGluMlpScratchBytes(int64_t m, const DevWeight& gate_up);
// out[m, down.rows] (rows ldy apart, rounded to bf16) = down · r(r(silu(g)) · u), [g | u] = gate_up · x.
// xb_twin: null, or x's values as bf16 (16-byte aligned), read instead of x's copy.
Status SwiGluMlp(const float* x, int64_t m, const DevWeight& gate_up, const DevWeight& down, float* out, int64_t ldy,
                 void* stream, void* scratch, const uint16_t* xb_twin = nullptr);

}  // namespace graft::cuda

#include "backend/cuda/mlp.h"

#include <cstdint>

#include "backend/cuda/gemm_pipe.h"
#include "backend/cuda/gemm_wgmma.h"
#include "backend/cuda/matmul.h"

namespace graft::cuda {
namespace {

int64_t Aligned16(int64_t bytes) { return (bytes + 15) / 16 * 16; }

}  // namespace

bool SwiGluMlpFits(int64_t m, const DevWeight& gate_up, const DevWeight& down, bool bf16) {
  const int64_t inter = down.cols;
  return bf16 && ChooseMatMulForm(m, gate_up, true, true) == MatMulForm::kBf16Prefill &&
         ChooseMatMulForm(m, down, true, true) == MatMulForm::kBf16Prefill && gate_up.rows == 2 * inter &&
         inter % 8 == 0 && GemmWgmmaFits(m, gate_up.rows, gate_up.cols, gate_up.data, gate_up.data) &&
         GemmWgmmaFits(m, down.rows, inter, down.data, down.data);
}

int64_t SwiGluMlpScratchBytes(int64_t m, const DevWeight& gate_up) {
  return Aligned16(m * gate_up.cols * 2) + Aligned16(m * (gate_up.rows / 2) * 2);
}

Status SwiGluMlp(const float* x, int64_t m, const DevWeight& gate_up, const DevWeight& down, float* out, int64_t ldy,
                 void* stream, void* scratch, const uint16_t* xb_twin) {
  if (!SwiGluMlpFits(m, gate_up, down, true) || ldy < down.rows) {
    return InvalidArgument("cuda SwiGluMlp: needs more than 64 rows, dense bf16 weights on the prefill form, "
                           "gate_up's rows twice down's columns (a multiple of 8) and ldy >= down's rows");
  }
  if (scratch == nullptr || reinterpret_cast<uintptr_t>(scratch) % 16 != 0) {
    return InvalidArgument("cuda SwiGluMlp: needs SwiGluMlpScratchBytes of 16-byte aligned scratch");
  }
  const int64_t inter = down.cols;
  auto* act = reinterpret_cast<uint16_t*>(static_cast<unsigned char*>(scratch) + Aligned16(m * gate_up.cols * 2));
  const uint16_t* xb = UsableTwin(xb_twin);
  if (xb == nullptr) {
    auto* copy = static_cast<uint16_t*>(scratch);
    GRAFT_RETURN_IF_ERROR(ToBf16(x, m * gate_up.cols, copy, stream));
    xb = copy;
  }
  GRAFT_RETURN_IF_ERROR(GemmWgmmaSwiGlu(xb, m, static_cast<const uint16_t*>(gate_up.data), inter, gate_up.cols, act,
                                        inter, stream));
  return MatMulBf16(act, inter, m, down, out, ldy, /*round_output=*/true, /*split_k=*/false, stream);
}

}  // namespace graft::cuda

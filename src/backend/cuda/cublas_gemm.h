// cuBLAS's default GEMM, selectable (--gemm cublas) to measure what graft's batch invariance
// costs against the vendor library's fastest path on the same shapes (the issue-9 benchmark).
// Its bits for a row may depend on the batch (cuBLAS picks kernels, tiles and split-K by
// shape), so graft never takes it unless asked, and the batch-invariance and isolation promises
// do not hold while it is selected.
//
// libcublas.so.13 is loaded at run time (dlopen) only when it is selected: graft itself neither
// links nor needs it. A missing or unusable library is a named error at start-up.
#pragma once

#include <cstdint>
#include <memory>

#include "util/status.h"

namespace graft::cuda {

class CublasGemm {
 public:
  // Loads the library, creates a handle on `stream` (a cudaStream_t) with `workspace` (device
  // memory the caller owns, so that graph capture never allocates).
  static Result<std::unique_ptr<CublasGemm>> Create(void* stream, void* workspace, int64_t workspace_bytes);
  ~CublasGemm();
  CublasGemm(const CublasGemm&) = delete;
  CublasGemm& operator=(const CublasGemm&) = delete;

  // y[m, n] (fp32, rows ldy apart) = xb[m, k] · wᵀ (w [n, k]); bf16 operands, fp32 accumulation,
  // cuBLAS's default algorithm.
  Status Gemm(const uint16_t* xb, int64_t m, const uint16_t* w, int64_t n, int64_t k, float* y, int64_t ldy);

  struct Api;  // the entry points taken from the library

 private:
  CublasGemm() = default;
  void* lib_ = nullptr;
  void* handle_ = nullptr;
  std::unique_ptr<Api> api_;
};

}  // namespace graft::cuda

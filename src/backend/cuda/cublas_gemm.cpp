#include "backend/cuda/cublas_gemm.h"

#include <cublas_v2.h>
#include <dlfcn.h>

#include <climits>
#include <string>

#include <fmt/format.h>

namespace graft::cuda {

struct CublasGemm::Api {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetWorkspace_v2) set_workspace = nullptr;
  // (cublasGemmEx is overloaded in C++; this is the C entry point's type.)
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
};

namespace {
constexpr const char* kLibrary = "libcublas.so.13";

template <typename F>
Status Take(void* lib, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  if (*out == nullptr) return Unavailable(fmt::format("--gemm cublas: {} has no {}", kLibrary, name));
  return Status::Ok();
}

Status Check(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return Internal(fmt::format("cuBLAS {}: status {}", what, static_cast<int>(s)));
}
}  // namespace

Result<std::unique_ptr<CublasGemm>> CublasGemm::Create(void* stream, void* workspace, int64_t workspace_bytes) {
  std::unique_ptr<CublasGemm> g(new CublasGemm());
  g->lib_ = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
  if (g->lib_ == nullptr) {
    const char* why = dlerror();
    return Unavailable(fmt::format("--gemm cublas: cannot load {} ({}); put the CUDA toolkit's library folder on "
                                   "LD_LIBRARY_PATH, or use --gemm graft",
                                   kLibrary, why ? why : "not found"));
  }
  g->api_ = std::make_unique<Api>();
  Api& a = *g->api_;
  GRAFT_RETURN_IF_ERROR(Take(g->lib_, "cublasCreate_v2", &a.create));
  GRAFT_RETURN_IF_ERROR(Take(g->lib_, "cublasDestroy_v2", &a.destroy));
  GRAFT_RETURN_IF_ERROR(Take(g->lib_, "cublasSetStream_v2", &a.set_stream));
  GRAFT_RETURN_IF_ERROR(Take(g->lib_, "cublasSetWorkspace_v2", &a.set_workspace));
  GRAFT_RETURN_IF_ERROR(Take(g->lib_, "cublasGemmEx", &a.gemm_ex));
  cublasHandle_t h = nullptr;
  GRAFT_RETURN_IF_ERROR(Check(a.create(&h), "create"));
  g->handle_ = h;
  GRAFT_RETURN_IF_ERROR(Check(a.set_stream(h, static_cast<cudaStream_t>(stream)), "set stream"));
  GRAFT_RETURN_IF_ERROR(Check(a.set_workspace(h, workspace, static_cast<size_t>(workspace_bytes)), "set workspace"));
  return g;
}

CublasGemm::~CublasGemm() {
  if (handle_ && api_) api_->destroy(static_cast<cublasHandle_t>(handle_));
  if (lib_) dlclose(lib_);
}

Status CublasGemm::Gemm(const uint16_t* xb, int64_t m, const uint16_t* w, int64_t n, int64_t k, float* y, int64_t ldy) {
  if (m <= 0 || n <= 0 || k <= 0 || ldy < n || m > INT_MAX || n > INT_MAX || k > INT_MAX || ldy > INT_MAX) {
    return InvalidArgument("cuBLAS gemm: bad shape");
  }
  // Column-major view: yᵀ [n, m] = W [n, k] (stored as Wᵀ, k x n, ld k) · xᵀ [k, m] (ld k).
  const float alpha = 1.0f, beta = 0.0f;
  return Check(api_->gemm_ex(static_cast<cublasHandle_t>(handle_), CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n),
                             static_cast<int>(m), static_cast<int>(k), &alpha, w, CUDA_R_16BF, static_cast<int>(k), xb,
                             CUDA_R_16BF, static_cast<int>(k), &beta, y, CUDA_R_32F, static_cast<int>(ldy),
                             CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "GemmEx");
}

}  // namespace graft::cuda

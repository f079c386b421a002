#include "backend/cuda/cuda_check.h"

#include <string>

namespace graft {

Status CudaStatus(cudaError_t err, const char* call, const char* file, int line) {
  if (err == cudaSuccess) return Status::Ok();
  return Internal(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
                  cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

}  // namespace graft

// The status of the kernel launch this thread just made: CUDA's last error (a bad launch
// configuration, more shared memory than the device gives, ...) as a Status naming the op.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "util/status.h"

namespace graft::cuda {

// Ok, or Internal("cuda <op> launch: <CUDA's message>").
inline Status Launched(const char* op) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return Internal(std::string("cuda ") + op + " launch: " + cudaGetErrorString(err));
  return Status::Ok();
}

}  // namespace graft::cuda

// One check for every CUDA runtime call: turns an error into a Status that names the call,
// the file and the line. Host-only header (no logging inside .cu files).
#pragma once

#include <cuda_runtime_api.h>

#include "util/status.h"

namespace graft {

Status CudaStatus(cudaError_t err, const char* call, const char* file, int line);

}  // namespace graft

#define GRAFT_CUDA_CHECK(call) \
  do { \
    ::graft::Status _graft_cs = ::graft::CudaStatus((call), #call, __FILE__, __LINE__); \
    if (!_graft_cs.ok()) return _graft_cs; \
  } while (0)

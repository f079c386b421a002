// Shared by the CUDA tests: whether a device is present (the tests skip without one).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

namespace graft::test {

inline bool HaveGpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

}  // namespace graft::test

#define REQUIRE_GPU() \
  if (!::graft::test::HaveGpu()) GTEST_SKIP() << "no CUDA device"

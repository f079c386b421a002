// Shared by the CUDA tests: whether a device is present (the tests skip without one), and a
// backend with a test-sized budget and scratch arena.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <memory>

#include "backend/cuda/cuda_ops.h"

namespace graft::test {

inline bool HaveGpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// A CUDA backend (nullptr and a test failure when it cannot be made). It keeps device copies of
// weights by their address: keep every Weight it sees alive and distinct while it lives.
inline std::unique_ptr<CudaOps> MakeCuda(ActDtype act, int64_t budget = int64_t{4} << 30) {
  CudaOptions o;
  o.act = act;
  o.budget_bytes = budget;
  o.scratch_bytes = int64_t{256} << 20;
  o.poison_scratch = true;  // every Alloc NaN: an op that reads scratch it did not write fails the tests
  auto r = CudaOps::Create(o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : nullptr;
}

}  // namespace graft::test

#define REQUIRE_GPU() \
  if (!::graft::test::HaveGpu()) GTEST_SKIP() << "no CUDA device"

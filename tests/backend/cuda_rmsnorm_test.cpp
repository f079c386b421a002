// CUDA RMSNorm against the CPU reference over a sweep of shapes (runs on a GPU machine; skips
// where no device is present).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/rmsnorm.h"
#include "backend/cuda_test_util.h"
#include "util/bf16.h"

namespace graft {
namespace {

TEST(CudaRmsNorm, MatchesCpuReference) {
  REQUIRE_GPU();
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0, 2);
  for (int dim : {1, 7, 64, 256, 1000, 5120}) {
    for (int64_t rows : {1, 3, 130}) {
      for (bool bf16 : {false, true}) {
        for (NormKind kind : {NormKind::kPlainW, NormKind::kOnePlusW}) {
          std::vector<float> x(static_cast<size_t>(rows) * dim), w(static_cast<size_t>(dim));
          for (auto& v : x) v = bf16 ? RoundBf16(nd(rng)) : nd(rng);
          for (auto& v : w) v = RoundBf16(nd(rng) * 0.2f);
          Weight wt;
          wt.rows = dim;
          wt.cols = 1;
          wt.f32 = w;
          std::vector<float> ref(x.size()), got(x.size(), NAN);
          CpuOps(bf16 ? ActDtype::kBF16 : ActDtype::kF32, 2).RmsNorm(x.data(), wt, rows, dim, 1e-6f, kind, ref.data());
          float *dx, *dw, *dout;
          ASSERT_EQ(cudaMalloc(&dx, x.size() * 4), cudaSuccess);
          ASSERT_EQ(cudaMalloc(&dw, w.size() * 4), cudaSuccess);
          ASSERT_EQ(cudaMalloc(&dout, x.size() * 4), cudaSuccess);
          ASSERT_EQ(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
          ASSERT_EQ(cudaMemcpy(dw, w.data(), w.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
          ASSERT_EQ(cudaMemset(dout, 0xff, x.size() * 4), cudaSuccess);  // poison: NaN
          Status s = cuda::RmsNorm(dx, dw, rows, dim, 1e-6f,
                                   kind == NormKind::kPlainW ? cuda::NormKind::kPlainW : cuda::NormKind::kOnePlusW,
                                   bf16, dout, nullptr);
          ASSERT_TRUE(s.ok()) << s.ToString();
          ASSERT_EQ(cudaMemcpy(got.data(), dout, x.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
          cudaFree(dx);
          cudaFree(dw);
          cudaFree(dout);
          double num = 0, den = 0;
          for (size_t i = 0; i < got.size(); ++i) {
            ASSERT_TRUE(std::isfinite(got[i])) << "unwritten output at " << i;
            num += (got[i] - ref[i]) * (got[i] - ref[i]);
            den += ref[i] * ref[i];
          }
          // Reduction orders differ (CPU 16 lanes, GPU 256 threads): fp32 rounding only, plus
          // an occasional one-ulp bf16 flip where a value sits on a rounding boundary.
          EXPECT_LT(std::sqrt(num / den), bf16 ? 4e-3 : 1e-6) << "dim " << dim << " rows " << rows;
        }
      }
    }
  }
}

TEST(CudaRmsNorm, RowBitsIndependentOfRowCount) {
  REQUIRE_GPU();
  const int dim = 512, rows = 64;
  std::vector<float> x(rows * dim), w(dim, 0.1f);
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0, 1);
  for (auto& v : x) v = nd(rng);
  float *dx, *dw, *d_all, *d_one;
  ASSERT_EQ(cudaMalloc(&dx, x.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dw, dim * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_all, x.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_one, dim * 4), cudaSuccess);
  cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(dw, w.data(), dim * 4, cudaMemcpyHostToDevice);
  ASSERT_TRUE(cuda::RmsNorm(dx, dw, rows, dim, 1e-6f, cuda::NormKind::kOnePlusW, true, d_all, nullptr).ok());
  std::vector<float> all(x.size()), one(dim);
  cudaMemcpy(all.data(), d_all, all.size() * 4, cudaMemcpyDeviceToHost);
  for (int r : {0, 17, 63}) {
    ASSERT_TRUE(cuda::RmsNorm(dx + r * dim, dw, 1, dim, 1e-6f, cuda::NormKind::kOnePlusW, true, d_one, nullptr).ok());
    cudaMemcpy(one.data(), d_one, dim * 4, cudaMemcpyDeviceToHost);
    for (int i = 0; i < dim; ++i) ASSERT_EQ(one[i], all[r * dim + i]);
  }
  cudaFree(dx);
  cudaFree(dw);
  cudaFree(d_all);
  cudaFree(d_one);
}

// Rows of up to 256 columns (a head's q / k norm) run a warp a row: the block kernel's bits, which
// AddRmsNorm (always the block kernel) gives with y = 0 on bf16 values (h + 0 is h); in place too,
// for row counts that leave a block's last warps without a row.
TEST(CudaRmsNorm, WarpRowsAreTheBlockKernelsBits) {
  REQUIRE_GPU();
  std::mt19937 rng(12);
  std::normal_distribution<float> d(0.0f, 2.0f);
  for (int dim : {1, 7, 64, 100, 128, 256}) {
    for (int rows : {1, 9, 1000}) {
      for (auto kind : {cuda::NormKind::kPlainW, cuda::NormKind::kOnePlusW}) {
        const size_t n = static_cast<size_t>(rows) * dim;
        std::vector<float> x(n), w(static_cast<size_t>(dim)), zeros(n, 0.0f);
        for (auto& v : x) v = RoundBf16(d(rng));
        for (auto& v : w) v = RoundBf16(d(rng) * 0.1f);
        float *dx, *dw, *dz, *dh, *dref, *dgot;
        for (float** p : {&dx, &dz, &dh, &dref, &dgot}) ASSERT_EQ(cudaMalloc(p, n * 4), cudaSuccess);
        ASSERT_EQ(cudaMalloc(&dw, w.size() * 4), cudaSuccess);
        cudaMemcpy(dx, x.data(), n * 4, cudaMemcpyHostToDevice);
        cudaMemcpy(dh, x.data(), n * 4, cudaMemcpyHostToDevice);
        cudaMemcpy(dz, zeros.data(), n * 4, cudaMemcpyHostToDevice);
        cudaMemcpy(dw, w.data(), w.size() * 4, cudaMemcpyHostToDevice);
        ASSERT_TRUE(cuda::AddRmsNorm(dh, dz, dw, rows, dim, 1e-6f, kind, true, dref, nullptr).ok());
        ASSERT_TRUE(cuda::RmsNorm(dx, dw, rows, dim, 1e-6f, kind, true, dgot, nullptr).ok());
        ASSERT_TRUE(cuda::RmsNorm(dx, dw, rows, dim, 1e-6f, kind, true, dx, nullptr).ok());  // in place
        std::vector<float> ref(n), got(n), inplace(n);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        cudaMemcpy(ref.data(), dref, n * 4, cudaMemcpyDeviceToHost);
        cudaMemcpy(got.data(), dgot, n * 4, cudaMemcpyDeviceToHost);
        cudaMemcpy(inplace.data(), dx, n * 4, cudaMemcpyDeviceToHost);
        EXPECT_EQ(got, ref) << "dim " << dim << " rows " << rows;
        EXPECT_EQ(inplace, ref) << "in place, dim " << dim << " rows " << rows;
        for (float* p : {dx, dz, dh, dref, dgot, dw}) cudaFree(p);
      }
    }
  }
}

}  // namespace
}  // namespace graft

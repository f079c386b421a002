// CPU reference ops against direct double-precision formulas over a sweep of shapes.
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/cpu_math.h"
#include "util/bf16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace graft {
namespace {

std::vector<float> Random(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

Weight MakeWeight(int64_t rows, int64_t cols, const std::vector<float>& v, bool bf16) {
  Weight w;
  w.rows = rows;
  w.cols = cols;
  w.is_bf16 = bf16;
  if (bf16) for (float x : v) w.bf16.push_back(FloatToBf16(x));
  else w.f32 = v;
  return w;
}

double RelErr(const std::vector<float>& got, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (got[i] - ref[i]) * (got[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

TEST(CpuOps, MatMulMatchesDoubleOverShapes) {
  std::mt19937 rng(1);
  for (auto [m, n, k] : std::vector<std::tuple<int, int, int>>{{1, 1, 1}, {3, 17, 15}, {5, 33, 64}, {2, 7, 129}}) {
    for (bool bf16 : {false, true}) {
      auto x = Random(static_cast<size_t>(m) * k, rng), wv = Random(static_cast<size_t>(n) * k, rng);
      Weight w = MakeWeight(n, k, wv, bf16);
      std::vector<float> y(static_cast<size_t>(m) * n, NAN);
      CpuOps(ActDtype::kF32, 2).MatMul(x.data(), m, w, y.data(), true);
      std::vector<double> ref(y.size());
      for (int r = 0; r < m; ++r)
        for (int j = 0; j < n; ++j) {
          double s = 0;
          for (int i = 0; i < k; ++i) s += static_cast<double>(x[r * k + i]) * w.at(static_cast<int64_t>(j) * k + i);
          ref[r * n + j] = s;
        }
      EXPECT_LT(RelErr(y, ref), 1e-6) << m << "x" << n << "x" << k;
    }
  }
}

// The register-held dot product must keep the documented 16-lane order exactly: the matmul,
// the LoRA path (generic Dot16) and the CUDA kernels are all defined against that order.
TEST(CpuOps, VectorDotIsBitIdenticalToTheSixteenLaneOrder) {
  std::mt19937 rng(5);
  for (int k : {0, 1, 7, 15, 16, 17, 31, 64, 100, 255, 1000}) {
    auto a = Random(static_cast<size_t>(k), rng, 3.0f), b = Random(static_cast<size_t>(k), rng, 0.01f);
    const float generic = cpu::Dot16(a.data(), [&](int64_t i) { return b[i]; }, k);
    EXPECT_EQ(DotF32(a.data(), b.data(), k), generic) << "k=" << k;
  }
}

TEST(CpuOps, CopyBlocksSplitsInterleavedHeads) {
  // Rows of [q0 g0 q1 g1 q2 g2 | k] with 2-float halves: q = the q halves, other columns kept.
  const int rows = 3, hd = 2, heads = 3, width = 2 * hd * heads + 5;
  std::vector<float> src(static_cast<size_t>(rows) * width);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i);
  std::vector<float> q(static_cast<size_t>(rows) * (hd * heads + 1), -1.0f);
  CpuOps ops(ActDtype::kF32, 1);
  ops.CopyBlocks(src.data(), width, 0, 2 * hd, q.data(), hd * heads + 1, 1, hd, rows, hd, heads);
  for (int r = 0; r < rows; ++r) {
    EXPECT_EQ(q[static_cast<size_t>(r) * 7], -1.0f) << "column before dst_col untouched";
    for (int h = 0; h < heads; ++h) {
      for (int c = 0; c < hd; ++c) {
        EXPECT_EQ(q[static_cast<size_t>(r * 7 + 1 + h * hd + c)], src[static_cast<size_t>(r * width + h * 2 * hd + c)]);
      }
    }
  }
}

TEST(CpuOps, MatMulRowBitsIndependentOfBatch) {
  std::mt19937 rng(2);
  const int k = 77, n = 19;
  auto x = Random(8 * k, rng);
  Weight w = MakeWeight(n, k, Random(n * k, rng), true);
  CpuOps ops(ActDtype::kBF16, 3);
  std::vector<float> all(8 * n), one(n);
  ops.MatMul(x.data(), 8, w, all.data(), true);
  for (int r = 0; r < 8; ++r) {
    ops.MatMul(x.data() + r * k, 1, w, one.data(), true);
    for (int j = 0; j < n; ++j) EXPECT_EQ(one[j], all[r * n + j]);
  }
}

TEST(CpuOps, RmsNormBothConventions) {
  std::mt19937 rng(3);
  for (int dim : {1, 16, 100}) {
    auto x = Random(3 * dim, rng), wv = Random(dim, rng);
    Weight w = MakeWeight(dim, 1, wv, false);
    for (NormKind kind : {NormKind::kPlainW, NormKind::kOnePlusW}) {
      std::vector<float> out(x.size());
      CpuOps(ActDtype::kF32, 1).RmsNorm(x.data(), w, 3, dim, 1e-6f, kind, out.data());
      std::vector<double> ref(x.size());
      for (int r = 0; r < 3; ++r) {
        double ss = 0;
        for (int i = 0; i < dim; ++i) ss += static_cast<double>(x[r * dim + i]) * x[r * dim + i];
        const double inv = 1.0 / std::sqrt(ss / dim + 1e-6);
        for (int i = 0; i < dim; ++i)
          ref[r * dim + i] = x[r * dim + i] * inv * (kind == NormKind::kPlainW ? wv[i] : 1.0 + wv[i]);
      }
      EXPECT_LT(RelErr(out, ref), 1e-6);
    }
  }
}

// A norm (AddRmsNorm through the default Add then RmsNorm), SiluMul and SigmoidGateMul asked for a
// twin write their output's values as bf16 there too; the CPU reads none (Twins() is false) and its
// products ignore one.
TEST(CpuOps, OpsWriteTheTwinTheyAreGiven) {
  std::mt19937 rng(4);
  const int rows = 3, dim = 40;
  CpuOps ops(ActDtype::kBF16, 1);
  EXPECT_FALSE(ops.Twins());
  auto x = Random(rows * dim, rng), y = Random(rows * dim, rng), wv = Random(dim, rng);
  for (float& v : x) v = RoundBf16(v);
  for (float& v : y) v = RoundBf16(v);
  Weight w = MakeWeight(dim, 1, wv, false);
  std::vector<float> out(x.size()), out2(x.size()), out3(x.size()), h = x, h2 = x;
  std::vector<uint16_t> twin(x.size(), 0xffff), twin2(x.size(), 0xffff);
  ops.RmsNorm(x.data(), w, rows, dim, 1e-6f, NormKind::kOnePlusW, out.data(), twin.data());
  ops.AddRmsNorm(h.data(), y.data(), w, rows, dim, 1e-6f, NormKind::kPlainW, out2.data(), twin2.data());
  ops.AddRmsNorm(h2.data(), y.data(), w, rows, dim, 1e-6f, NormKind::kPlainW, out3.data());
  EXPECT_EQ(out2, out3) << "a twin changes nothing of the output";
  for (size_t e = 0; e < out.size(); ++e) {
    ASSERT_EQ(Bf16ToFloat(twin[e]), out[e]) << "RmsNorm's twin at " << e;
    ASSERT_EQ(Bf16ToFloat(twin2[e]), out2[e]) << "AddRmsNorm's twin at " << e;
  }
  std::vector<float> gu = Random(rows * 2 * dim, rng), act(rows * dim), g = out;
  std::vector<uint16_t> act_b(act.size()), g_b(g.size());
  ops.SiluMul(gu.data(), rows, dim, act.data(), act_b.data());
  ops.SigmoidGateMul(g.data(), gu.data(), 2 * dim, rows, dim, g_b.data());
  for (size_t e = 0; e < act.size(); ++e) {
    ASSERT_EQ(Bf16ToFloat(act_b[e]), act[e]) << "SiluMul's twin at " << e;
    ASSERT_EQ(Bf16ToFloat(g_b[e]), g[e]) << "SigmoidGateMul's twin at " << e;
  }
  Weight p = MakeWeight(8, dim, Random(8 * dim, rng), true);
  std::vector<float> a(rows * 8), b(rows * 8);
  ops.MatMul(out.data(), rows, p, a.data(), true);
  ops.MatMul(out.data(), rows, p, b.data(), true, twin.data());
  EXPECT_EQ(a, b);
}

TEST(CpuOps, RopeRotatesPairsAndPassesTheRest) {
  const int hd = 8, rot = 4;
  std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8};
  const int32_t pos = 3;
  const float inv_freq[2] = {1.0f, 1.0f / 10.0f};  // theta 100 over 4 rotated dims
  CpuOps(ActDtype::kF32, 1).Rope(x.data(), 1, 1, hd, rot, &pos, inv_freq, 1.0f);
  const double f0 = 1.0, f1 = 1.0 / std::pow(100.0, 2.0 / 4);
  const double c0 = std::cos(3 * f0), s0 = std::sin(3 * f0), c1 = std::cos(3 * f1), s1 = std::sin(3 * f1);
  EXPECT_NEAR(x[0], 1 * c0 - 3 * s0, 1e-5);
  EXPECT_NEAR(x[2], 3 * c0 + 1 * s0, 1e-5);
  EXPECT_NEAR(x[1], 2 * c1 - 4 * s1, 1e-5);
  EXPECT_NEAR(x[3], 4 * c1 + 2 * s1, 1e-5);
  for (int i = 4; i < 8; ++i) EXPECT_EQ(x[i], i + 1);
}

TEST(CpuOps, AttentionIsCausalGqaSoftmaxOverPages) {
  std::mt19937 rng(4);
  const int n = 5, nh = 4, nkv = 2, hd = 8;
  auto q = Random(n * nh * hd, rng), k = Random(n * nkv * hd, rng), v = Random(n * nkv * hd, rng);
  std::vector<int32_t> pos = {0, 1, 2, 3, 4};
  std::vector<float> out(n * nh * hd);
  // Paged: pages of 2 positions, the sequence's pages out of order in a pool of 3.
  const int P = 2;
  const std::vector<int32_t> table = {2, 0, 1};
  std::vector<float> kp(3 * P * nkv * hd, NAN), vp(kp.size(), NAN);
  for (int j = 0; j < n; ++j) {
    const int row = table[j / P] * P + j % P;
    std::copy_n(k.begin() + j * nkv * hd, nkv * hd, kp.begin() + row * nkv * hd);
    std::copy_n(v.begin() + j * nkv * hd, nkv * hd, vp.begin() + row * nkv * hd);
  }
  AttentionArgs a{q.data(), kp.data(), vp.data(), table.data(), P, pos.data(), n, nh, nkv, hd, 0.3f, out.data()};
  CpuOps(ActDtype::kF32, 2).Attention(a);
  std::vector<double> ref(out.size());
  for (int t = 0; t < n; ++t)
    for (int h = 0; h < nh; ++h) {
      const int g = h / (nh / nkv);
      std::vector<double> s(t + 1);
      double mx = -1e300, sum = 0;
      for (int j = 0; j <= t; ++j) {
        double d = 0;
        for (int i = 0; i < hd; ++i) d += q[(t * nh + h) * hd + i] * k[(j * nkv + g) * hd + i];
        s[j] = d * 0.3f;
        mx = std::max(mx, s[j]);
      }
      for (auto& e : s) sum += (e = std::exp(e - mx));
      for (int i = 0; i < hd; ++i) {
        double o = 0;
        for (int j = 0; j <= t; ++j) o += s[j] / sum * v[(j * nkv + g) * hd + i];
        ref[(t * nh + h) * hd + i] = o;
      }
    }
  EXPECT_LT(RelErr(out, ref), 1e-6);
}

TEST(CpuOps, Bf16ModeRoundsEveryOutput) {
  std::mt19937 rng(5);
  auto gu = Random(2 * 2 * 9, rng);
  std::vector<float> out(2 * 9);
  CpuOps(ActDtype::kBF16, 1).SiluMul(gu.data(), 2, 9, out.data());
  for (float v : out) EXPECT_EQ(v, RoundBf16(v));
}

}  // namespace
}  // namespace graft

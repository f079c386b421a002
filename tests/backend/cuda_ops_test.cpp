// The CUDA ops against the CPU reference (CpuOps) over sweeps of shapes, plus the batch- and
// chunk-invariance each kernel promises (bits, not tolerances). Runs on a GPU machine; skips
// where no device is present.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/attention.h"
#include "backend/cuda/attention_prep.h"
#include "backend/cuda/cublas_gemm.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/flash_wgmma.h"
#include "backend/cuda/gemm_pipe.h"
#include "backend/cuda/gdn.h"
#include "backend/cuda/lora.h"
#include "backend/cuda/matmul.h"
#include "backend/cuda/mlp.h"
#include "backend/cuda/rmsnorm.h"
#include "backend/cuda/topk.h"
#include "backend/cuda_test_util.h"

namespace graft {
namespace {

// Device copy of a host vector; Get() copies back (after the stream's work is done).
template <typename T>
struct Dev {
  T* p = nullptr;
  size_t n = 0;
  explicit Dev(const std::vector<T>& v) : n(v.size()) {
    EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)), cudaSuccess);
    if (n) {
      EXPECT_EQ(cudaMemcpy(p, v.data(), n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  explicit Dev(size_t count) : n(count) {
    EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemset(p, 0xff, std::max<size_t>(n, 1) * sizeof(T)), cudaSuccess);  // NaN poison
  }
  Dev(const Dev&) = delete;
  ~Dev() { cudaFree(p); }
  std::vector<T> Get() const {
    std::vector<T> v(n);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    if (n) {
      EXPECT_EQ(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    }
    return v;
  }
};

// KV pages on the device as cuda::Attention reads them: bf16 values in bf16 mode (the host
// values are bf16 values then: exact), fp32 otherwise (attention.h).
struct DevKv {
  std::unique_ptr<Dev<float>> f;
  std::unique_ptr<Dev<uint16_t>> b;
  DevKv(const std::vector<float>& v, bool bf16) {
    if (!bf16) {
      f = std::make_unique<Dev<float>>(v);
      return;
    }
    std::vector<uint16_t> bits(v.size());
    for (size_t i = 0; i < v.size(); ++i) bits[i] = FloatToBf16(v[i]);
    b = std::make_unique<Dev<uint16_t>>(bits);
  }
  const void* p() const { return f ? static_cast<const void*>(f->p) : static_cast<const void*>(b->p); }
};

// A host Weight and its device copy.
struct DevW {
  Weight host;
  std::unique_ptr<Dev<uint16_t>> b;
  std::unique_ptr<Dev<float>> f;
  cuda::DevWeight dev() const {
    return {host.is_bf16 ? static_cast<const void*>(b->p) : static_cast<const void*>(f->p), host.rows, host.cols,
            host.is_bf16};
  }
};

std::vector<float> Random(size_t n, std::mt19937& rng, float scale = 1.0f, bool bf16_values = true) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = bf16_values ? RoundBf16(d(rng)) : d(rng);
  return v;
}

std::unique_ptr<DevW> MakeW(int64_t rows, int64_t cols, std::mt19937& rng, bool bf16, float scale = 0.1f) {
  auto w = std::make_unique<DevW>();
  w->host.rows = rows;
  w->host.cols = cols;
  w->host.is_bf16 = bf16;
  auto v = Random(static_cast<size_t>(rows * cols), rng, scale);
  if (bf16) {
    for (float x : v) w->host.bf16.push_back(FloatToBf16(x));
    w->b = std::make_unique<Dev<uint16_t>>(w->host.bf16);
  } else {
    w->host.f32 = v;
    w->f = std::make_unique<Dev<float>>(w->host.f32);
  }
  return w;
}

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// ‖got − ref‖ / ‖ref‖, and every value written.
double RelErr(const std::vector<float>& got, const std::vector<float>& ref) {
  EXPECT_EQ(got.size(), ref.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(got[i])) {
      ADD_FAILURE() << "unwritten or non-finite output at " << i;
      return 1e30;
    }
    num += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// bf16 mode: fp32 reduction-order differences, plus an occasional one-ulp bf16 flip.
double Bound(bool bf16) { return bf16 ? 6e-3 : 2e-6; }
ActDtype Act(bool bf16) { return bf16 ? ActDtype::kBF16 : ActDtype::kF32; }

// cuda::MatMul with the scratch it asks for (the prefill form's bf16 copy of x); y's rows N apart.
Status MatMulScratched(const float* x, int64_t m, const cuda::DevWeight& w, float* y, bool bf16) {
  Dev<uint8_t> scratch(static_cast<size_t>(cuda::MatMulScratchBytes(m, w, bf16)));
  return cuda::MatMul(x, m, w, y, w.rows, true, bf16, nullptr, scratch.n ? scratch.p : nullptr);
}

TEST(CudaOps, ElementwiseMatchCpu) {
  REQUIRE_GPU();
  std::mt19937 rng(1);
  for (bool bf16 : {false, true}) {
    CpuOps cpu(Act(bf16), 2);
    for (int n : {1, 5, 130}) {
      // Embed
      auto table = MakeW(50, 24, rng, true, 1.0f);
      std::vector<int32_t> ids(static_cast<size_t>(n));
      for (auto& i : ids) i = static_cast<int32_t>(rng() % 50);
      Dev<int32_t> d_ids(ids);
      std::vector<float> ref(static_cast<size_t>(n) * 24);
      cpu.Embed(table->host, ids.data(), n, ref.data());
      Dev<float> d_out(ref.size());
      ASSERT_TRUE(cuda::Embed(table->dev(), d_ids.p, n, bf16, d_out.p, nullptr).ok());
      EXPECT_EQ(d_out.Get(), ref) << "Embed is a copy (and a rounding): bit for bit";
      // SiluMul
      const int inter = 37;
      auto gu = Random(static_cast<size_t>(n) * 2 * inter, rng, 2.0f, bf16);
      std::vector<float> act(static_cast<size_t>(n) * inter);
      cpu.SiluMul(gu.data(), n, inter, act.data());
      Dev<float> d_gu(gu), d_act(act.size());
      ASSERT_TRUE(cuda::SiluMul(d_gu.p, n, inter, bf16, d_act.p, nullptr).ok());
      EXPECT_LT(RelErr(d_act.Get(), act), Bound(bf16)) << "SiluMul n=" << n;
      // Add
      auto x = Random(static_cast<size_t>(n) * 40, rng, 1.0f, bf16), y = Random(x.size(), rng, 1.0f, bf16);
      Dev<float> d_x(x), d_y(y);
      cpu.Add(x.data(), y.data(), static_cast<int64_t>(x.size()));
      ASSERT_TRUE(cuda::Add(d_x.p, d_y.p, static_cast<int64_t>(x.size()), bf16, nullptr).ok());
      EXPECT_EQ(d_x.Get(), x) << "Add: one rounding, bit for bit";
      // SigmoidGateMul
      auto a = Random(static_cast<size_t>(n) * 16, rng, 1.0f, bf16), gate = Random(static_cast<size_t>(n) * 48, rng);
      Dev<float> d_a(a), d_gate(gate);
      cpu.SigmoidGateMul(a.data(), gate.data() + 8, 48, n, 16);
      ASSERT_TRUE(cuda::SigmoidGateMul(d_a.p, d_gate.p + 8, 48, n, 16, bf16, nullptr).ok());
      EXPECT_LT(RelErr(d_a.Get(), a), Bound(bf16)) << "SigmoidGateMul n=" << n;
      // Rope: partial rotation (16 of 64 dims) and full, positions up to 40000.
      for (int rot : {16, 64}) {
        const int heads = 3, hd = 64;
        auto q = Random(static_cast<size_t>(n) * heads * hd, rng, 1.0f, bf16);
        std::vector<int32_t> pos(static_cast<size_t>(n));
        for (auto& p : pos) p = static_cast<int32_t>(rng() % 40000);
        std::vector<float> inv(static_cast<size_t>(rot / 2));
        for (int i = 0; i < rot / 2; ++i) inv[i] = std::pow(1e6f, -2.0f * i / rot);
        Dev<float> d_q(q), d_inv(inv);
        Dev<int32_t> d_pos(pos);
        cpu.Rope(q.data(), n, heads, hd, rot, pos.data(), inv.data(), 1.0f);
        ASSERT_TRUE(cuda::Rope(d_q.p, n, heads, hd, rot, d_pos.p, d_inv.p, 1.0f, bf16, nullptr).ok());
        EXPECT_LT(RelErr(d_q.Get(), q), bf16 ? Bound(true) : 1e-5) << "Rope rot=" << rot;
      }
      // GdnGates
      const int hv = 6, stride = 20;
      auto in = Random(static_cast<size_t>(n) * stride, rng, 2.0f, bf16);
      auto a_log = MakeW(hv, 1, rng, false, 1.0f), dt = MakeW(hv, 1, rng, false, 1.0f);
      std::vector<float> beta(static_cast<size_t>(n) * hv), g(beta.size());
      cpu.GdnGates(in.data(), stride, 4, 12, n, hv, a_log->host, dt->host, beta.data(), g.data());
      Dev<float> d_in(in), d_beta(beta.size()), d_g(g.size());
      ASSERT_TRUE(cuda::GdnGates(d_in.p, stride, 4, 12, n, hv, a_log->dev(), dt->dev(), bf16, d_beta.p, d_g.p, nullptr).ok());
      EXPECT_LT(RelErr(d_beta.Get(), beta), Bound(bf16));
      EXPECT_LT(RelErr(d_g.Get(), g), 1e-5);
    }
  }
}

TEST(CudaOps, CopyBlocksMatchesBlockByBlockCopies) {
  REQUIRE_GPU();
  std::mt19937 rng(21);
  CpuOps cpu(ActDtype::kF32, 1);
  // {rows, cols, count, src_col, src_step, dst_col, dst_step}: 16-byte moves (all multiples of
  // 4) and single floats (odd offsets), one row (decode) and many.
  const int shapes[][7] = {{1, 256, 24, 0, 512, 0, 256}, {37, 256, 24, 256, 512, 0, 256},
                           {5, 3, 4, 1, 7, 2, 3}, {130, 8, 3, 4, 12, 4, 8}};
  for (const auto& sh : shapes) {
    const int rows = sh[0], cols = sh[1], count = sh[2], src_col = sh[3], src_step = sh[4], dst_col = sh[5],
              dst_step = sh[6];
    const int64_t src_stride = src_col + int64_t{count} * src_step + 4, dst_stride = dst_col + int64_t{count} * dst_step + 4;
    auto src = Random(static_cast<size_t>(rows * src_stride), rng);
    std::vector<float> want = Random(static_cast<size_t>(rows * dst_stride), rng);
    Dev<float> d_src(src), d_dst(want);
    for (int b = 0; b < count; ++b) {
      cpu.CopyBlock(src.data(), src_stride, src_col + b * src_step, want.data(), dst_stride, dst_col + b * dst_step,
                    rows, cols);
    }
    ASSERT_TRUE(cuda::CopyBlocks(d_src.p, src_stride, src_col, src_step, d_dst.p, dst_stride, dst_col, dst_step, rows,
                                 cols, count, nullptr).ok());
    EXPECT_EQ(d_dst.Get(), want) << "rows=" << rows << " cols=" << cols << " count=" << count
                                 << ": the copied blocks and nothing else";
  }
  EXPECT_FALSE(cuda::CopyBlocks(nullptr, 4, 0, 1, nullptr, 4, 0, 1, 1, 1, -1, nullptr).ok()) << "negative count";
}

TEST(CudaOps, AddRmsNormIsTheAddThenTheNormBitForBit) {
  REQUIRE_GPU();
  std::mt19937 rng(5);
  for (int dim : {7, 1000, 5120}) {
    for (bool bf16 : {false, true}) {
      const int rows = 9;
      auto h = Random(static_cast<size_t>(rows) * dim, rng, 4.0f, bf16), y = Random(h.size(), rng, 1.0f, bf16);
      auto w = Random(static_cast<size_t>(dim), rng, 0.2f);
      Dev<float> d_h1(h), d_h2(h), d_y(y), d_w(w), d_out1(h.size()), d_out2(h.size());
      ASSERT_TRUE(cuda::Add(d_h1.p, d_y.p, static_cast<int64_t>(h.size()), bf16, nullptr).ok());
      ASSERT_TRUE(cuda::RmsNorm(d_h1.p, d_w.p, rows, dim, 1e-6f, cuda::NormKind::kOnePlusW, bf16, d_out1.p, nullptr).ok());
      ASSERT_TRUE(cuda::AddRmsNorm(d_h2.p, d_y.p, d_w.p, rows, dim, 1e-6f, cuda::NormKind::kOnePlusW, bf16, d_out2.p,
                                   nullptr).ok());
      EXPECT_EQ(d_h2.Get(), d_h1.Get()) << "the residual stream, dim " << dim;
      EXPECT_EQ(d_out2.Get(), d_out1.Get()) << "the normed rows, dim " << dim;
      const Status s = cuda::AddRmsNorm(d_h2.p, d_y.p, d_w.p, rows, dim, 1e-6f, cuda::NormKind::kOnePlusW, bf16,
                                        d_h2.p, nullptr);
      EXPECT_FALSE(s.ok()) << "out aliasing h is refused";
      EXPECT_NE(s.message().find("aliases"), std::string::npos) << s.ToString();
    }
  }
}

// A norm's output x [m, k] (bf16 values) and its twin, on the device.
struct NormedRows {
  Dev<float> x;
  Dev<uint16_t> twin;
  NormedRows(int m, int k, std::mt19937& rng) : x(static_cast<size_t>(m) * k), twin(static_cast<size_t>(m) * k) {
    Dev<float> h(Random(static_cast<size_t>(m) * k, rng, 2.0f, true)), nw(Random(static_cast<size_t>(k), rng, 0.2f));
    EXPECT_TRUE(cuda::RmsNorm(h.p, nw.p, m, k, 1e-6f, cuda::NormKind::kOnePlusW, true, x.p, nullptr, twin.p).ok());
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
};

// Twins (backend/ops.h): a norm's bf16 copy of its output is that output's values, and a product
// or the fused MLP reading it gives the bits it gives on the output itself (its own ToBf16 copy).
TEST(CudaOps, TwinsAreTheNormsOutputAndGiveTheProductsTheirBits) {
  REQUIRE_GPU();
  std::mt19937 rng(49);
  for (int dim : {96, 1000, 5120}) {  // the warp-row kernel, then the block kernel (cached, and past it)
    SCOPED_TRACE(::testing::Message() << "dim " << dim);
    const int rows = 9;
    auto h = Random(static_cast<size_t>(rows) * dim, rng, 4.0f, true), y = Random(h.size(), rng, 1.0f, true);
    auto w = Random(static_cast<size_t>(dim), rng, 0.2f);
    Dev<float> d_h1(h), d_h2(h), d_y(y), d_w(w), d_out1(h.size()), d_out2(h.size()), d_out3(h.size());
    Dev<uint16_t> twin2(h.size()), twin3(h.size());
    ASSERT_TRUE(cuda::AddRmsNorm(d_h1.p, d_y.p, d_w.p, rows, dim, 1e-6f, cuda::NormKind::kOnePlusW, true, d_out1.p,
                                 nullptr).ok());
    ASSERT_TRUE(cuda::AddRmsNorm(d_h2.p, d_y.p, d_w.p, rows, dim, 1e-6f, cuda::NormKind::kOnePlusW, true, d_out2.p,
                                 nullptr, twin2.p).ok());
    ASSERT_TRUE(cuda::RmsNorm(d_h2.p, d_w.p, rows, dim, 1e-6f, cuda::NormKind::kPlainW, true, d_out3.p, nullptr,
                              twin3.p).ok());
    EXPECT_EQ(d_out2.Get(), d_out1.Get()) << "a twin changes nothing of the norm's own output";
    const auto o2 = d_out2.Get(), o3 = d_out3.Get();
    const auto t2 = twin2.Get(), t3 = twin3.Get();
    for (size_t e = 0; e < o2.size(); ++e) {
      ASSERT_EQ(t2[e], FloatToBf16(o2[e])) << "AddRmsNorm's twin at " << e;
      ASSERT_EQ(Bf16ToFloat(t2[e]), o2[e]) << "bf16 values: the twin is exact at " << e;
      ASSERT_EQ(t3[e], FloatToBf16(o3[e])) << "RmsNorm's twin at " << e;
    }
  }
  {  // the elementwise ops that feed products: SiluMul (a decode MLP's down product), SigmoidGateMul (o_proj)
    const int n = 7, inter = 300;
    const auto gu = Random(static_cast<size_t>(n) * 2 * inter, rng, 3.0f, true);
    Dev<float> d_gu(gu), act1(static_cast<size_t>(n) * inter), act2(static_cast<size_t>(n) * inter);
    Dev<uint16_t> act_b(static_cast<size_t>(n) * inter);
    ASSERT_TRUE(cuda::SiluMul(d_gu.p, n, inter, true, act1.p, nullptr).ok());
    ASSERT_TRUE(cuda::SiluMul(d_gu.p, n, inter, true, act2.p, nullptr, act_b.p).ok());
    const auto a1 = act1.Get(), a2 = act2.Get();
    const auto ab = act_b.Get();
    EXPECT_EQ(a2, a1);
    for (size_t e = 0; e < a2.size(); ++e) ASSERT_EQ(Bf16ToFloat(ab[e]), a2[e]) << "SiluMul's twin at " << e;
    const auto x = Random(static_cast<size_t>(n) * inter, rng, 2.0f, true);
    Dev<float> x1(x), x2(x);
    Dev<uint16_t> x_b(x.size());
    ASSERT_TRUE(cuda::SigmoidGateMul(x1.p, d_gu.p, 2 * inter, n, inter, true, nullptr).ok());
    ASSERT_TRUE(cuda::SigmoidGateMul(x2.p, d_gu.p, 2 * inter, n, inter, true, nullptr, x_b.p).ok());
    const auto g1 = x1.Get(), g2 = x2.Get();
    const auto gb = x_b.Get();
    EXPECT_EQ(g2, g1);
    for (size_t e = 0; e < g2.size(); ++e) ASSERT_EQ(Bf16ToFloat(gb[e]), g2[e]) << "SigmoidGateMul's twin at " << e;
  }
  // Products on a norm's output with and without its twin: the decode forms (1, 5, 32 rows), the
  // prefill form (33, 130, 300), split forms (few outputs, long K), and fp32 weights (no bf16 copy).
  for (auto [n, k] : std::vector<std::pair<int, int>>{{96, 264}, {520, 1024}, {16, 4096}}) {
    for (int m : {1, 5, 32, 33, 130, 300}) {
      for (bool wbf16 : {true, false}) {
        SCOPED_TRACE(::testing::Message() << m << " x " << k << " -> " << n << (wbf16 ? " bf16" : " fp32") << " weights");
        auto wt = MakeW(n, k, rng, wbf16);
        const NormedRows in(m, k, rng);
        Dev<float> ref(static_cast<size_t>(m) * n), got(static_cast<size_t>(m) * n);
        ASSERT_TRUE(MatMulScratched(in.x.p, m, wt->dev(), ref.p, true).ok());
        Dev<uint8_t> scratch(static_cast<size_t>(std::max<int64_t>(cuda::MatMulScratchBytes(m, wt->dev(), true), 16)));
        ASSERT_TRUE(cuda::MatMul(in.x.p, m, wt->dev(), got.p, n, true, true, nullptr, scratch.p, in.twin.p).ok());
        const auto r = ref.Get(), g = got.Get();
        for (size_t e = 0; e < r.size(); ++e) ASSERT_EQ(Bits(g[e]), Bits(r[e])) << "output " << e;
      }
    }
  }
  {  // the fused MLP
    const int m = 300, hidden = 264, inter = 1024, out_w = 520;
    auto gate_up = MakeW(2 * inter, hidden, rng, true);
    auto down = MakeW(out_w, inter, rng, true);
    const NormedRows in(m, hidden, rng);
    Dev<float> ref(static_cast<size_t>(m) * out_w), got(static_cast<size_t>(m) * out_w);
    Dev<uint8_t> s1(static_cast<size_t>(cuda::SwiGluMlpScratchBytes(m, gate_up->dev())));
    Dev<uint8_t> s2(static_cast<size_t>(cuda::SwiGluMlpScratchBytes(m, gate_up->dev())));
    ASSERT_TRUE(cuda::SwiGluMlp(in.x.p, m, gate_up->dev(), down->dev(), ref.p, out_w, nullptr, s1.p).ok());
    ASSERT_TRUE(cuda::SwiGluMlp(in.x.p, m, gate_up->dev(), down->dev(), got.p, out_w, nullptr, s2.p, in.twin.p).ok());
    const auto r = ref.Get(), g = got.Get();
    for (size_t e = 0; e < r.size(); ++e) ASSERT_EQ(Bits(g[e]), Bits(r[e])) << "fused MLP output " << e;
  }
}

TEST(CudaOps, MatMulMatchesCpuOverShapes) {
  REQUIRE_GPU();
  std::mt19937 rng(2);
  for (auto [n, k] : std::vector<std::pair<int, int>>{{1, 1}, {17, 15}, {64, 64}, {130, 257}, {256, 1024}, {1000, 96}, {96, 2064}}) {
    for (int m : {1, 3, 64, 65, 130}) {
      for (bool wbf16 : {true, false}) {
        for (bool bf16 : {true, false}) {
          auto w = MakeW(n, k, rng, wbf16);
          auto x = Random(static_cast<size_t>(m) * k, rng, 1.0f, bf16);
          std::vector<float> ref(static_cast<size_t>(m) * n);
          CpuOps(Act(bf16), 2).MatMul(x.data(), m, w->host, ref.data(), true);
          Dev<float> d_x(x), d_y(ref.size());
          ASSERT_TRUE(MatMulScratched(d_x.p, m, w->dev(), d_y.p, bf16).ok());
          const auto got = d_y.Get();
          if (wbf16 && bf16) {
            EXPECT_LT(RelErr(got, ref), Bound(true)) << m << "x" << n << "x" << k << " (tensor cores)";
          } else {
            EXPECT_EQ(got, ref) << m << "x" << n << "x" << k << " (SIMT: the CPU's order, bit for bit)";
          }
        }
      }
    }
  }
}

void RowBitsIndependentOfBatch(int n, int k, int m, std::mt19937& rng) {
  auto w = MakeW(n, k, rng, true);
  auto x = Random(static_cast<size_t>(m) * k, rng);
  Dev<float> d_x(x), d_all(static_cast<size_t>(m) * n);
  ASSERT_TRUE(MatMulScratched(d_x.p, m, w->dev(), d_all.p, true).ok());
  const auto all = d_all.Get();
  for (int r : {0, 1, 63, 64, 65, 127, 149}) {
    if (r >= m) continue;
    // The row first in a smaller batch: the decode form's shapes (one row, up to 16, 32 and 64
    // rows, each also for N >= 8192; 33 leaves rows of its last 16-row tile empty), the 64-row
    // tile (N or K not a multiple of 16), the large-tile kernel (100).
    for (int count : {1, 2, 9, 16, 17, 33, 40, 64, 100}) {
      const int c = std::min(count, m - r);
      Dev<float> d_part(static_cast<size_t>(c) * n);
      ASSERT_TRUE(MatMulScratched(d_x.p + static_cast<size_t>(r) * k, c, w->dev(), d_part.p, true).ok());
      const auto part = d_part.Get();
      for (int j = 0; j < n; ++j) ASSERT_EQ(part[j], all[static_cast<size_t>(r) * n + j]) << "row " << r << " col " << j;
    }
  }
  // Neighbours' values do not matter either: change every other row.
  auto x2 = x;
  for (int r = 1; r < m; r += 2)
    for (int i = 0; i < k; ++i) x2[static_cast<size_t>(r) * k + i] = RoundBf16(x2[static_cast<size_t>(r) * k + i] * 3);
  Dev<float> d_x2(x2), d_all2(static_cast<size_t>(m) * n);
  ASSERT_TRUE(MatMulScratched(d_x2.p, m, w->dev(), d_all2.p, true).ok());
  const auto all2 = d_all2.Get();
  for (int r = 0; r < m; r += 2)
    for (int j = 0; j < n; ++j) ASSERT_EQ(all2[static_cast<size_t>(r) * n + j], all[static_cast<size_t>(r) * n + j]);
}

// (N <= 256 with N % 8 == 0 and K past 1024 — 208 x 4112, 96 x 5120 — run split along K at
// every row count: the same slices in both forms.)
// A row's bits whatever the batch: small batches and large ones run different tensor-core
// kernels (the decode form for up to 64 rows — one to eight warps a block sharing x, by m and N —
// when N % 8 == 0 and K % 16 == 0, 64- and
// 128-row tiles), which must sum each output in the same K order.
TEST(CudaOps, MatMulRowBitsIndependentOfBatch) {
  REQUIRE_GPU();
  std::mt19937 rng(3);
  for (auto [n, k, m] : std::vector<std::array<int, 3>>{{200, 320, 150}, {300, 72, 200}, {130, 4104, 257}, {64, 70, 129},
                                                                        {208, 4112, 150}, {96, 1024, 70}, {96, 5120, 70},
                                                                        {8200, 1040, 70}}) {
    SCOPED_TRACE(::testing::Message() << n << "x" << k << " m " << m);
    RowBitsIndependentOfBatch(n, k, m, rng);
  }
}

// The prefill form over many tiles (more row tiles than one group of its visiting order, a
// partial last group, N and K not multiples of its tiles), in both tile shapes (128 x 128, and
// 128 x 256 once there are two waves of those): every output written and close to the CPU's,
// each row the bits it has alone (the decode form when K % 16 == 0, else the 64-row WMMA tile);
// and no scratch is a named error.
TEST(CudaOps, PrefillFormCoversEveryTileAndKeepsRowBits) {
  REQUIRE_GPU();
  std::mt19937 rng(23);
  for (auto [m, n, k] : std::vector<std::array<int, 3>>{{1100, 520, 264}, {2100, 4008, 80}}) {
    SCOPED_TRACE(::testing::Message() << m << "x" << n << "x" << k);
    auto w = MakeW(n, k, rng, true);
    auto x = Random(static_cast<size_t>(m) * k, rng);
    ASSERT_GT(cuda::MatMulScratchBytes(m, w->dev(), true), 0);
    EXPECT_EQ(cuda::MatMulScratchBytes(m, w->dev(), false), 0) << "fp32 activations take the SIMT kernels";
    Dev<float> d_x(x), d_y(static_cast<size_t>(m) * n);
    ASSERT_TRUE(MatMulScratched(d_x.p, m, w->dev(), d_y.p, true).ok());
    const auto all = d_y.Get();
    std::vector<float> ref(all.size());
    CpuOps(ActDtype::kBF16, 8).MatMul(x.data(), m, w->host, ref.data(), true);
    EXPECT_LT(RelErr(all, ref), Bound(true));
    for (int r : {0, 127, 128, 1023, 1024, m - 1}) {
      Dev<float> d_one(static_cast<size_t>(n));
      ASSERT_TRUE(MatMulScratched(d_x.p + static_cast<size_t>(r) * k, 1, w->dev(), d_one.p, true).ok());
      const auto one = d_one.Get();
      for (int j = 0; j < n; ++j) ASSERT_EQ(one[j], all[static_cast<size_t>(r) * n + j]) << "row " << r << " col " << j;
    }
    const Status missing = cuda::MatMul(d_x.p, m, w->dev(), d_y.p, n, true, true, nullptr, nullptr);
    EXPECT_FALSE(missing.ok());
    EXPECT_NE(missing.message().find("scratch"), std::string::npos) << missing.message();
  }
}

// The fused MLP (cuda/mlp.h) against MatMul, SiluMul, MatMul on the device: the same bits, a row
// alone through the unfused decode forms too; shapes it does not take are told apart by
// SwiGluMlpFits and refused by name.
TEST(CudaOps, SwiGluMlpIsTheThreeOpsBitForBit) {
  REQUIRE_GPU();
  std::mt19937 rng(46);
  for (auto [m, hidden, inter, out_w] : std::vector<std::array<int, 4>>{
           {65, 96, 200, 96}, {300, 264, 1024, 520}, {1100, 128, 136, 128}, {129, 72, 8, 80}}) {
    SCOPED_TRACE(::testing::Message() << m << " rows, " << hidden << " -> " << inter << " -> " << out_w);
    auto gate_up = MakeW(2 * inter, hidden, rng, true);
    auto down = MakeW(out_w, inter, rng, true);
    ASSERT_TRUE(cuda::SwiGluMlpFits(m, gate_up->dev(), down->dev(), true));
    const auto x = Random(static_cast<size_t>(m) * hidden, rng);
    Dev<float> d_x(x), gu(static_cast<size_t>(m) * 2 * inter), act(static_cast<size_t>(m) * inter);
    Dev<float> ref(static_cast<size_t>(m) * out_w), got(static_cast<size_t>(m) * out_w);
    ASSERT_TRUE(MatMulScratched(d_x.p, m, gate_up->dev(), gu.p, true).ok());
    ASSERT_TRUE(cuda::SiluMul(gu.p, m, inter, true, act.p, nullptr).ok());
    ASSERT_TRUE(MatMulScratched(act.p, m, down->dev(), ref.p, true).ok());
    Dev<uint8_t> scratch(static_cast<size_t>(cuda::SwiGluMlpScratchBytes(m, gate_up->dev())));
    ASSERT_TRUE(cuda::SwiGluMlp(d_x.p, m, gate_up->dev(), down->dev(), got.p, out_w, nullptr, scratch.p).ok());
    const auto r = ref.Get(), g = got.Get();
    for (size_t e = 0; e < r.size(); ++e) {
      ASSERT_FALSE(std::isnan(g[e])) << "unwritten output " << e;
      ASSERT_EQ(Bits(g[e]), Bits(r[e])) << "output " << e << ": " << g[e] << " vs " << r[e];
    }
    // A row alone runs the decode forms (MatMul, SiluMul, MatMul): its bits inside the fused batch.
    const int row = m - 1;
    Dev<float> gu1(static_cast<size_t>(2 * inter)), act1(static_cast<size_t>(inter)), one(static_cast<size_t>(out_w));
    ASSERT_TRUE(MatMulScratched(d_x.p + static_cast<size_t>(row) * hidden, 1, gate_up->dev(), gu1.p, true).ok());
    ASSERT_TRUE(cuda::SiluMul(gu1.p, 1, inter, true, act1.p, nullptr).ok());
    ASSERT_TRUE(MatMulScratched(act1.p, 1, down->dev(), one.p, true).ok());
    const auto o = one.Get();
    for (int j = 0; j < out_w; ++j) ASSERT_EQ(Bits(o[j]), Bits(g[static_cast<size_t>(row) * out_w + j])) << "col " << j;
  }
  std::mt19937 rng2(47);
  auto gate_up = MakeW(2 * 64, 96, rng2, true), down = MakeW(96, 64, rng2, true), odd_down = MakeW(96, 60, rng2, true);
  auto gate_up_f32 = MakeW(2 * 64, 96, rng2, false);
  EXPECT_FALSE(cuda::SwiGluMlpFits(cuda::kDecodeFormRows, gate_up->dev(), down->dev(), true)) << "the decode forms' rows";
  EXPECT_FALSE(cuda::SwiGluMlpFits(200, gate_up->dev(), down->dev(), false)) << "fp32 activations";
  EXPECT_FALSE(cuda::SwiGluMlpFits(200, gate_up_f32->dev(), down->dev(), true)) << "fp32 weights";
  EXPECT_FALSE(cuda::SwiGluMlpFits(200, gate_up->dev(), odd_down->dev(), true)) << "gate_up is not 2 x down's K";
  Dev<float> x(size_t{200} * 96), y(size_t{200} * 96);
  Dev<uint8_t> scratch(static_cast<size_t>(cuda::SwiGluMlpScratchBytes(200, gate_up->dev())));
  const Status bad = cuda::SwiGluMlp(x.p, 200, gate_up->dev(), odd_down->dev(), y.p, 96, nullptr, scratch.p);
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("SwiGluMlp"), std::string::npos) << bad.message();
  const Status none = cuda::SwiGluMlp(x.p, 200, gate_up->dev(), down->dev(), y.p, 96, nullptr, nullptr);
  EXPECT_FALSE(none.ok());
  EXPECT_NE(none.message().find("scratch"), std::string::npos) << none.message();
}

// --gemm cublas (the yardstick for what invariance costs): cuBLAS's product of the same bf16
// operands is the CPU's fp32 product up to summation order, rows ldy apart, nothing else written.
TEST(CudaOps, CublasGemmIsTheSameProductUpToOrder) {
  REQUIRE_GPU();
  std::mt19937 rng(29);
  const int m = 300, n = 200, k = 136, ldy = 210;
  auto w = MakeW(n, k, rng, true);
  auto x = Random(static_cast<size_t>(m) * k, rng);
  Dev<uint8_t> workspace(size_t{4} << 20);
  auto g = cuda::CublasGemm::Create(nullptr, workspace.p, static_cast<int64_t>(workspace.n));
  ASSERT_TRUE(g.ok()) << g.status().message();
  Dev<float> d_x(x), d_y(static_cast<size_t>(m) * ldy);
  Dev<uint16_t> d_xb(x.size());
  ASSERT_TRUE(cuda::ToBf16(d_x.p, static_cast<int64_t>(x.size()), d_xb.p, nullptr).ok());
  ASSERT_TRUE((*g)->Gemm(d_xb.p, m, w->b->p, n, k, d_y.p, ldy).ok());
  const auto got = d_y.Get();
  std::vector<float> ref(static_cast<size_t>(m) * n), packed(ref.size());
  CpuOps(ActDtype::kBF16, 2).MatMul(x.data(), m, w->host, ref.data(), false);
  for (int r = 0; r < m; ++r) {
    for (int j = 0; j < n; ++j) packed[size_t(r) * n + j] = got[size_t(r) * ldy + j];
    for (int j = n; j < ldy; ++j) ASSERT_TRUE(std::isnan(got[size_t(r) * ldy + j])) << "wrote past N in row " << r;
  }
  EXPECT_LT(RelErr(packed, ref), 1e-5);
  EXPECT_FALSE((*g)->Gemm(d_xb.p, m, w->b->p, n, k, d_y.p, n - 1).ok()) << "ldy < N is refused";
}

// The split-K product (LoRA down projections): close to the CPU's fp32 sums, and a row's bits
// the same alone, in a small batch or a large one, whatever its neighbours hold, and whichever
// kernels run the slices (the decode and prefill forms on a bf16 copy in scratch; with K % 16 != 0
// single rows take the 64-row WMMA tile while 90 rows take the prefill form).
TEST(CudaOps, SplitKMatMulMatchesCpuAndKeepsRowBits) {
  REQUIRE_GPU();
  std::mt19937 rng(17);
  for (auto [n, k, m] : std::vector<std::array<int, 3>>{
           {48, 3000, 90}, {256, 2048, 20}, {40, 100, 7}, {264, 5120, 130}, {256, 15360, 40}}) {
    SCOPED_TRACE(::testing::Message() << n << "x" << k << " m " << m);
    auto w = MakeW(n, k, rng, true);
    auto x = Random(static_cast<size_t>(m) * k, rng, 1.0f, true);
    const int64_t splits = (k + cuda::SplitKColumns(k) - 1) / cuda::SplitKColumns(k);
    EXPECT_EQ(splits, (k + 1023) / 1024);
    auto run = [&](const std::vector<float>& in, int rows) {
      Dev<float> d_x(in), part(static_cast<size_t>(splits) * rows * n), y(static_cast<size_t>(rows) * n);
      // The split's scratch is x's bf16 copy alone (MatMul's own few-output partials not counted).
      const int64_t bytes = cuda::MatMulSplitKScratchBytes(rows, w->dev());
      EXPECT_TRUE(bytes == 0 || bytes == (int64_t{rows} * k * 2 + 15) / 16 * 16) << bytes;
      EXPECT_LE(bytes, cuda::MatMulScratchBytes(rows, w->dev(), true));
      Dev<uint8_t> scratch(static_cast<size_t>(std::max<int64_t>(bytes, 16)));
      EXPECT_TRUE(cuda::MatMulSplitK(d_x.p, rows, w->dev(), part.p, nullptr, scratch.p).ok());
      EXPECT_TRUE(cuda::SumSplits(part.p, rows, w->dev(), y.p, true, nullptr).ok());
      return y.Get();
    };
    const auto all = run(x, m);
    std::vector<float> ref(static_cast<size_t>(m) * n);
    CpuOps(ActDtype::kBF16, 2).MatMul(x.data(), m, w->host, ref.data(), true);
    EXPECT_LT(RelErr(all, ref), Bound(true));
    for (int r : {0, m / 2, m - 1}) {
      const std::vector<float> one(x.begin() + size_t(r) * k, x.begin() + size_t(r + 1) * k);
      const auto alone = run(one, 1);
      for (int j = 0; j < n; ++j) ASSERT_EQ(alone[j], all[size_t(r) * n + j]) << "row " << r << " alone, col " << j;
    }
    if (cuda::MatMulSplitKScratchBytes(m, w->dev()) > 0) {
      // Without scratch the shapes the mma.sync forms take are refused by name.
      Dev<float> d_x(x), part(static_cast<size_t>(splits) * m * n);
      const Status missing = cuda::MatMulSplitK(d_x.p, m, w->dev(), part.p, nullptr, nullptr);
      EXPECT_FALSE(missing.ok());
      EXPECT_NE(missing.message().find("scratch"), std::string::npos) << missing.message();
    }
    auto x2 = x;
    for (size_t i = k; i < x2.size(); ++i) x2[i] = RoundBf16(x2[i] * -2.0f);  // every row but the first
    const auto other = run(x2, m);
    for (int j = 0; j < n; ++j) ASSERT_EQ(other[j], all[j]) << "neighbours changed row 0, col " << j;
  }
}

// MatMulBf16 reading x repeated along K (an fp32 LoRA factor's three bf16 pieces side by side):
// the bits of the product on the materialized tripled input, in both forms, split or not; and
// an x whose rows are not a multiple of kRepeatAlign is refused by name.
TEST(CudaOps, RepeatedBf16InputEqualsTheTripledCopy) {
  REQUIRE_GPU();
  std::mt19937 rng(29);
  for (auto [n, k0, m] : std::vector<std::array<int, 3>>{{264, 512, 1}, {256, 1024, 40}, {96, 256, 130}, {40, 768, 7}}) {
    SCOPED_TRACE(::testing::Message() << n << "x3*" << k0 << " m " << m);
    auto w = MakeW(n, 3 * k0, rng, true);
    auto x = Random(static_cast<size_t>(m) * k0, rng);
    std::vector<float> x3;
    for (int r = 0; r < m; ++r)
      for (int i = 0; i < 3; ++i) x3.insert(x3.end(), x.begin() + size_t(r) * k0, x.begin() + size_t(r + 1) * k0);
    ASSERT_TRUE(cuda::Bf16FormsFit(m, w->dev(), k0));
    Dev<float> d_x(x), d_x3(x3), d_ref(static_cast<size_t>(m) * n), d_got(static_cast<size_t>(m) * n);
    Dev<uint16_t> d_xb(static_cast<size_t>(m) * k0), d_xb3(x3.size());
    ASSERT_TRUE(cuda::ToBf16(d_x.p, int64_t{m} * k0, d_xb.p, nullptr).ok());
    ASSERT_TRUE(cuda::ToBf16(d_x3.p, static_cast<int64_t>(x3.size()), d_xb3.p, nullptr).ok());
    // (MatMul itself splits weights of few outputs along K: the plain product is MatMulBf16's.)
    ASSERT_TRUE(cuda::MatMulBf16(d_xb3.p, 3 * k0, m, w->dev(), d_ref.p, n, true, false, nullptr).ok());
    ASSERT_TRUE(cuda::MatMulBf16(d_xb.p, k0, m, w->dev(), d_got.p, n, true, false, nullptr).ok());
    EXPECT_EQ(d_got.Get(), d_ref.Get()) << "plain product";
    const int64_t splits = (3 * k0 + cuda::SplitKColumns(3 * k0) - 1) / cuda::SplitKColumns(3 * k0);
    Dev<float> p_ref(static_cast<size_t>(splits) * m * n), p_got(static_cast<size_t>(splits) * m * n);
    Dev<uint8_t> scratch(static_cast<size_t>(cuda::MatMulSplitKScratchBytes(m, w->dev())));
    ASSERT_TRUE(cuda::MatMulSplitK(d_x3.p, m, w->dev(), p_ref.p, nullptr, scratch.p).ok());
    ASSERT_TRUE(cuda::MatMulBf16(d_xb.p, k0, m, w->dev(), p_got.p, n, false, true, nullptr).ok());
    EXPECT_EQ(p_got.Get(), p_ref.Get()) << "split-K partials";
  }
  auto w = MakeW(64, 3 * 200, rng, true);
  EXPECT_FALSE(cuda::Bf16FormsFit(4, w->dev(), 200));
  Dev<uint16_t> d_xb(4 * 200);
  Dev<float> d_y(4 * 64);
  const Status s = cuda::MatMulBf16(d_xb.p, 200, 4, w->dev(), d_y.p, 64, true, false, nullptr);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("MatMulBf16"), std::string::npos) << s.message();
}

// Paged KV with a shuffled page table; queries at the last n positions of a len-token sequence.
// Every slot of the pages no position up to len maps to holds NaN (a pool's pages hold whatever was
// there; attention must never let it through).
struct AttnCase {
  int len, n, heads, kv_heads, hd, page = 16;
  std::vector<float> q, k, v;
  std::vector<int32_t> table, pos;
  int64_t rows() const { return static_cast<int64_t>(table.size()) * page; }  // the pages' rows (kv_rows)
};

AttnCase MakeAttn(int len, int n, int heads, int kv_heads, int hd, std::mt19937& rng, bool bf16, int page = 16) {
  AttnCase c{len, n, heads, kv_heads, hd, page, {}, {}, {}, {}, {}};
  const int pages = (len + c.page - 1) / c.page + 3;
  c.q = Random(static_cast<size_t>(n) * heads * hd, rng, 1.0f, bf16);
  c.k = Random(static_cast<size_t>(pages) * c.page * kv_heads * hd, rng, 1.0f, bf16);
  c.v = Random(c.k.size(), rng, 1.0f, bf16);
  c.table.resize(static_cast<size_t>(pages));
  std::iota(c.table.begin(), c.table.end(), 0);
  std::shuffle(c.table.begin(), c.table.end(), rng);
  std::vector<char> used(c.k.size() / (static_cast<size_t>(kv_heads) * hd), 0);  // by row of the pages
  for (int j = 0; j < len; ++j) used[static_cast<size_t>(c.table[j / c.page]) * c.page + j % c.page] = 1;
  const size_t row = static_cast<size_t>(kv_heads) * hd;
  for (size_t r = 0; r < used.size(); ++r) {
    if (used[r]) continue;
    std::fill(c.k.begin() + r * row, c.k.begin() + (r + 1) * row, std::nanf(""));
    std::fill(c.v.begin() + r * row, c.v.begin() + (r + 1) * row, std::nanf(""));
  }
  for (int t = 0; t < n; ++t) c.pos.push_back(len - n + t);
  return c;
}

bool AllFinite(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
}

TEST(CudaOps, AttentionMatchesCpu) {
  REQUIRE_GPU();
  std::mt19937 rng(4);
  for (bool bf16 : {false, true}) {
    for (auto [len, n, heads, kvh, hd] : std::vector<std::array<int, 5>>{
             {1, 1, 2, 1, 8}, {5, 5, 4, 2, 64}, {130, 130, 4, 2, 64}, {300, 1, 8, 2, 128}, {600, 7, 6, 6, 256},
             {513, 513, 8, 2, 128}, {700, 200, 6, 2, 256}, {300, 300, 8, 2, 256}, {513, 513, 8, 1, 128}}) {
      AttnCase c = MakeAttn(len, n, heads, kvh, hd, rng, bf16);
      std::vector<float> ref(static_cast<size_t>(n) * heads * hd);
      AttentionArgs a{c.q.data(), c.k.data(), c.v.data(), c.table.data(), c.page, c.pos.data(), n, heads, kvh, hd,
                      1.0f / std::sqrt(float(hd)), ref.data()};
      CpuOps(Act(bf16), 2).Attention(a);
      Dev<float> dq(c.q), dout(ref.size());
      DevKv dk(c.k, bf16), dv(c.v, bf16);
      Dev<int32_t> dt(c.table), dp(c.pos);
      cuda::AttentionArgs g{dq.p, dk.p(), dv.p(), dt.p, c.page, dp.p, n, heads, kvh, hd, a.scale, bf16, dout.p, c.rows()};
      ASSERT_TRUE(cuda::Attention(g, nullptr).ok());
      const auto got = dout.Get();
      EXPECT_TRUE(AllFinite(got)) << len << " " << n << " " << heads << "/" << kvh << "x" << hd;
      EXPECT_LT(RelErr(got, ref), bf16 ? 1e-2 : 1e-5) << len << " " << n << " " << heads << "/" << kvh << "x" << hd;
    }
  }
}

TEST(CudaOps, AttentionRowBitsIndependentOfChunking) {
  REQUIRE_GPU();
  std::mt19937 rng(5);
  // Head sizes 64, 128 and 256 with bf16 activations take the tensor-core kernel, 96 the SIMT one;
  // an even number of query heads a key-value head (4 / 2, 8 / 2, 16 / 2) runs two of them a block
  // when more than 64 rows come at once — on wgmma (flash_wgmma.h), whose rows must equal the
  // mma.sync kernels' that the chunks of up to 64 rows take — one a block in
  // the batched decode launch (compared below).
  for (auto [heads, kvh, hd] : std::vector<std::array<int, 3>>{
           {4, 2, 64}, {6, 2, 256}, {8, 2, 256}, {8, 8, 128}, {2, 1, 96}, {8, 2, 64}, {16, 2, 128}}) {
    SCOPED_TRACE(::testing::Message() << heads << "/" << kvh << "x" << hd);
    AttnCase c = MakeAttn(700, 700, heads, kvh, hd, rng, true);
    Dev<float> dq(c.q), dall(c.q.size());
    DevKv dk(c.k, true), dv(c.v, true);
    Dev<int32_t> dt(c.table), dp(c.pos);
    const float scale = 1.0f / std::sqrt(float(hd));
    cuda::AttentionArgs all{dq.p, dk.p(), dv.p(), dt.p, c.page, dp.p, 700, heads, kvh, hd, scale, true, dall.p, c.rows()};
    ASSERT_TRUE(cuda::Attention(all, nullptr).ok());
    const auto whole = dall.Get();
    EXPECT_TRUE(AllFinite(whole)) << "no NaN from the pages' unused slots";
    const int row = heads * hd;
    for (int chunk : {1, 15, 16, 17, 64, 300}) {
      Dev<float> dpart(c.q.size());
      for (int t0 = 0; t0 < 700; t0 += chunk) {
        const int n = std::min(chunk, 700 - t0);
        cuda::AttentionArgs part{dq.p + size_t(t0) * row, dk.p(), dv.p(), dt.p, c.page, dp.p + t0, n, heads, kvh, hd, scale,
                                 true, dpart.p + size_t(t0) * row, c.rows()};
        ASSERT_TRUE(cuda::Attention(part, nullptr).ok());
      }
      EXPECT_EQ(dpart.Get(), whole) << "chunks of " << chunk;
    }
    // A decode step of several sequences in one launch (AttentionSeqs, with the kernel Attention
    // picks for one row — the tensor-core one for 64, 128, 256): rows 0, 15, 299 and 699 each as
    // a sequence's one query row, on its own copy of the page table: each row's bits.
    {
      const std::vector<int> rows = {0, 15, 299, 699};
      std::vector<std::unique_ptr<Dev<int32_t>>> tables;
      std::vector<cuda::AttnSeq> host;
      Dev<float> dout(c.q.size());
      for (int t : rows) {
        tables.push_back(std::make_unique<Dev<int32_t>>(c.table));
        host.push_back({dq.p + size_t(t) * row, tables.back()->p, dp.p + t, dout.p + size_t(t) * row});
      }
      cuda::AttnSeq* dseqs = nullptr;
      ASSERT_EQ(cudaMalloc(&dseqs, host.size() * sizeof(cuda::AttnSeq)), cudaSuccess);
      cudaMemcpy(dseqs, host.data(), host.size() * sizeof(cuda::AttnSeq), cudaMemcpyHostToDevice);
      cuda::AttentionArgs shape{nullptr, dk.p(), dv.p(), nullptr, c.page, nullptr, 0, heads, kvh, hd, scale, true, nullptr};
      cuda::AttentionArgs first = shape;
      first.q = host[0].q;
      first.n = 1;
      ASSERT_TRUE(cuda::AttentionSeqs(shape, dseqs, static_cast<int>(host.size()), cuda::FlashAttentionFits(first), nullptr)
                      .ok());
      cudaFree(dseqs);
      const auto got = dout.Get();
      for (int t : rows) {
        EXPECT_TRUE(std::equal(whole.begin() + size_t(t) * row, whole.begin() + size_t(t + 1) * row,
                               got.begin() + size_t(t) * row))
            << "row " << t << " as one of a batch's sequences";
      }
    }
    // A step's short prefill pieces in one launch (FlashAttentionPieces, the tensor-core kernel's
    // shapes): rows 3..9, 100..163 (a whole tile) and 650..651, each a sequence's piece on its own
    // copy of the page table — each row's bits.
    if (hd != 96) {
      const std::vector<std::array<int, 2>> pieces = {{3, 7}, {100, 64}, {650, 2}};
      std::vector<std::unique_ptr<Dev<int32_t>>> tables;
      std::vector<cuda::AttnPiece> host;
      Dev<float> dout(c.q.size());
      for (auto [t0, n] : pieces) {
        tables.push_back(std::make_unique<Dev<int32_t>>(c.table));
        host.push_back({dq.p + size_t(t0) * row, tables.back()->p, dp.p + t0, n, dout.p + size_t(t0) * row});
      }
      cuda::AttnPiece* dpieces = nullptr;
      ASSERT_EQ(cudaMalloc(&dpieces, host.size() * sizeof(cuda::AttnPiece)), cudaSuccess);
      cudaMemcpy(dpieces, host.data(), host.size() * sizeof(cuda::AttnPiece), cudaMemcpyHostToDevice);
      cuda::AttentionArgs shape{nullptr, dk.p(), dv.p(), nullptr, c.page, nullptr, 0, heads, kvh, hd, scale, true, nullptr};
      ASSERT_TRUE(cuda::FlashAttentionPieces(shape, dpieces, static_cast<int>(host.size()), nullptr).ok());
      EXPECT_FALSE(cuda::FlashAttentionPieces(shape, dpieces, 70000, nullptr).ok()) << "more pieces than a grid";
      cudaFree(dpieces);
      const auto got = dout.Get();
      for (auto [t0, n] : pieces) {
        EXPECT_TRUE(std::equal(whole.begin() + size_t(t0) * row, whole.begin() + size_t(t0 + n) * row,
                               got.begin() + size_t(t0) * row))
            << "rows " << t0 << ".." << t0 + n - 1 << " as one of a step's pieces";
      }
    }
  }
}

// The two-head wgmma kernel (flash_wgmma.h) copies tiles by TMA a page at a time (pages of 8, 16,
// 32 tokens) or 64 keys of a page at a time (64, 128): each page size's rows equal the one-head
// mma.sync kernel's (pieces of 64 rows), in a call of 300 rows and in one of 100 that ends mid-tile
// and mid-page, pages past the sequence's NaN. A page size the copies cannot take (24, 12) runs
// the one-head kernel, with the same bits.
TEST(CudaOps, AttentionWgmmaRowsEqualMmaRowsForEveryPageSize) {
  REQUIRE_GPU();
  std::mt19937 rng(11);
  for (int page : {8, 16, 32, 64, 128, 24, 12}) {
    for (auto [heads, kvh, hd] : std::vector<std::array<int, 3>>{{4, 2, 64}, {8, 2, 128}, {4, 2, 256}}) {
      for (int len : {300, 100}) {
        SCOPED_TRACE(::testing::Message() << "page " << page << ", " << heads << "/" << kvh << "x" << hd << ", " << len
                                          << " rows");
        AttnCase c = MakeAttn(len, len, heads, kvh, hd, rng, true, page);
        Dev<float> dq(c.q), dall(c.q.size()), dpart(c.q.size());
        DevKv dk(c.k, true), dv(c.v, true);
        Dev<int32_t> dt(c.table), dp(c.pos);
        const float scale = 1.0f / std::sqrt(float(hd));
        cuda::AttentionArgs all{dq.p, dk.p(), dv.p(), dt.p, page, dp.p, len, heads, kvh, hd, scale, true, dall.p, c.rows()};
        EXPECT_EQ(cuda::FlashWgmmaFits(all), page % 8 == 0 && (64 % page == 0 || page % 64 == 0));
        ASSERT_TRUE(cuda::Attention(all, nullptr).ok());
        const int row = heads * hd;
        for (int t0 = 0; t0 < len; t0 += 64) {
          const int n = std::min(64, len - t0);
          cuda::AttentionArgs part{dq.p + size_t(t0) * row, dk.p(), dv.p(), dt.p, page, dp.p + t0, n, heads, kvh, hd, scale,
                                   true, dpart.p + size_t(t0) * row, c.rows()};
          ASSERT_TRUE(cuda::Attention(part, nullptr).ok());
        }
        const auto whole = dall.Get();
        EXPECT_TRUE(AllFinite(whole));
        EXPECT_EQ(whole, dpart.Get());
      }
    }
  }
  // Without the pages' extent the two-head kernel is not taken (its tensor maps need it).
  cuda::AttentionArgs a{nullptr, nullptr, nullptr, nullptr, 16, nullptr, 100, 4, 2, 64, 0.125f, true, nullptr, 0};
  EXPECT_FALSE(cuda::FlashWgmmaFits(a));
  EXPECT_FALSE(cuda::FlashWgmma(a, nullptr).ok());
}

TEST(CudaOps, GatedDeltaNetMatchesCpuAndIgnoresChunking) {
  REQUIRE_GPU();
  std::mt19937 rng(6);
  // Shapes: one value-column slice of the chunk kernel (dk = 18: q / k rows read four at a time
  // leave a two-element tail), and several (dv = 72: 32 + 32 + 8); 136 heads of 40 columns make
  // more one-group blocks than a multiprocessor count, so blocks take two column groups (32 + 8
  // columns, the second part empty).
  struct Shape { int hk, hv, dk, dv; };
  EXPECT_EQ(cuda::GdnChunkGroups(3, 32, 72), 1);
  EXPECT_EQ(cuda::GdnChunkGroups(136, 16, 40), 2);
  // In bf16 mode the tensor-core form (gdn.h): dk 18 pads to two K steps, 128 (the real models')
  // fills eight; 136 heads of 40 columns take 64-column state blocks, the others 32.
  for (const Shape sh : {Shape{2, 4, 18, 24}, Shape{1, 3, 32, 72}, Shape{2, 136, 16, 40}, Shape{1, 2, 128, 128},
                         Shape{2, 4, 64, 64}})
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "dk " << sh.dk << " dv " << sh.dv << (bf16 ? " bf16" : " f32"));
    const int hk = sh.hk, hv = sh.hv, dk = sh.dk, dv = sh.dv, K = 4, n = 150;
    const int conv_dim = 2 * hk * dk + hv * dv, stride = conv_dim + 9;
    CpuOps cpu(Act(bf16), 2);
    auto x = Random(static_cast<size_t>(n) * stride, rng, 1.0f, bf16);
    auto conv_w = MakeW(conv_dim, K, rng, true, 0.5f);
    // Conv over the whole sequence on the CPU, then on the GPU whole and in uneven pieces.
    std::vector<float> cstate(static_cast<size_t>(conv_dim) * (K - 1), 0.0f), mixed(static_cast<size_t>(n) * conv_dim);
    cpu.CausalConvSilu(x.data(), stride, n, conv_dim, conv_w->host, cstate.data(), mixed.data());
    Dev<float> dx(x), dmixed(mixed.size()), dcs(std::vector<float>(cstate.size(), 0.0f));
    ASSERT_TRUE(cuda::CausalConvSilu(dx.p, stride, n, conv_dim, conv_w->dev(), dcs.p, bf16, dmixed.p, nullptr).ok());
    const auto gpu_mixed = dmixed.Get();
    EXPECT_LT(RelErr(gpu_mixed, mixed), Bound(bf16)) << "conv";
    EXPECT_LT(RelErr(dcs.Get(), cstate), 1e-7) << "conv state";
    {
      Dev<float> dm2(mixed.size()), dcs2(std::vector<float>(cstate.size(), 0.0f));
      for (int t0 = 0, step = 1; t0 < n; t0 += step, step = step * 2 + 1) {
        const int m = std::min(step, n - t0);
        ASSERT_TRUE(cuda::CausalConvSilu(dx.p + size_t(t0) * stride, stride, m, conv_dim, conv_w->dev(), dcs2.p, bf16,
                                         dm2.p + size_t(t0) * conv_dim, nullptr).ok());
      }
      EXPECT_EQ(dm2.Get(), gpu_mixed) << "conv in pieces";
      // Token by token (the decode kernel) against the token-parallel kernel of the whole.
      Dev<float> dm3(mixed.size()), dcs3(std::vector<float>(cstate.size(), 0.0f));
      for (int t = 0; t < n; ++t) {
        ASSERT_TRUE(cuda::CausalConvSilu(dx.p + size_t(t) * stride, stride, 1, conv_dim, conv_w->dev(), dcs3.p, bf16,
                                         dm3.p + size_t(t) * conv_dim, nullptr).ok());
      }
      EXPECT_EQ(dm3.Get(), gpu_mixed) << "conv token by token";
      EXPECT_EQ(dcs3.Get(), dcs.Get()) << "conv state token by token";
      // A batch's decode steps in one launch (CausalConvSiluSeqs): sequence s is the rows from
      // 25s on, a row each per shared launch; each equals its own token-by-token run.
      const int seqs = 3, len = 20;
      std::vector<std::unique_ptr<Dev<float>>> st_alone, st_batch;
      Dev<float> out_alone(mixed.size()), out_batch(mixed.size());
      for (int q = 0; q < seqs; ++q) {
        st_alone.push_back(std::make_unique<Dev<float>>(std::vector<float>(cstate.size(), 0.0f)));
        st_batch.push_back(std::make_unique<Dev<float>>(std::vector<float>(cstate.size(), 0.0f)));
        for (int t = 25 * q; t < 25 * q + len; ++t) {
          ASSERT_TRUE(cuda::CausalConvSilu(dx.p + size_t(t) * stride, stride, 1, conv_dim, conv_w->dev(), st_alone[q]->p,
                                           bf16, out_alone.p + size_t(t) * conv_dim, nullptr).ok());
        }
      }
      cuda::ConvSeq* dseqs = nullptr;
      ASSERT_EQ(cudaMalloc(&dseqs, seqs * sizeof(cuda::ConvSeq)), cudaSuccess);
      for (int step = 0; step < len; ++step) {
        std::vector<cuda::ConvSeq> host;
        for (int q = 0; q < seqs; ++q) host.push_back({25 * q + step, 1, st_batch[q]->p});
        cudaMemcpy(dseqs, host.data(), host.size() * sizeof(cuda::ConvSeq), cudaMemcpyHostToDevice);
        ASSERT_TRUE(
            cuda::CausalConvSiluSeqs(dx.p, stride, dseqs, seqs, conv_dim, conv_w->dev(), bf16, out_batch.p, nullptr).ok());
      }
      cudaFree(dseqs);
      const auto oa = out_alone.Get(), ob = out_batch.Get();
      for (int q = 0; q < seqs; ++q) {
        const size_t r0 = size_t(25 * q) * conv_dim, r1 = size_t(25 * q + len) * conv_dim;
        EXPECT_TRUE(std::equal(oa.begin() + r0, oa.begin() + r1, ob.begin() + r0)) << "conv sequence " << q << " batched";
        EXPECT_EQ(st_batch[q]->Get(), st_alone[q]->Get()) << "conv state of sequence " << q;
      }
      // A step's pieces of 16 tokens and more in one launch each of the token-parallel kernels
      // (CausalConvSiluPieces), each from its own non-zero state: each piece's outputs and state
      // are its lone call's, bit for bit.
      const std::vector<std::pair<int, int>> pieces = {{0, 16}, {16, 17}, {33, 64}, {97, 53}};
      Dev<float> p_alone(mixed.size()), p_batch(mixed.size());
      std::vector<std::unique_ptr<Dev<float>>> ps_alone, ps_batch;
      std::vector<cuda::ConvSeq> host;
      int longest = 0;
      for (const auto& [row0, m] : pieces) {
        const auto init = Random(cstate.size(), rng, 1.0f, bf16);
        ps_alone.push_back(std::make_unique<Dev<float>>(init));
        ps_batch.push_back(std::make_unique<Dev<float>>(init));
        ASSERT_TRUE(cuda::CausalConvSilu(dx.p + size_t(row0) * stride, stride, m, conv_dim, conv_w->dev(),
                                         ps_alone.back()->p, bf16, p_alone.p + size_t(row0) * conv_dim, nullptr).ok());
        host.push_back({row0, m, ps_batch.back()->p});
        longest = std::max(longest, m);
      }
      Dev<cuda::ConvSeq> dpieces(host);
      ASSERT_TRUE(cuda::CausalConvSiluPieces(dx.p, stride, dpieces.p, static_cast<int>(host.size()), longest, conv_dim,
                                             conv_w->dev(), bf16, p_batch.p, nullptr).ok());
      EXPECT_EQ(p_batch.Get(), p_alone.Get()) << "conv pieces in one launch";
      for (size_t q = 0; q < pieces.size(); ++q) EXPECT_EQ(ps_batch[q]->Get(), ps_alone[q]->Get()) << "conv piece " << q;
    }
    // The delta rule on the CPU's conv output (the same input for both).
    auto beta = Random(static_cast<size_t>(n) * hv, rng, 1.0f, false);
    auto g = Random(beta.size(), rng, 1.0f, false);
    for (auto& b : beta) b = RoundBf16(1.0f / (1.0f + std::exp(-b)));
    for (auto& v : g) v = -std::fabs(v) * 0.3f;
    std::vector<float> S0(static_cast<size_t>(hv) * dk * dv), pk0(static_cast<size_t>(kGdnChunk) * hv * dk),
        pvn0(static_cast<size_t>(kGdnChunk) * hv * dv), pgam0(static_cast<size_t>(kGdnChunk) * hv), pkinv0(pgam0.size());
    GdnState st;
    st.S = S0.data();
    st.pk = pk0.data();
    st.pvn = pvn0.data();
    st.pgam = pgam0.data();
    st.pkinv = pkinv0.data();
    std::vector<float> core(static_cast<size_t>(n) * hv * dv);
    GdnCoreArgs ca{mixed.data(), beta.data(), g.data(), n, hk, hv, dk, dv, &st, core.data()};
    cpu.GdnCore(ca);
    Dev<float> dmix(mixed), dbeta(beta), dg(g);
    auto run = [&](int chunk) {
      Dev<float> S(S0.size()), pk(pk0.size()), pvn(pvn0.size()), pgam(pgam0.size()), pkinv(pgam0.size()), out(core.size());
      cudaMemset(S.p, 0, S.n * 4);
      cuda::DevGdnState ds{nullptr, S.p, pk.p, pvn.p, pgam.p, pkinv.p, 0};
      Dev<float> scratch(static_cast<size_t>(cuda::GdnChunkScratchFloats(chunk, hk, hv, dk, dv)));
      for (int t0 = 0; t0 < n; t0 += chunk) {
        const int m = std::min(chunk, n - t0);
        cuda::GdnCoreArgs a{dmix.p + size_t(t0) * conv_dim, dbeta.p + size_t(t0) * hv, dg.p + size_t(t0) * hv, m, hk, hv,
                            dk, dv, &ds, bf16, out.p + size_t(t0) * hv * dv, nullptr, scratch.p};
        EXPECT_TRUE(cuda::GdnCore(a, nullptr).ok());
      }
      EXPECT_EQ(ds.pending, n % kGdnChunk);
      return out.Get();
    };
    const auto whole = run(n);
    EXPECT_LT(RelErr(whole, core), bf16 ? Bound(true) : 1e-5) << "GdnCore vs CPU";
    // 1 and 15: the token kernel throughout; 16, 17, 64, 100: the chunk kernel, starting inside a
    // chunk (17, 100) and ending on a boundary (16, 64); the whole run (150) ends inside one.
    for (int chunk : {1, 15, 16, 17, 64, 100}) EXPECT_EQ(run(chunk), whole) << "GdnCore in chunks of " << chunk;
    {
      // A batch's decode steps in one launch (GdnCoreSeqs): sequence s is the rows from 7s on,
      // first 3s of them alone (so the open chunks differ), then a row each per shared launch,
      // past a chunk's end; every sequence's outputs and state equal its own run alone.
      const int seqs = 3, len = 70;
      struct Seq {
        Dev<float> S, pk, pvn, pgam, pkinv, out;
        cuda::DevGdnState ds;
      };
      auto fresh = [&] {
        auto q = std::unique_ptr<Seq>(new Seq{Dev<float>(S0.size()), Dev<float>(pk0.size()), Dev<float>(pvn0.size()),
                                              Dev<float>(pgam0.size()), Dev<float>(pgam0.size()),
                                              Dev<float>(static_cast<size_t>(len) * hv * dv), {}});
        cudaMemset(q->S.p, 0, q->S.n * 4);
        q->ds = {nullptr, q->S.p, q->pk.p, q->pvn.p, q->pgam.p, q->pkinv.p, 0};
        return q;
      };
      auto args = [&](Seq& q, int s, int t, int m) {
        const size_t r = size_t(7 * s + t);
        return cuda::GdnCoreArgs{dmix.p + r * conv_dim, dbeta.p + r * hv, dg.p + r * hv, m, hk, hv, dk, dv, &q.ds, bf16,
                                 q.out.p + size_t(t) * hv * dv, nullptr, nullptr};
      };
      std::vector<std::unique_ptr<Seq>> alone, batched;
      for (int s = 0; s < seqs; ++s) {
        alone.push_back(fresh());
        for (int t = 0; t < len; ++t) ASSERT_TRUE(cuda::GdnCore(args(*alone[s], s, t, 1), nullptr).ok());
        batched.push_back(fresh());
        if (s > 0) {
          ASSERT_TRUE(cuda::GdnCore(args(*batched[s], s, 0, 3 * s), nullptr).ok());
        }
      }
      cuda::GdnSeq* dseqs = nullptr;
      ASSERT_EQ(cudaMalloc(&dseqs, seqs * sizeof(cuda::GdnSeq)), cudaSuccess);
      for (int step = 0; step < len; ++step) {
        std::vector<cuda::GdnSeq> host;
        for (int s = 0; s < seqs; ++s) {
          const int t = 3 * s + step;
          if (t >= len) continue;
          const cuda::GdnCoreArgs a = args(*batched[s], s, t, 1);
          host.push_back({a.qkv, a.beta, a.g, a.out, 1, batched[s]->ds});
          batched[s]->ds.pending = (batched[s]->ds.pending + 1) % kGdnChunk;
        }
        cudaMemcpy(dseqs, host.data(), host.size() * sizeof(cuda::GdnSeq), cudaMemcpyHostToDevice);
        ASSERT_TRUE(cuda::GdnCoreSeqs(dseqs, static_cast<int>(host.size()), hk, hv, dk, dv, bf16, nullptr).ok());
      }
      for (int s = 0; s < seqs; ++s) {
        EXPECT_EQ(batched[s]->out.Get(), alone[s]->out.Get()) << "sequence " << s << " batched";
        EXPECT_EQ(batched[s]->S.Get(), alone[s]->S.Get()) << "sequence " << s << " state";
        EXPECT_EQ(batched[s]->ds.pending, alone[s]->ds.pending);
      }
      cudaFree(dseqs);
      EXPECT_FALSE(cuda::GdnCoreSeqs(dseqs, 70000, hk, hv, dk, dv, bf16, nullptr).ok()) << "more sequences than a grid";
    }
    if (cuda::GdnTensorCoreForm(bf16, dk)) {
      // A step's prefill pieces in one launch of the chunk kernels (GdnCoreTcChunkedSeqs):
      // sequence s (rows from 5s on) runs 20s rows alone first, so its open chunk holds 0, 20 or
      // 40 rows, then a piece of 16, 41 or 100 rows beside the others; every sequence's outputs
      // and state equal its own GdnCore calls.
      const int seqs = 3, lens[seqs] = {16, 41, 100};
      struct Seq {
        Dev<float> S, pk, pvn, pgam, pkinv, out, scratch;
        cuda::DevGdnState ds;
      };
      auto fresh = [&](int s) {
        const int rows = 20 * s + lens[s];
        auto q = std::unique_ptr<Seq>(new Seq{Dev<float>(S0.size()), Dev<float>(pk0.size()), Dev<float>(pvn0.size()),
                                              Dev<float>(pgam0.size()), Dev<float>(pgam0.size()),
                                              Dev<float>(static_cast<size_t>(rows) * hv * dv),
                                              Dev<float>(static_cast<size_t>(cuda::GdnChunkScratchFloats(lens[s], hk, hv, dk, dv))),
                                              {}});
        cudaMemset(q->S.p, 0, q->S.n * 4);
        q->ds = {nullptr, q->S.p, q->pk.p, q->pvn.p, q->pgam.p, q->pkinv.p, 0};
        return q;
      };
      auto args = [&](Seq& q, int s, int t, int m, float* scratch) {
        const size_t r = size_t(5 * s + t);
        return cuda::GdnCoreArgs{dmix.p + r * conv_dim, dbeta.p + r * hv, dg.p + r * hv, m, hk, hv, dk, dv, &q.ds, bf16,
                                 q.out.p + size_t(t) * hv * dv, nullptr, scratch};
      };
      std::vector<std::unique_ptr<Seq>> alone, batched;
      std::vector<cuda::GdnChunkSeq> host;
      for (int s = 0; s < seqs; ++s) {
        alone.push_back(fresh(s));
        batched.push_back(fresh(s));
        for (Seq* q : {alone.back().get(), batched.back().get()}) {
          if (s > 0) {
            ASSERT_TRUE(cuda::GdnCore(args(*q, s, 0, 20 * s, nullptr), nullptr).ok());
          }
        }
        ASSERT_TRUE(cuda::GdnCore(args(*alone[s], s, 20 * s, lens[s], alone[s]->scratch.p), nullptr).ok());
        cuda::GdnChunkSeq piece{args(*batched[s], s, 20 * s, lens[s], batched[s]->scratch.p), batched[s]->ds,
                                batched[s]->ds.pending};
        piece.a.state = nullptr;
        host.push_back(piece);
      }
      cuda::GdnChunkSeq* dpieces = nullptr;
      ASSERT_EQ(cudaMalloc(&dpieces, host.size() * sizeof(cuda::GdnChunkSeq)), cudaSuccess);
      cudaMemcpy(dpieces, host.data(), host.size() * sizeof(cuda::GdnChunkSeq), cudaMemcpyHostToDevice);
      ASSERT_TRUE(cuda::GdnCoreTcChunkedSeqs(dpieces, host.data(), seqs, nullptr).ok());
      for (int s = 0; s < seqs; ++s) {
        SCOPED_TRACE(::testing::Message() << "piece of " << lens[s] << " after " << 20 * s << " rows");
        EXPECT_EQ(batched[s]->out.Get(), alone[s]->out.Get()) << "outputs";
        EXPECT_EQ(batched[s]->S.Get(), alone[s]->S.Get()) << "state";
        for (auto [b, a] : {std::pair{&batched[s]->pk, &alone[s]->pk}, std::pair{&batched[s]->pvn, &alone[s]->pvn},
                            std::pair{&batched[s]->pgam, &alone[s]->pgam}, std::pair{&batched[s]->pkinv, &alone[s]->pkinv}}) {
          const auto got = b->Get(), want = a->Get();
          const int open = (20 * s + lens[s]) % kGdnChunk;  // rows of the open chunk the state holds
          const size_t per_row = got.size() / kGdnChunk;
          EXPECT_TRUE(std::equal(want.begin(), want.begin() + open * per_row, got.begin())) << "open chunk rows";
        }
      }
      host[1].a.scratch = nullptr;
      cudaMemcpy(dpieces, host.data(), host.size() * sizeof(cuda::GdnChunkSeq), cudaMemcpyHostToDevice);
      EXPECT_FALSE(cuda::GdnCoreTcChunkedSeqs(dpieces, host.data(), seqs, nullptr).ok()) << "a piece without scratch";
      cudaFree(dpieces);
    }
    // Gated norm.
    auto nw = MakeW(dv, 1, rng, false, 1.0f);
    std::vector<float> normed(core.size());
    cpu.GatedRmsNorm(core.data(), x.data(), stride, 5, n, hv, dv, nw->host, 1e-6f, normed.data());
    Dev<float> dcore(core), dnormed(normed.size());
    ASSERT_TRUE(cuda::GatedRmsNorm(dcore.p, dx.p, stride, 5, n, hv, dv, nw->dev(), 1e-6f, bf16, dnormed.p, nullptr).ok());
    EXPECT_LT(RelErr(dnormed.Get(), normed), Bound(bf16)) << "GatedRmsNorm";
  }
}

// Ops::QkvPrep on CUDA: one launch splits a fused projection's rows — Qwen3.5's q|gate|k|v, or
// Qwen3's q|k|v (no gate) — norms q and k per head and rotates them; every output must be the bits
// of the launches it replaces (CopyBlocks x 2 or CopyBlock, CopyBlock x 2, RmsNorm x 2, Rope x 2),
// for both layouts and norm kinds, full and partial rotation, heads of 256, 128 and 72 columns,
// one token and several, fp32 and bf16.
TEST(CudaOps, QkvPrepIsTheSeparateOpsBitForBit) {
  REQUIRE_GPU();
  std::mt19937 rng(62);
  struct Shape { int nh, nkv, hd, rot; };
  for (bool gated : {true, false})
  for (const Shape sh : {Shape{24, 4, 256, 64}, Shape{4, 2, 128, 128}, Shape{3, 1, 72, 32}})
  for (int n : {1, 7})
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(::testing::Message() << (gated ? "gated" : "ungated") << " hd " << sh.hd << " rot " << sh.rot << " n " << n
                                      << (bf16 ? " bf16" : " f32"));
    const int nh = sh.nh, nkv = sh.nkv, hd = sh.hd, q_w = nh * hd, kv_w = nkv * hd;
    const int q_span = gated ? 2 * q_w : q_w, qkv_w = q_span + 2 * kv_w;
    const auto kind = gated ? cuda::NormKind::kOnePlusW : cuda::NormKind::kPlainW;
    Dev<float> qkv(Random(size_t(n) * qkv_w, rng, 1.0f, bf16));
    Dev<float> qn(Random(size_t(hd), rng, 0.2f, false)), kn(Random(size_t(hd), rng, 0.2f, false));
    std::vector<int32_t> pos(static_cast<size_t>(n));
    for (auto& p : pos) p = static_cast<int32_t>(rng() % 5000);
    std::vector<float> freq(static_cast<size_t>(sh.rot / 2));
    for (size_t i = 0; i < freq.size(); ++i) freq[i] = std::pow(10000.0f, -2.0f * float(i) / float(sh.rot));
    Dev<int32_t> dpos(pos);
    Dev<float> dfreq(freq);
    const float eps = 1e-6f, scale = 1.0f;
    // The separate ops.
    Dev<float> q1(size_t(n) * q_w), g1(size_t(n) * q_w), k1(size_t(n) * kv_w), v1(size_t(n) * kv_w);
    if (gated) {
      ASSERT_TRUE(cuda::CopyBlocks(qkv.p, qkv_w, 0, 2 * hd, q1.p, q_w, 0, hd, n, hd, nh, nullptr).ok());
      ASSERT_TRUE(cuda::CopyBlocks(qkv.p, qkv_w, hd, 2 * hd, g1.p, q_w, 0, hd, n, hd, nh, nullptr).ok());
    } else {
      ASSERT_TRUE(cuda::CopyBlock(qkv.p, qkv_w, 0, q1.p, q_w, 0, n, q_w, nullptr).ok());
    }
    ASSERT_TRUE(cuda::CopyBlock(qkv.p, qkv_w, q_span, k1.p, kv_w, 0, n, kv_w, nullptr).ok());
    ASSERT_TRUE(cuda::CopyBlock(qkv.p, qkv_w, q_span + kv_w, v1.p, kv_w, 0, n, kv_w, nullptr).ok());
    ASSERT_TRUE(cuda::RmsNorm(q1.p, qn.p, int64_t{n} * nh, hd, eps, kind, bf16, q1.p, nullptr).ok());
    ASSERT_TRUE(cuda::RmsNorm(k1.p, kn.p, int64_t{n} * nkv, hd, eps, kind, bf16, k1.p, nullptr).ok());
    ASSERT_TRUE(cuda::Rope(q1.p, n, nh, hd, sh.rot, dpos.p, dfreq.p, scale, bf16, nullptr).ok());
    ASSERT_TRUE(cuda::Rope(k1.p, n, nkv, hd, sh.rot, dpos.p, dfreq.p, scale, bf16, nullptr).ok());
    // One launch.
    Dev<float> q2(size_t(n) * q_w), g2(size_t(n) * q_w), k2(size_t(n) * kv_w), v2(size_t(n) * kv_w);
    const cuda::QkvPrepDevArgs a{.qkv = qkv.p, .n = n, .nh = nh, .nkv = nkv, .hd = hd, .rot_dim = sh.rot,
                                 .q_norm = qn.p, .k_norm = kn.p, .norm_kind = gated ? 1 : 0, .eps = eps,
                                 .pos = dpos.p, .inv_freq = dfreq.p, .attn_scale = scale, .q = q2.p,
                                 .gate = gated ? g2.p : nullptr, .k = k2.p, .v = v2.p};
    ASSERT_TRUE(cuda::QkvPrep(a, bf16, nullptr).ok());
    const auto q = q2.Get();
    EXPECT_TRUE(std::all_of(q.begin(), q.end(), [](float x) { return std::isfinite(x); })) << "every q written";
    EXPECT_EQ(q, q1.Get()) << "q";
    if (gated) {
      EXPECT_EQ(g2.Get(), g1.Get()) << "gate";
    } else {
      const auto g = g2.Get();
      EXPECT_TRUE(std::all_of(g.begin(), g.end(), [](float x) { return std::isnan(x); })) << "no gate written";
    }
    EXPECT_EQ(k2.Get(), k1.Get()) << "k";
    EXPECT_EQ(v2.Get(), v1.Get()) << "v";
  }
  // Heads wider than the norm block, an odd rotation or an unknown norm kind: a named error.
  cuda::QkvPrepDevArgs bad{};
  bad.n = 1, bad.nh = 1, bad.nkv = 1, bad.hd = 512, bad.rot_dim = 64;
  for (int variant = 0; variant < 3; ++variant) {
    if (variant == 1) bad.hd = 128, bad.rot_dim = 63;
    if (variant == 2) bad.rot_dim = 64, bad.norm_kind = 2;
    const Status s = cuda::QkvPrep(bad, false, nullptr);
    EXPECT_FALSE(s.ok()) << variant;
    EXPECT_NE(s.message().find("QkvPrep"), std::string::npos) << s.message();
  }
}

// Ops::GdnGatedCoreSeqs on CUDA: the gates and the gated norm run inside the token kernel (one
// launch a decode step). Every output — beta, g, the delta rule's rows and state, the normed rows
// — must be the bits of GdnGates, GdnCoreSeqs and GatedRmsNorm run one after another, across
// chunk ends, with one-row and three-row pieces, one-warp blocks (dk, dv <= 32) and wider ones.
TEST(CudaOps, FusedGdnGatesAndNormAreTheThreeOpsBitForBit) {
  REQUIRE_GPU();
  std::mt19937 rng(61);
  struct Shape { int hk, hv, dk, dv; };
  for (const Shape sh : {Shape{2, 4, 18, 24}, Shape{1, 3, 32, 72}, Shape{2, 6, 128, 128}})
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "dk " << sh.dk << " dv " << sh.dv << (bf16 ? " bf16" : " f32"));
    const int hk = sh.hk, hv = sh.hv, dk = sh.dk, dv = sh.dv;
    const int conv_dim = 2 * hk * dk + hv * dv, width = hv * dv;
    // The in-projection's rows: [3 unused | z (width) | b (hv) | a (hv) | 2 unused].
    const int z_col = 3, b_col = z_col + width, a_col = b_col + hv, stride = a_col + hv + 2;
    const int seqs = 3, steps = 70;
    const int piece[seqs] = {1, 1, 3};  // rows a step; a step's rows: sequence 0, 1, then 2's three
    const int rows = 5, total = steps * rows;
    Dev<float> in(Random(size_t(total) * stride, rng, 1.0f, bf16)), mixed(Random(size_t(total) * conv_dim, rng, 0.5f, bf16));
    auto a_log = MakeW(hv, 1, rng, false, 1.0f), dt_bias = MakeW(hv, 1, rng, false, 1.0f), nw = MakeW(dv, 1, rng, false, 1.0f);
    const cuda::GdnGateNorm gn{stride, b_col, a_col, z_col, a_log->dev(), dt_bias->dev(), nw->dev(), 1e-6f};
    struct Run {
      Dev<float> beta, g, core, normed;
      Dev<uint16_t> normed_b;  // normed's twin (backend/ops.h), both ways
      std::vector<std::unique_ptr<Dev<float>>> S, pk, pvn, pgam, pkinv;
      std::vector<cuda::DevGdnState> ds;
    };
    auto fresh = [&] {
      auto r = std::unique_ptr<Run>(new Run{Dev<float>(size_t(total) * hv), Dev<float>(size_t(total) * hv),
                                            Dev<float>(size_t(total) * width), Dev<float>(size_t(total) * width),
                                            Dev<uint16_t>(size_t(total) * width), {}, {}, {}, {}, {}, {}});
      for (int s = 0; s < seqs; ++s) {
        r->S.push_back(std::make_unique<Dev<float>>(std::vector<float>(size_t(hv) * dk * dv, 0.0f)));
        r->pk.push_back(std::make_unique<Dev<float>>(size_t(kGdnChunk) * hv * dk));
        r->pvn.push_back(std::make_unique<Dev<float>>(size_t(kGdnChunk) * hv * dv));
        r->pgam.push_back(std::make_unique<Dev<float>>(size_t(kGdnChunk) * hv));
        r->pkinv.push_back(std::make_unique<Dev<float>>(size_t(kGdnChunk) * hv));
        r->ds.push_back({nullptr, r->S[s]->p, r->pk[s]->p, r->pvn[s]->p, r->pgam[s]->p, r->pkinv[s]->p, 0});
      }
      return r;
    };
    auto three = fresh(), fused = fresh();
    cuda::GdnSeq* dseqs = nullptr;
    ASSERT_EQ(cudaMalloc(&dseqs, seqs * sizeof(cuda::GdnSeq)), cudaSuccess);
    for (int step = 0; step < steps; ++step) {
      for (Run* run : {three.get(), fused.get()}) {
        const bool fuse = run == fused.get();
        const int64_t r0 = int64_t{step} * rows;
        if (!fuse) {
          ASSERT_TRUE(cuda::GdnGates(in.p + r0 * stride, stride, b_col, a_col, rows, hv, a_log->dev(), dt_bias->dev(), bf16,
                                     run->beta.p + r0 * hv, run->g.p + r0 * hv, nullptr).ok());
        }
        std::vector<cuda::GdnSeq> host;
        for (int s = 0, r = static_cast<int>(r0); s < seqs; r += piece[s], ++s) {
          cuda::GdnSeq q{mixed.p + int64_t{r} * conv_dim, run->beta.p + int64_t{r} * hv, run->g.p + int64_t{r} * hv,
                         run->core.p + int64_t{r} * width, piece[s], run->ds[s]};
          if (fuse) {
            q.in = in.p + int64_t{r} * stride;
            q.normed = run->normed.p + int64_t{r} * width;
            q.normed_b = run->normed_b.p + int64_t{r} * width;
            q.beta_out = run->beta.p + int64_t{r} * hv;
            q.g_out = run->g.p + int64_t{r} * hv;
          }
          host.push_back(q);
          run->ds[s].pending = (run->ds[s].pending + piece[s]) % kGdnChunk;
        }
        ASSERT_EQ(cudaMemcpy(dseqs, host.data(), host.size() * sizeof(cuda::GdnSeq), cudaMemcpyHostToDevice), cudaSuccess);
        ASSERT_TRUE(cuda::GdnCoreSeqs(dseqs, seqs, hk, hv, dk, dv, bf16, nullptr, fuse ? &gn : nullptr).ok());
        if (!fuse) {
          ASSERT_TRUE(cuda::GatedRmsNorm(run->core.p + r0 * width, in.p + r0 * stride, stride, z_col, rows, hv, dv,
                                         nw->dev(), 1e-6f, bf16, run->normed.p + r0 * width, nullptr,
                                         run->normed_b.p + r0 * width).ok());
        }
      }
    }
    // Gates or a norm weight shorter than the heads: a named error before anything runs.
    cuda::GdnGateNorm short_gates = gn;
    short_gates.a_log.rows = hv - 1;
    const Status refused = cuda::GdnCoreSeqs(dseqs, seqs, hk, hv, dk, dv, bf16, nullptr, &short_gates);
    EXPECT_FALSE(refused.ok());
    EXPECT_NE(refused.ToString().find("A_log"), std::string::npos) << refused.ToString();
    cudaFree(dseqs);
    EXPECT_EQ(fused->beta.Get(), three->beta.Get()) << "beta";
    EXPECT_EQ(fused->g.Get(), three->g.Get()) << "g";
    EXPECT_EQ(fused->core.Get(), three->core.Get()) << "the delta rule's rows";
    const auto normed = fused->normed.Get();
    EXPECT_EQ(normed, three->normed.Get()) << "the gated norm's rows";
    const auto twin = fused->normed_b.Get();
    EXPECT_EQ(twin, three->normed_b.Get()) << "the gated norm's twin";
    for (size_t e = 0; e < twin.size(); ++e) ASSERT_EQ(twin[e], FloatToBf16(normed[e])) << "the twin at " << e;
    EXPECT_TRUE(std::all_of(normed.begin(), normed.end(), [](float v) { return std::isfinite(v); })) << "every row written";
    for (int s = 0; s < seqs; ++s) {
      EXPECT_EQ(fused->S[s]->Get(), three->S[s]->Get()) << "state of sequence " << s;
      EXPECT_EQ(fused->ds[s].pending, three->ds[s].pending);
    }
  }
}

TEST(CudaOps, LoraTouchesOnlyItsRowsAndMatchesCpu) {
  REQUIRE_GPU();
  std::mt19937 rng(7);
  for (bool bf16 : {false, true}) {
    const int m = 9, k = 48, n_out = 40;
    // Slot 1: two modules (rows 0..15 and 16..39); slot 2: one module on all 40 columns.
    std::vector<LoraModule> s1(2), s2(1);
    auto fill = [&](LoraModule& mod, int rank, int64_t off, int64_t rows, float scale) {
      mod.rank = rank;
      mod.row_offset = off;
      mod.scale = scale;
      auto a = MakeW(rank, k, rng, true), b = MakeW(rows, rank, rng, true);
      mod.a = a->host;
      mod.b = b->host;
    };
    fill(s1[0], 3, 0, 16, 2.0f);
    fill(s1[1], 5, 16, 24, 0.5f);
    fill(s2[0], 13, 0, 40, 1.0f);
    std::vector<const std::vector<LoraModule>*> by_slot{nullptr, &s1, &s2};
    std::vector<int32_t> slots{0, 1, 2, 0, 2, 1, 1, 0, 2};
    auto x = Random(static_cast<size_t>(m) * k, rng, 1.0f, bf16);
    auto y0 = Random(static_cast<size_t>(m) * n_out, rng, 1.0f, bf16);
    auto ref = y0;
    LoraArgs ca{x.data(), m, k, slots.data(), &by_slot, ref.data(), n_out};
    CpuOps(Act(bf16), 2).LoraAdd(ca);
    // Device copies of the factors, as one array grouped by slot.
    std::vector<std::unique_ptr<Dev<uint16_t>>> keep;
    std::vector<cuda::DevLoraModule> mods;
    auto up = [&](const Weight& w) {
      keep.push_back(std::make_unique<Dev<uint16_t>>(w.bf16));
      return cuda::DevWeight{keep.back()->p, w.rows, w.cols, true};
    };
    for (const auto* v : {&s1, &s2})
      for (const auto& mod : *v) mods.push_back({up(mod.a), up(mod.b), mod.rank, mod.scale, mod.row_offset});
    std::vector<int32_t> begin{0, 0, 2, 3};
    Dev<cuda::DevLoraModule> dmods(mods);
    Dev<int32_t> dbegin(begin), dslots(slots);
    Dev<float> dx(x), dy(y0), scratch(size_t(m) * 2 * 13);
    cuda::LoraArgs g{dx.p, m, k, dslots.p, dmods.p, dbegin.p, 3, 13, dy.p, n_out, bf16, 2, 40, scratch.p};
    ASSERT_TRUE(cuda::LoraAdd(g, nullptr).ok());
    const auto got = dy.Get();
    EXPECT_EQ(got, ref) << "LoRA sums run in the CPU's order: bit for bit";
    for (int r = 0; r < m; ++r) {
      if (slots[r] != 0) continue;
      for (int j = 0; j < n_out; ++j) ASSERT_EQ(got[size_t(r) * n_out + j], y0[size_t(r) * n_out + j]) << "base row " << r;
    }
    g.max_rank = 2000;
    EXPECT_FALSE(cuda::LoraAdd(g, nullptr).ok()) << "a rank over the kernel's limit is refused";
  }
}

TEST(CudaOps, BadShapesAreRefused) {
  REQUIRE_GPU();
  cuda::DevWeight w{nullptr, 0, 4, true};
  EXPECT_FALSE(cuda::MatMul(nullptr, 1, w, nullptr, w.rows, true, true, nullptr, nullptr).ok());
  cuda::AttentionArgs a{};
  a.n = 1;
  a.num_heads = 3;
  a.num_kv_heads = 2;
  a.head_dim = 64;
  a.page_size = 16;
  EXPECT_FALSE(cuda::Attention(a, nullptr).ok()) << "heads not a multiple of kv heads";
  a.num_heads = 4;
  a.head_dim = 512;
  EXPECT_FALSE(cuda::Attention(a, nullptr).ok()) << "head_dim over 256";
  cuda::DevWeight conv{nullptr, 8, 9, true};
  EXPECT_FALSE(cuda::CausalConvSilu(nullptr, 8, 1, 8, conv, nullptr, true, nullptr, nullptr).ok()) << "kernel width 9";
}

// Sampling candidates: the device picks exactly the CPU's (values and ids), ties included, for
// greedy rows and scaled rows, k from 1 to 64, vocabularies smaller and larger than a block.
TEST(CudaOps, TopKPicksTheCpuCandidates) {
  REQUIRE_GPU();
  std::mt19937 rng(2);
  for (int vocab : {64, 300, 8192, 151936}) {
    for (int k : {1, 7, 64}) {
      const int rows = 5;
      std::vector<float> x = Random(static_cast<size_t>(rows) * vocab, rng, 4.0f, false);
      for (int i = 0; i < vocab; i += 3) x[i] = std::round(x[i]);  // ties in rows 0..
      const std::vector<float> temps = {0.0f, 0.7f, 1.0f, 1.9f, 0.0f};
      std::vector<float> want_v(rows * k), got_v;
      std::vector<int32_t> want_i(rows * k), got_i;
      CpuOps(ActDtype::kF32, 1).TopK(x.data(), rows, vocab, temps.data(), k, want_v.data(), want_i.data());
      Dev<float> dx(x), dt(temps), dv(static_cast<size_t>(rows * k));
      Dev<int32_t> di(static_cast<size_t>(rows * k));
      ASSERT_TRUE(cuda::TopK(dx.p, rows, vocab, dt.p, k, dv.p, di.p, nullptr).ok());
      got_v = dv.Get();
      got_i = di.Get();
      ASSERT_EQ(got_i, want_i) << "vocab " << vocab << " k " << k;
      ASSERT_EQ(std::memcmp(got_v.data(), want_v.data(), want_v.size() * 4), 0) << "vocab " << vocab << " k " << k;
    }
  }
  EXPECT_FALSE(cuda::TopK(nullptr, 1, 10, nullptr, 65, nullptr, nullptr, nullptr).ok()) << "k above 64";
  EXPECT_FALSE(cuda::TopK(nullptr, 1, 10, nullptr, 11, nullptr, nullptr, nullptr).ok()) << "k above vocab";
}

}  // namespace
}  // namespace graft

// The wgmma prefill GEMM (gemm_wgmma.h): its tile choice as a table (host only, runs without a
// GPU), and on the device its outputs bit for bit the mma.sync forms' (the prefill kernel and, one
// row at a time and in decode-sized batches, the decode form) over a sweep of shapes and row
// counts, in every tile shape, with every output written and nothing past N; its gated form
// (the MLP's gate|up with SiluMul in the epilogue) bit for bit the product then SiluMul.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cuda/elementwise.h"
#include "backend/cuda/gemm_decode.h"
#include "backend/cuda/gemm_pipe.h"
#include "backend/cuda/gemm_wgmma.h"
#include "backend/cuda_test_util.h"
#include "util/bf16.h"

namespace graft {
namespace {

using cuda::WgmmaForm;

TEST(GemmWgmma, FormTableForTheModelsShapes) {
  // Qwen3-32B / Qwen3.5-27B projection widths on the H200's 132 multiprocessors.
  const std::vector<int64_t> widths = {1024, 5120, 10240, 12288, 16384, 34816, 51200};
  std::string table = "rows \\ N";
  for (int64_t n : widths) table += "\t" + std::to_string(n);
  for (int64_t m : {65, 128, 512, 1024, 4096, 16384}) {
    table += "\n" + std::to_string(m);
    for (int64_t n : widths) {
      const WgmmaForm f = cuda::ChooseWgmmaForm(m, n, 132);
      EXPECT_EQ(f, cuda::ChooseWgmmaForm(m, n, 132)) << "a pure function";
      table += f == WgmmaForm::kTile128x256 ? "\t256" : f == WgmmaForm::kTile128x160 ? "\t160" : "\t128";
    }
  }
  std::printf("wgmma tile width by rows and N (132 multiprocessors):\n%s\n", table.c_str());
  // 4K rows of down (N 5120): 640 wide tiles are 5 waves (10 tile-times), 1280 narrow ones 10: wide.
  EXPECT_EQ(cuda::ChooseWgmmaForm(4096, 5120, 132), WgmmaForm::kTile128x256);
  // 1K rows: 160 wide tiles are two waves (3.6 tile-times), 320 narrow ones three (3), 256 of
  // 128 x 160 two (2.4): 160.
  EXPECT_EQ(cuda::ChooseWgmmaForm(1024, 5120, 132), WgmmaForm::kTile128x160);
  EXPECT_EQ(cuda::ChooseWgmmaForm(65, 256, 132), WgmmaForm::kTile128x128);
  // 4K rows of Qwen3-32B's gate|up (N 51200): 6400 wide tiles are 98 tile-times, 12800 narrow ones
  // 97 — within the wide tile's 10%: wide (measured 716 against 617 TFLOP/s).
  EXPECT_EQ(cuda::ChooseWgmmaForm(4096, 51200, 132), WgmmaForm::kTile128x256);
  EXPECT_EQ(cuda::ChooseWgmmaForm(16384, 51200, 132), WgmmaForm::kTile128x256);
  // No multiprocessor count: counted as one, never a division by zero.
  EXPECT_EQ(cuda::ChooseWgmmaForm(4096, 5120, 0), WgmmaForm::kTile128x256);
  EXPECT_STREQ(cuda::WgmmaFormName(WgmmaForm::kTile128x128), "wgmma 128x128");
  EXPECT_STREQ(cuda::WgmmaFormName(WgmmaForm::kTile128x160), "wgmma 128x160");
}

// A device buffer of n elements, poisoned with 0xff bytes (NaN for floats).
template <typename T>
struct Buf {
  T* p = nullptr;
  size_t n;
  explicit Buf(size_t count) : n(count) {
    EXPECT_EQ(cudaMalloc(&p, n * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemset(p, 0xff, n * sizeof(T)), cudaSuccess);
  }
  explicit Buf(const std::vector<T>& v) : Buf(v.size()) {
    EXPECT_EQ(cudaMemcpy(p, v.data(), n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  Buf(const Buf&) = delete;
  ~Buf() { cudaFree(p); }
  std::vector<T> Get() const {
    std::vector<T> v(n);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
};

std::vector<uint16_t> RandomBf16(size_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = FloatToBf16(d(rng));
  return v;
}

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(GemmWgmma, OutputsAreTheMmaSyncFormsBits) {
  REQUIRE_GPU();
  std::mt19937 rng(44);
  // m past 64 (the prefill forms' range), partial row and column tiles, K past one stage and not a
  // multiple of 64 or 16 (72, 264, 80), N not a multiple of 8, tiles for several waves (2100 x
  // 4008: 272 wide tiles, 544 narrow ones on 132 multiprocessors).
  for (auto [m, n, k] : std::vector<std::array<int, 3>>{{65, 8, 8},       {127, 136, 72},   {129, 520, 264},
                                                        {300, 256, 1040}, {200, 1001, 4096}, {1100, 4008, 80},
                                                        {2100, 4008, 1024}}) {
    SCOPED_TRACE(::testing::Message() << m << "x" << n << "x" << k);
    const auto xh = RandomBf16(static_cast<size_t>(m) * k, rng, 1.0f);
    const auto wh = RandomBf16(static_cast<size_t>(n) * k, rng, 0.1f);
    Buf<uint16_t> x(xh), w(wh);
    const int64_t ldy = n + 3;  // odd: the scalar stores; columns past N stay poisoned
    Buf<float> ref(static_cast<size_t>(m) * ldy);
    ASSERT_TRUE(cuda::GemmPipeMmaSync(x.p, m, w.p, n, k, ref.p, ldy, true, nullptr).ok());
    const auto r = ref.Get();
    for (WgmmaForm form : {WgmmaForm::kTile128x256, WgmmaForm::kTile128x160, WgmmaForm::kTile128x128}) {
      SCOPED_TRACE(cuda::WgmmaFormName(form));
      Buf<float> got(static_cast<size_t>(m) * ldy);
      ASSERT_TRUE(cuda::GemmWgmma(x.p, m, w.p, n, k, got.p, ldy, true, nullptr, &form).ok());
      const auto g = got.Get();
      for (int i = 0; i < m; ++i) {
        for (int j = 0; j < n; ++j) {
          const size_t e = static_cast<size_t>(i) * ldy + j;
          ASSERT_FALSE(std::isnan(g[e])) << "unwritten: row " << i << " col " << j;
          ASSERT_EQ(Bits(g[e]), Bits(r[e])) << "row " << i << " col " << j << ": " << g[e] << " vs " << r[e];
        }
        for (int j = n; j < ldy; ++j) ASSERT_TRUE(std::isnan(g[static_cast<size_t>(i) * ldy + j])) << "wrote past N";
      }
    }
    // Unrounded too (the split partials' mode), through the chosen form and packed rows (float2 stores).
    Buf<float> ref_raw(static_cast<size_t>(m) * n), got_raw(static_cast<size_t>(m) * n);
    ASSERT_TRUE(cuda::GemmPipeMmaSync(x.p, m, w.p, n, k, ref_raw.p, n, false, nullptr).ok());
    ASSERT_TRUE(cuda::GemmWgmma(x.p, m, w.p, n, k, got_raw.p, n, false, nullptr).ok());
    const auto rr = ref_raw.Get(), gr = got_raw.Get();
    ASSERT_EQ(std::memcmp(rr.data(), gr.data(), rr.size() * sizeof(float)), 0) << "unrounded outputs differ";
    // The decode form (K % 16 == 0, N % 8 == 0) on one row and on 64: the same bits per row.
    if (k % 16 == 0 && n % 8 == 0) {
      for (int rows : {1, 64}) {
        for (int r0 : {0, m - rows}) {
          Buf<float> one(static_cast<size_t>(rows) * n);
          ASSERT_TRUE(cuda::GemmDecode(x.p + static_cast<size_t>(r0) * k, rows, w.p, n, k, one.p, n, false, nullptr).ok());
          const auto o = one.Get();
          ASSERT_EQ(std::memcmp(o.data(), gr.data() + static_cast<size_t>(r0) * n, o.size() * sizeof(float)), 0)
              << rows << " rows from row " << r0 << " through the decode form";
        }
      }
    }
  }
}

// The gated form: act = SiluMul of GemmWgmma's rounded gate and up outputs, bit for bit, every
// activation written and nothing past inter — widths not a multiple of the 128-column tile (the
// gate box then reads up rows, the up box zeros past 2 inter), odd and even row pitches (scalar
// and paired stores), K past one stage and not a multiple of 64.
TEST(GemmWgmma, SwiGluIsTheProductThenSiluMulBits) {
  REQUIRE_GPU();
  std::mt19937 rng(45);
  for (auto [m, inter, k] : std::vector<std::array<int, 3>>{
           {65, 8, 72}, {129, 200, 264}, {300, 1024, 1040}, {1100, 136, 80}, {2100, 1280, 512}}) {
    for (int pad : {0, 1}) {
      SCOPED_TRACE(::testing::Message() << m << "x" << inter << "x" << k << " pad " << pad);
      const auto xh = RandomBf16(static_cast<size_t>(m) * k, rng, 1.0f);
      const auto wh = RandomBf16(static_cast<size_t>(2 * inter) * k, rng, 0.1f);
      Buf<uint16_t> x(xh), w(wh);
      Buf<float> gu(static_cast<size_t>(m) * 2 * inter), act_ref(static_cast<size_t>(m) * inter);
      ASSERT_TRUE(cuda::GemmWgmma(x.p, m, w.p, 2 * inter, k, gu.p, 2 * inter, true, nullptr).ok());
      ASSERT_TRUE(cuda::SiluMul(gu.p, m, inter, true, act_ref.p, nullptr).ok());
      const int64_t ld = inter + pad;
      Buf<uint16_t> act(static_cast<size_t>(m) * ld);  // 0xffff: a NaN until written
      ASSERT_TRUE(cuda::GemmWgmmaSwiGlu(x.p, m, w.p, inter, k, act.p, ld, nullptr).ok());
      const auto r = act_ref.Get();
      const auto a = act.Get();
      for (int i = 0; i < m; ++i) {
        for (int j = 0; j < inter; ++j) {
          const float got = Bf16ToFloat(a[static_cast<size_t>(i) * ld + j]);
          const float want = r[static_cast<size_t>(i) * inter + j];
          ASSERT_FALSE(std::isnan(got)) << "unwritten: row " << i << " col " << j;
          ASSERT_EQ(Bits(got), Bits(want)) << "row " << i << " col " << j << ": " << got << " vs " << want;
        }
        for (int j = inter; j < ld; ++j) ASSERT_EQ(a[static_cast<size_t>(i) * ld + j], 0xffff) << "wrote past inter";
      }
    }
  }
  Buf<uint16_t> x(size_t{130} * 72), w(size_t{64} * 72), act(size_t{130} * 32);
  const Status s = cuda::GemmWgmmaSwiGlu(x.p, 130, w.p, 32, 72, act.p, 31, nullptr);  // ld_act < inter
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("GemmWgmmaSwiGlu"), std::string::npos) << s.message();
}

TEST(GemmWgmma, BadShapesAreRefusedByName) {
  REQUIRE_GPU();
  Buf<uint16_t> x(size_t{130} * 72), w(size_t{64} * 72);
  Buf<float> y(size_t{130} * 64);
  for (const auto& [m, n, k, ldy, off] : std::vector<std::array<int, 5>>{
           {130, 64, 70, 64, 0},   // K % 8 != 0: the copy engine's row pitch
           {130, 64, 72, 63, 0},   // ldy < N
           {0, 64, 72, 64, 0},     // no rows
           {130, 64, 64, 64, 1}}) {  // x not 16-byte aligned
    const Status s = cuda::GemmWgmma(x.p + off, m, w.p, n, k, y.p, ldy, true, nullptr);
    EXPECT_FALSE(s.ok()) << m << "x" << n << "x" << k << " ldy " << ldy;
    EXPECT_NE(s.message().find("GemmWgmma"), std::string::npos) << s.message();
  }
}

}  // namespace
}  // namespace graft

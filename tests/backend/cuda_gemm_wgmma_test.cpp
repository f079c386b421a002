// The wgmma prefill GEMM (gemm_wgmma.h): its tile choice as a table (host only, runs without a
// GPU), and on the device its outputs bit for bit the mma.sync forms' (the prefill kernel and, one
// row at a time and in decode-sized batches, the decode form) over a sweep of shapes and row
// counts, in every tile shape, with every output written and nothing past N; its gated form
// (the MLP's gate|up with SiluMul in the epilogue) bit for bit the product then SiluMul.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda/elementwise.h"
#include "backend/cuda/gemm_decode.h"
#include "backend/cuda/gemm_pipe.h"
#include "backend/cuda/gemm_wgmma.h"
#include "backend/cuda/lora.h"
#include "backend/cuda/matmul.h"
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

TEST(GemmWgmma, SwiGluFormFillsTheWaves) {
  using F = cuda::SwiGluForm;
  std::string table = "rows \\ inter";
  const std::vector<int64_t> inters = {12288, 17408, 25600};  // Qwen3-8B, Qwen3.5-27B, Qwen3-32B
  for (int64_t i : inters) table += "\t" + std::to_string(i);
  for (int64_t m : {65, 189, 280, 1024, 4096, 16384}) {
    table += "\n" + std::to_string(m);
    for (int64_t i : inters) table += std::string("\t") + (cuda::ChooseSwiGluForm(m, i, 132) == F::kPairs136 ? "136" : "128");
  }
  std::printf("gated MLP tile pairing by rows and activations (132 multiprocessors):\n%s\n", table.c_str());
  // Qwen3.5-27B's 17,408 activations: 136 tiles of 128 (one past a wave of 132) or 128 of 136.
  EXPECT_EQ(cuda::ChooseSwiGluForm(100, 17408, 132), F::kPairs136);   // one wave against two
  EXPECT_EQ(cuda::ChooseSwiGluForm(280, 17408, 132), F::kPairs136);   // 408 tiles: 4 waves; 384: 3
  EXPECT_EQ(cuda::ChooseSwiGluForm(4096, 17408, 132), F::kPairs128);  // 33 waves of 128 against 32 of 136
  EXPECT_EQ(cuda::ChooseSwiGluForm(65, 12288, 132), F::kPairs128);    // 96 tiles either way: the narrower
  EXPECT_EQ(cuda::ChooseSwiGluForm(65, 17408, 0), F::kPairs128) << "no multiprocessor count: counted as one";
  EXPECT_STREQ(cuda::SwiGluFormName(F::kPairs136), "wgmma 128x(2x136)");
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

// The split form: each K slice's unrounded product bit for bit the mma.sync kernel's split
// (MatMulSplitK's contract; a LoRA A product of rank N) in every tile shape — slices of one stage
// and of sixteen, a last slice shorter than the rest and not a multiple of 64 or 16, N not a
// multiple of 8, partial row tiles; every slice's outputs written and nothing past N. Slices
// that are no multiple of 64 columns are refused by name.
TEST(GemmWgmma, SplitKIsTheMmaSyncSplitsBits) {
  REQUIRE_GPU();
  std::mt19937 rng(49);
  struct Case {
    int m, n, k, split;
  };
  for (const Case c : std::vector<Case>{{65, 256, 5120, 1024}, {300, 200, 1096, 1024}, {1100, 8, 2056, 1024},
                                        {129, 768, 200, 64}, {2100, 256, 17408, 1024}}) {
    SCOPED_TRACE(::testing::Message() << c.m << "x" << c.n << "x" << c.k << " split " << c.split);
    const int64_t slices = (c.k + c.split - 1) / c.split, ldy = c.n + 1;
    Buf<uint16_t> x(RandomBf16(static_cast<size_t>(c.m) * c.k, rng, 1.0f)), w(RandomBf16(static_cast<size_t>(c.n) * c.k, rng, 0.1f));
    Buf<float> ref(static_cast<size_t>(slices * c.m * ldy));
    ASSERT_TRUE(cuda::GemmPipeMmaSync(x.p, c.m, w.p, c.n, c.k, ref.p, ldy, false, nullptr, c.split).ok());
    const auto r = ref.Get();
    for (WgmmaForm form : {WgmmaForm::kTile128x256, WgmmaForm::kTile128x160, WgmmaForm::kTile128x128}) {
      SCOPED_TRACE(cuda::WgmmaFormName(form));
      Buf<float> got(static_cast<size_t>(slices * c.m * ldy));
      const Status st = cuda::GemmWgmmaSplitK(x.p, c.m, w.p, c.n, c.k, c.split, got.p, ldy, nullptr, &form);
      ASSERT_TRUE(st.ok()) << st.ToString();
      const auto g = got.Get();
      for (int64_t e = 0; e < slices * c.m * ldy; ++e) {
        const int64_t col = e % ldy;
        if (col >= c.n) {
          ASSERT_TRUE(std::isnan(g[static_cast<size_t>(e)])) << "wrote past N at slice " << e / (c.m * ldy);
          continue;
        }
        ASSERT_EQ(Bits(g[static_cast<size_t>(e)]), Bits(r[static_cast<size_t>(e)]))
            << "slice " << e / (c.m * ldy) << " row " << e / ldy % c.m << " col " << col;
      }
    }
  }
  Buf<uint16_t> x(size_t{130} * 256), w(size_t{64} * 256);
  Buf<float> y(size_t{130} * 64 * 4);
  for (int64_t split : {0, 32, 100}) {
    const Status st = cuda::GemmWgmmaSplitK(x.p, 130, w.p, 64, 256, split, y.p, 64, nullptr);
    EXPECT_FALSE(st.ok()) << split;
    EXPECT_NE(st.message().find("GemmWgmmaSplitK"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("multiple of 64"), std::string::npos) << st.message();
  }
}

// The summed split form (a LoRA A product at prefill sizes): bit for bit the mma.sync kernel's
// slices summed in ascending order and rounded once to bf16 (MatMulSplitK then
// SumSplitsBf16Blocks), into one block or several stacked ones (q|k|v's, Qwen3.5's 48-wide b / a
// beside wider ones) — one slice, five, a last slice shorter and no multiple of 64, partial row
// tiles, N no multiple of 128; nothing written past each block. Bad blocks are refused by name.
TEST(GemmWgmma, SplitKSumIsTheSlicesSummedInOrderBits) {
  REQUIRE_GPU();
  std::mt19937 rng(53);
  struct Case {
    int m, k, split;
    std::vector<int64_t> starts;
  };
  for (const Case& c : std::vector<Case>{{33, 5120, 1024, {0, 256}},
                                         {300, 5120, 1024, {0, 256, 512, 768}},
                                         {1100, 2056, 1024, {0, 64, 112, 160}},
                                         {129, 1000, 1024, {0, 48}},
                                         {4100, 17408, 1024, {0, 256}}}) {
    const int blocks = static_cast<int>(c.starts.size()) - 1;
    const int64_t n = c.starts.back();
    SCOPED_TRACE(::testing::Message() << c.m << "x" << n << "x" << c.k << " in " << blocks << " blocks");
    const int64_t slices = (c.k + c.split - 1) / c.split;
    Buf<uint16_t> x(RandomBf16(static_cast<size_t>(c.m) * c.k, rng, 1.0f)), w(RandomBf16(static_cast<size_t>(n) * c.k, rng, 0.05f));
    Buf<float> part(static_cast<size_t>(slices * c.m * n));
    ASSERT_TRUE(cuda::GemmPipeMmaSync(x.p, c.m, w.p, n, c.k, part.p, n, false, nullptr, c.split).ok());
    const auto p = part.Get();
    const size_t guard = 64;  // words past the last block: never written
    std::vector<uint16_t> canary(static_cast<size_t>(c.m * n) + guard, 0xFFFFu);
    Buf<uint16_t> got(canary);
    const Status st = cuda::GemmWgmmaSplitKSum(x.p, c.m, w.p, n, c.k, c.split, c.starts.data(), blocks, got.p, nullptr);
    ASSERT_TRUE(st.ok()) << st.ToString();
    const auto g = got.Get();
    for (int b = 0; b < blocks; ++b) {
      const int64_t lo = c.starts[static_cast<size_t>(b)], width = c.starts[static_cast<size_t>(b) + 1] - lo;
      for (int64_t r = 0; r < c.m; ++r) {
        for (int64_t j = 0; j < width; ++j) {
          const int64_t e = r * n + lo + j;
          float sum = p[static_cast<size_t>(e)];
          for (int64_t z = 1; z < slices; ++z) sum = sum + p[static_cast<size_t>(z * c.m * n + e)];
          const uint16_t want = FloatToBf16(sum);
          ASSERT_EQ(g[static_cast<size_t>(c.m * lo + r * width + j)], want)
              << "block " << b << " row " << r << " col " << j << ": " << sum;
        }
      }
    }
    for (size_t e = static_cast<size_t>(c.m * n); e < g.size(); ++e) ASSERT_EQ(g[e], 0xFFFFu) << "wrote past the blocks";
    // A run of the rows, [m / 3, 2 m / 3), placed into arrays of all m rows (BlockRows) — by the
    // summed form and by the split form's partials summed (SumSplitsBf16Blocks): its rows' bits
    // where the whole call put them, every other row untouched.
    const int64_t r0 = c.m / 3, mr = 2 * c.m / 3 - r0;
    const cuda::BlockRows place{c.m, r0};
    Buf<uint16_t> placed(canary), placed_split(canary);
    ASSERT_TRUE(cuda::GemmWgmmaSplitKSum(x.p + r0 * c.k, mr, w.p, n, c.k, c.split, c.starts.data(), blocks, placed.p,
                                         nullptr, place).ok());
    Buf<float> run_part(static_cast<size_t>(slices * mr * n));
    ASSERT_TRUE(cuda::GemmPipeMmaSync(x.p + r0 * c.k, mr, w.p, n, c.k, run_part.p, n, false, nullptr, c.split).ok());
    cuda::DevWeight dw{};
    dw.data = w.p;
    dw.rows = n;
    dw.cols = c.k;
    dw.bf16 = true;
    if (c.split == cuda::SplitKColumns(c.k)) {  // SumSplitsBf16Blocks' slices are SplitKColumns(K)'s
      ASSERT_TRUE(cuda::SumSplitsBf16Blocks(run_part.p, mr, dw, c.starts.data(), blocks, placed_split.p, nullptr, place).ok());
    }
    for (const auto* buf : {&placed, &placed_split}) {
      if (buf == &placed_split && c.split != cuda::SplitKColumns(c.k)) continue;
      const auto pg = buf->Get();
      for (int b = 0; b < blocks; ++b) {
        const int64_t lo = c.starts[static_cast<size_t>(b)], width = c.starts[static_cast<size_t>(b) + 1] - lo;
        for (int64_t r = 0; r < c.m; ++r) {
          const bool in = r >= r0 && r < r0 + mr;
          for (int64_t j = 0; j < width; ++j) {
            const size_t e = static_cast<size_t>(c.m * lo + r * width + j);
            ASSERT_EQ(pg[e], in ? g[e] : uint16_t{0xFFFFu}) << "placed: block " << b << " row " << r << " col " << j;
          }
        }
      }
    }
  }
  Buf<uint16_t> x(size_t{130} * 256), w(size_t{64} * 256), y(size_t{130} * 64);
  const int64_t bad_end[2] = {0, 60}, bad_order[4] = {0, 40, 30, 64};
  const int64_t whole[2] = {0, 64};
  EXPECT_NE(cuda::GemmWgmmaSplitKSum(x.p, 130, w.p, 64, 256, 1024, bad_end, 1, y.p, nullptr).message().find("blocks from output 0 to N"),
            std::string::npos);
  EXPECT_NE(cuda::GemmWgmmaSplitKSum(x.p, 130, w.p, 64, 256, 1024, bad_order, 3, y.p, nullptr).message().find("out of order"),
            std::string::npos);
  EXPECT_NE(cuda::GemmWgmmaSplitKSum(x.p, 130, w.p, 64, 256, 100, whole, 1, y.p, nullptr).message().find("multiple of 64"),
            std::string::npos);
  EXPECT_NE(cuda::GemmWgmmaSplitKSum(x.p, 130, w.p, 64, 256, 1024, whole, 1, y.p, nullptr, cuda::BlockRows{130, 1})
                .message()
                .find("not inside arrays of 130"),
            std::string::npos);
}

// The decode form's LoRA epilogue (GemmDecodeAddRows): bit for bit its rounded product then
// LoraScatterAdd, into rows picked by a map (a gathered adapter's) or in order, at every decode
// row count's shape, narrow (48 outputs: Qwen3.5's b / a gates) and wide; y's other rows and
// columns untouched, and a -0 in y keeps what LoraScatterAdd makes of it.
TEST(GemmDecode, AddRowsIsTheProductThenLoraScatterAdd) {
  REQUIRE_GPU();
  std::mt19937 rng(50);
  for (int m : {1, 5, 33, 64}) {
    for (auto [n, k] : std::vector<std::array<int, 2>>{{48, 256}, {1024, 16}, {8192, 64}}) {
      for (bool mapped : {false, true}) {
        SCOPED_TRACE(::testing::Message() << m << " rows, " << n << "x" << k << (mapped ? ", mapped rows" : ""));
        const int ld = n + 24, off = 8, y_rows = m + 3;
        Buf<uint16_t> x(RandomBf16(static_cast<size_t>(m) * k, rng, 1.0f)), w(RandomBf16(static_cast<size_t>(n) * k, rng, 0.1f));
        std::vector<float> y0(static_cast<size_t>(y_rows) * ld);
        for (auto& v : y0) v = Bf16ToFloat(RandomBf16(1, rng, 1.0f)[0]);
        y0[static_cast<size_t>(off)] = -0.0f;
        std::vector<int32_t> rows_h(static_cast<size_t>(m));
        for (int i = 0; i < m; ++i) rows_h[static_cast<size_t>(i)] = mapped ? (i * 7 + 2) % y_rows : i;
        if (mapped) std::sort(rows_h.begin(), rows_h.end());
        rows_h.erase(std::unique(rows_h.begin(), rows_h.end()), rows_h.end());
        const int mm = static_cast<int>(rows_h.size());  // distinct targets
        Buf<int32_t> rows(rows_h);
        Buf<float> want(y0), got(y0), u(static_cast<size_t>(mm) * n);
        ASSERT_TRUE(cuda::GemmDecode(x.p, mm, w.p, n, k, u.p, n, true, nullptr).ok());
        ASSERT_TRUE(cuda::LoraScatterAdd(u.p, mm, n, rows.p, 0.75f, off, want.p, ld, true, nullptr).ok());
        const Status st = cuda::GemmDecodeAddRows(x.p, mm, w.p, n, k, got.p + off, ld, mapped ? rows.p : nullptr, 0.75f, nullptr);
        ASSERT_TRUE(st.ok()) << st.ToString();
        const auto g = got.Get(), r = want.Get();
        for (size_t e = 0; e < g.size(); ++e) {
          ASSERT_EQ(Bits(g[e]), Bits(r[e])) << "y row " << e / ld << " col " << e % ld << ": " << g[e] << " vs " << r[e];
        }
      }
    }
  }
}

// The gated form: act = SiluMul of GemmWgmma's rounded gate and up outputs, bit for bit, in both
// pairings, every activation written and nothing past inter — widths not a multiple of the 128- or
// 136-column tile (the gate box then reads up rows, the up box zeros past 2 inter), odd and even row pitches (scalar
// and paired stores), K past one stage and not a multiple of 64.
TEST(GemmWgmma, SwiGluIsTheProductThenSiluMulBits) {
  REQUIRE_GPU();
  std::mt19937 rng(45);
  for (auto [m, inter, k] : std::vector<std::array<int, 3>>{
           {65, 8, 72}, {129, 200, 264}, {300, 1024, 1040}, {1100, 136, 80}, {2100, 1280, 512}, {189, 544, 320}}) {
    for (int pad : {0, 1}) {
      SCOPED_TRACE(::testing::Message() << m << "x" << inter << "x" << k << " pad " << pad);
      const auto xh = RandomBf16(static_cast<size_t>(m) * k, rng, 1.0f);
      const auto wh = RandomBf16(static_cast<size_t>(2 * inter) * k, rng, 0.1f);
      Buf<uint16_t> x(xh), w(wh);
      Buf<float> gu(static_cast<size_t>(m) * 2 * inter), act_ref(static_cast<size_t>(m) * inter);
      ASSERT_TRUE(cuda::GemmWgmma(x.p, m, w.p, 2 * inter, k, gu.p, 2 * inter, true, nullptr).ok());
      ASSERT_TRUE(cuda::SiluMul(gu.p, m, inter, true, act_ref.p, nullptr).ok());
      const int64_t ld = inter + pad;
      const auto r = act_ref.Get();
      for (cuda::SwiGluForm form : {cuda::SwiGluForm::kPairs128, cuda::SwiGluForm::kPairs136}) {
        SCOPED_TRACE(cuda::SwiGluFormName(form));
        Buf<uint16_t> act(static_cast<size_t>(m) * ld);  // 0xffff: a NaN until written
        ASSERT_TRUE(cuda::GemmWgmmaSwiGlu(x.p, m, w.p, inter, k, act.p, ld, nullptr, &form).ok());
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
  }
  Buf<uint16_t> x(size_t{130} * 72), w(size_t{64} * 72), act(size_t{130} * 32);
  const Status s = cuda::GemmWgmmaSwiGlu(x.p, 130, w.p, 32, 72, act.p, 31, nullptr);  // ld_act < inter
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("GemmWgmmaSwiGlu"), std::string::npos) << s.message();
}

// The LoRA form: each tile inside a segment adds t · Bᵀ's rounded, scaled, rounded delta to its
// rounded base output — bit for bit GemmWgmma (rounded), the mma.sync product of t and B (rounded)
// and LoraScatterAdd; columns outside every segment the plain product's bits; nothing past N.
// Ranks below one stage (8), not a multiple of 64 (200) and over several (256); K not a multiple
// of 64; partial row tiles; a segment ending at N inside a tile; scalar and paired stores. With
// row slots, a third of the rows on another slot get the plain rounded product — row 1's first
// output a -0 where the tensor cores keep a subnormal product (1e-21 · -1e-21 rounds to a bf16
// -0), which an added +0 delta would turn +0.
TEST(GemmWgmma, LoraIsTheProductThenTheDeltaBits) {
  REQUIRE_GPU();
  std::mt19937 rng(48);
  struct Seg {
    int64_t begin, cols;
    int rank;
    float scale;
  };
  struct Case {
    int m, n, k;
    std::vector<Seg> segs;
    std::vector<WgmmaForm> forms;
  };
  const std::vector<Case> cases = {
      {65, 1000, 72, {{0, 256, 64, 2.0f}, {512, 488, 8, 0.5f}}, {WgmmaForm::kTile128x256, WgmmaForm::kTile128x128}},
      // Segments inside and across tiles: a 48-wide pair side by side in one tile (Qwen3.5's b and
      // a gates), one from inside a tile to inside the next, columns in no segment between.
      {200, 1000, 136, {{0, 300, 64, 1.0f}, {400, 48, 16, 2.0f}, {448, 48, 8, 0.5f}, {600, 330, 72, 0.25f}},
       {WgmmaForm::kTile128x256, WgmmaForm::kTile128x160, WgmmaForm::kTile128x128}},
      {300, 640, 264, {{0, 640, 200, 0.125f}}, {WgmmaForm::kTile128x256, WgmmaForm::kTile128x160, WgmmaForm::kTile128x128}},
      {1100, 1024, 1024, {{0, 256, 256, 1.0f}, {256, 128, 16, 3.0f}, {384, 384, 64, 0.25f}, {768, 256, 8, 2.0f}},
       {WgmmaForm::kTile128x128}},
  };
  for (const Case& c : cases) {
    for (int pad : {0, 1}) {
      SCOPED_TRACE(::testing::Message() << c.m << "x" << c.n << "x" << c.k << " pad " << pad);
      const int64_t ldy = c.n + pad;
      std::vector<uint16_t> xh = RandomBf16(static_cast<size_t>(c.m) * c.k, rng, 1.0f);
      std::vector<uint16_t> wh = RandomBf16(static_cast<size_t>(c.n) * c.k, rng, 0.1f);
      // Row 1, column 0: 1e-21 · -1e-21, an fp32 product that rounds to a bf16 -0.
      std::fill(xh.begin() + c.k, xh.begin() + 2 * c.k, uint16_t{0});
      xh[static_cast<size_t>(c.k)] = FloatToBf16(1e-21f);
      wh[0] = FloatToBf16(-1e-21f);
      Buf<uint16_t> x(xh), w(wh);
      std::vector<std::unique_ptr<Buf<uint16_t>>> ts, bs;
      std::vector<cuda::WgmmaLoraSegment> segs;
      for (const Seg& g : c.segs) {
        ts.push_back(std::make_unique<Buf<uint16_t>>(RandomBf16(static_cast<size_t>(c.m) * g.rank, rng, 1.0f)));
        bs.push_back(std::make_unique<Buf<uint16_t>>(RandomBf16(static_cast<size_t>(g.cols) * g.rank, rng, 0.1f)));
        segs.push_back({ts.back()->p, bs.back()->p, g.begin, g.cols, g.rank, g.scale});
        segs.back().slot = 5;
      }
      // The reference: the rounded product, each delta's rounded product, LoraScatterAdd.
      Buf<float> ref(static_cast<size_t>(c.m) * ldy);
      ASSERT_TRUE(cuda::GemmPipeMmaSync(x.p, c.m, w.p, c.n, c.k, ref.p, ldy, true, nullptr).ok());
      const auto plain = ref.Get();
      if (Bits(plain[static_cast<size_t>(ldy)]) != 0x80000000u) {
        std::printf("note: row 1's first output is %g, not -0 (subnormal products flushed): no -0 to keep\n",
                    plain[static_cast<size_t>(ldy)]);
      }
      std::vector<int32_t> rows_h(static_cast<size_t>(c.m));
      for (int i = 0; i < c.m; ++i) rows_h[static_cast<size_t>(i)] = i;
      Buf<int32_t> rows(rows_h);
      for (size_t i = 0; i < segs.size(); ++i) {
        Buf<float> u(static_cast<size_t>(c.m) * segs[i].cols);
        ASSERT_TRUE(cuda::GemmPipeMmaSync(segs[i].t, c.m, segs[i].b, segs[i].cols, segs[i].rank, u.p, segs[i].cols, true,
                                          nullptr).ok());
        ASSERT_TRUE(cuda::LoraScatterAdd(u.p, c.m, segs[i].cols, rows.p, segs[i].scale, segs[i].col_begin, ref.p, ldy,
                                         true, nullptr).ok());
      }
      const auto r = ref.Get();
      std::vector<int32_t> slots_h(static_cast<size_t>(c.m));
      for (int i = 0; i < c.m; ++i) slots_h[static_cast<size_t>(i)] = i % 3 == 1 ? 0 : 5;
      Buf<int32_t> slots(slots_h);
      for (WgmmaForm form : c.forms) {
        for (bool masked : {false, true}) {
          SCOPED_TRACE(::testing::Message() << cuda::WgmmaFormName(form) << (masked ? ", rows on slots" : ""));
          Buf<float> got(static_cast<size_t>(c.m) * ldy);
          const Status st = cuda::GemmWgmmaLora(x.p, c.m, w.p, c.n, c.k, got.p, ldy, segs.data(),
                                                static_cast<int>(segs.size()), form, nullptr, masked ? slots.p : nullptr);
          ASSERT_TRUE(st.ok()) << st.ToString();
          const auto g = got.Get();
          for (int i = 0; i < c.m; ++i) {
            const auto& want = masked && i % 3 == 1 ? plain : r;
            for (int j = 0; j < c.n; ++j) {
              const size_t e = static_cast<size_t>(i) * ldy + j;
              ASSERT_FALSE(std::isnan(g[e])) << "unwritten: row " << i << " col " << j;
              ASSERT_EQ(Bits(g[e]), Bits(want[e])) << "row " << i << " col " << j << ": " << g[e] << " vs " << want[e];
            }
            for (int j = c.n; j < ldy; ++j) ASSERT_TRUE(std::isnan(g[static_cast<size_t>(i) * ldy + j])) << "wrote past N";
          }
        }
      }
    }
  }
  // Refused by name: a segment past N, a rank that is no multiple of 8, overlapping segments of one
  // adapter, none or too many, rows past m, a segment without B, several adapters' segments without
  // row slots.
  Buf<uint16_t> x(size_t{130} * 72), w(size_t{512} * 72), t(size_t{130} * 64), b(size_t{512} * 64);
  Buf<float> y(size_t{130} * 512);
  auto run = [&](std::vector<cuda::WgmmaLoraSegment> segs, WgmmaForm form) {
    return cuda::GemmWgmmaLora(x.p, 130, w.p, 512, 72, y.p, 512, segs.data(), static_cast<int>(segs.size()), form, nullptr);
  };
  const cuda::WgmmaLoraSegment ok{t.p, b.p, 0, 128, 64, 1.0f};
  cuda::WgmmaLoraSegment other = ok, past = ok;
  other.slot = 2;
  past.row_end = 131;
  for (const auto& [what, st] : std::vector<std::pair<std::string, Status>>{
           {"not inside", run({{t.p, b.p, 400, 200, 64, 1.0f}}, WgmmaForm::kTile128x128)},
           {"not inside", run({{t.p, b.p, -8, 128, 64, 1.0f}}, WgmmaForm::kTile128x160)},
           {"multiple of 8", run({{t.p, b.p, 0, 128, 12, 1.0f}}, WgmmaForm::kTile128x128)},
           {"overlap", run({ok, ok}, WgmmaForm::kTile128x128)},
           {"segments", run({}, WgmmaForm::kTile128x128)},
           {"segments", run(std::vector<cuda::WgmmaLoraSegment>(cuda::kWgmmaMaxLoraSegments + 1, ok), WgmmaForm::kTile128x128)},
           {"not inside the 130 rows", run({past}, WgmmaForm::kTile128x128)},
           {"no t or no B", run({{t.p, nullptr, 0, 128, 64, 1.0f}}, WgmmaForm::kTile128x128)},
           {"need row_slot", run({ok, other}, WgmmaForm::kTile128x128)}}) {
    EXPECT_FALSE(st.ok()) << what;
    EXPECT_NE(st.message().find("GemmWgmmaLora"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find(what), std::string::npos) << st.message();
  }
}

// The gated form with LoRA deltas: act = SiluMul of the gate|up product with each present
// module's delta added as LoraScatterAdd adds it — bit for bit the mma.sync product (rounded), the
// deltas' products (rounded), LoraScatterAdd, SiluMul; with row slots a third of the rows take no
// delta (the plain gated form's bits); both pairings. Gate and up modules, gate only, up only; ranks below one
// stage, not a multiple of 64 and several stages; widths not a multiple of the 136-pair tile;
// partial row tiles; scalar and paired stores. Bad segments refused by name.
TEST(GemmWgmma, SwiGluLoraIsTheLoraProductThenSiluMulBits) {
  REQUIRE_GPU();
  std::mt19937 rng(52);
  struct Case {
    int m, inter, k, gate_rank, up_rank;  // rank 0: no module
  };
  for (const Case& c : std::vector<Case>{{65, 136, 72, 64, 8}, {300, 200, 264, 200, 0}, {1100, 544, 1024, 0, 256},
                                         {189, 1280, 320, 16, 256}}) {
    for (int pad : {0, 1}) {
      SCOPED_TRACE(::testing::Message() << c.m << "x" << c.inter << "x" << c.k << " ranks " << c.gate_rank << "/"
                                        << c.up_rank << " pad " << pad);
      const int64_t n = 2 * int64_t{c.inter}, ld = c.inter + pad;
      Buf<uint16_t> x(RandomBf16(static_cast<size_t>(c.m) * c.k, rng, 1.0f));
      Buf<uint16_t> w(RandomBf16(static_cast<size_t>(n) * c.k, rng, 0.1f));
      std::vector<std::unique_ptr<Buf<uint16_t>>> held;
      cuda::WgmmaLoraSegment segs[2];
      std::vector<cuda::WgmmaLoraSegment> present;
      const int ranks[2] = {c.gate_rank, c.up_rank};
      const float scales[2] = {2.0f, 0.375f};
      for (int i = 0; i < 2; ++i) {
        if (ranks[i] == 0) continue;
        held.push_back(std::make_unique<Buf<uint16_t>>(RandomBf16(static_cast<size_t>(c.m) * ranks[i], rng, 1.0f)));
        const uint16_t* t = held.back()->p;
        held.push_back(std::make_unique<Buf<uint16_t>>(RandomBf16(static_cast<size_t>(c.inter) * ranks[i], rng, 0.1f)));
        segs[i] = {t, held.back()->p, i * int64_t{c.inter}, c.inter, ranks[i], scales[i]};
        segs[i].slot = 4;
        present.insert(present.begin(), segs[i]);  // the up's first: the order given is not the order run
      }
      // References: the plain rounded product and the product with every delta added.
      Buf<float> plain(static_cast<size_t>(c.m) * n), with(static_cast<size_t>(c.m) * n);
      ASSERT_TRUE(cuda::GemmPipeMmaSync(x.p, c.m, w.p, n, c.k, plain.p, n, true, nullptr).ok());
      ASSERT_TRUE(cuda::GemmPipeMmaSync(x.p, c.m, w.p, n, c.k, with.p, n, true, nullptr).ok());
      std::vector<int32_t> rows_h(static_cast<size_t>(c.m));
      for (int i = 0; i < c.m; ++i) rows_h[static_cast<size_t>(i)] = i;
      Buf<int32_t> rows(rows_h);
      for (const auto& g : segs) {
        if (g.t == nullptr) continue;
        Buf<float> u(static_cast<size_t>(c.m) * g.cols);
        ASSERT_TRUE(cuda::GemmPipeMmaSync(g.t, c.m, g.b, g.cols, g.rank, u.p, g.cols, true, nullptr).ok());
        ASSERT_TRUE(cuda::LoraScatterAdd(u.p, c.m, g.cols, rows.p, g.scale, g.col_begin, with.p, n, true, nullptr).ok());
      }
      const auto plain_h = plain.Get(), with_h = with.Get();
      std::vector<int32_t> slots_h(static_cast<size_t>(c.m));
      for (int i = 0; i < c.m; ++i) slots_h[static_cast<size_t>(i)] = i % 3 == 1 ? 0 : 4;
      Buf<int32_t> slots(slots_h);
      for (bool masked : {false, true}) {
        SCOPED_TRACE(masked ? "rows on slots" : "every row");
        std::vector<float> gu_h(with_h);
        for (int i = 0; masked && i < c.m; ++i) {
          if (i % 3 != 1) continue;
          std::copy_n(plain_h.begin() + static_cast<int64_t>(i) * n, n, gu_h.begin() + static_cast<int64_t>(i) * n);
        }
        Buf<float> gu(gu_h), want_d(static_cast<size_t>(c.m) * c.inter);
        ASSERT_TRUE(cuda::SiluMul(gu.p, c.m, c.inter, true, want_d.p, nullptr).ok());
        const auto want = want_d.Get();
        for (cuda::SwiGluForm form : {cuda::SwiGluForm::kPairs128, cuda::SwiGluForm::kPairs136}) {
          SCOPED_TRACE(cuda::SwiGluFormName(form));
          Buf<uint16_t> act(static_cast<size_t>(c.m) * ld);  // 0xffff: a NaN until written
          const Status st = cuda::GemmWgmmaSwiGluLora(x.p, c.m, w.p, c.inter, c.k, act.p, ld, present.data(),
                                                      static_cast<int>(present.size()), nullptr,
                                                      masked ? slots.p : nullptr, &form);
          ASSERT_TRUE(st.ok()) << st.ToString();
          const auto a = act.Get();
          for (int i = 0; i < c.m; ++i) {
            for (int j = 0; j < c.inter; ++j) {
              const float got = Bf16ToFloat(a[static_cast<size_t>(i) * ld + j]);
              const float ref = want[static_cast<size_t>(i) * c.inter + j];
              ASSERT_FALSE(std::isnan(got)) << "unwritten: row " << i << " col " << j;
              ASSERT_EQ(Bits(got), Bits(ref)) << "row " << i << " col " << j << ": " << got << " vs " << ref;
            }
            for (int j = c.inter; j < ld; ++j) ASSERT_EQ(a[static_cast<size_t>(i) * ld + j], 0xffff) << "wrote past inter";
          }
        }
      }
    }
  }
  Buf<uint16_t> x(size_t{130} * 72), w(size_t{272} * 72), t(size_t{130} * 64), b(size_t{136} * 64), act(size_t{130} * 136);
  const cuda::WgmmaLoraSegment gate{t.p, b.p, 0, 136, 64, 1.0f};
  cuda::WgmmaLoraSegment other = gate;
  other.slot = 3;
  using Segs = std::vector<cuda::WgmmaLoraSegment>;
  for (const auto& [what, segs] : std::vector<std::pair<std::string, Segs>>{
           {"segments", {}},
           {"must cover", {{t.p, b.p, 0, 100, 64, 1.0f}}},                 // not the whole gate
           {"starts neither", {{t.p, b.p, 40, 136, 64, 1.0f}}},            // neither the gate's nor the up's
           {"multiple of 8", {{t.p, b.p, 0, 136, 12, 1.0f}}},
           {"two segments of one adapter on the gate", {gate, gate}},
           {"need row_slot", {gate, other}}}) {
    const Status st =
        cuda::GemmWgmmaSwiGluLora(x.p, 130, w.p, 136, 72, act.p, 136, segs.data(), static_cast<int>(segs.size()), nullptr);
    EXPECT_FALSE(st.ok()) << what;
    EXPECT_NE(st.message().find("GemmWgmmaSwiGluLora"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find(what), std::string::npos) << st.message();
  }
}

// Several adapters in one product (a step's sequences on different fine-tunes): each row takes
// its own adapter's segments — modules on the same columns, on parts of them, ranks of one stage
// and several — and base rows none; each adapter's t is zeros on the rows of the others. Bit for
// bit the plain product with each adapter's deltas added on its rows alone (LoraScatterAdd), in
// both the plain and the gated form, whatever the tile shape; rows of one adapter in several
// runs, tiles holding rows of two, three or no adapters.
TEST(GemmWgmma, SeveralAdaptersEachTakeTheirOwnDeltas) {
  REQUIRE_GPU();
  std::mt19937 rng(61);
  const int m = 400, k = 136, n = 520, inter = 136;
  // Rows: [0, 100) adapter 1, [100, 130) base, [130, 250) adapter 2, [250, 260) adapter 1 again,
  // [260, 330) adapter 3, [330, 400) adapter 2 again.
  std::vector<int32_t> slot_of(m, 0);
  for (const auto& [r0, r1, s] : std::vector<std::array<int, 3>>{
           {0, 100, 1}, {130, 250, 2}, {250, 260, 1}, {260, 330, 3}, {330, 400, 2}}) {
    std::fill(slot_of.begin() + r0, slot_of.begin() + r1, s);
  }
  Buf<int32_t> slots(slot_of);
  struct Mod {
    int32_t slot;
    int64_t begin, cols;
    int rank;
    float scale;
  };
  // Builds each module's t (random on its adapter's rows, zeros elsewhere) and B; the reference
  // adds each one's delta to its adapter's rows of `ref` [m, ldr].
  std::vector<std::unique_ptr<Buf<uint16_t>>> held;
  auto make = [&](const std::vector<Mod>& mods, Buf<float>& ref, int64_t ldr) {
    std::vector<cuda::WgmmaLoraSegment> segs;
    for (const Mod& mod : mods) {
      std::vector<uint16_t> th = RandomBf16(static_cast<size_t>(m) * mod.rank, rng, 1.0f);
      std::vector<int32_t> rows;
      for (int r = 0; r < m; ++r) {
        if (slot_of[static_cast<size_t>(r)] == mod.slot) {
          rows.push_back(r);
        } else {
          std::fill_n(th.begin() + int64_t{r} * mod.rank, mod.rank, uint16_t{0});
        }
      }
      std::vector<uint16_t> compact;
      for (int r : rows) {
        compact.insert(compact.end(), th.begin() + int64_t{r} * mod.rank, th.begin() + int64_t{r + 1} * mod.rank);
      }
      held.push_back(std::make_unique<Buf<uint16_t>>(th));
      const uint16_t* t = held.back()->p;
      held.push_back(std::make_unique<Buf<uint16_t>>(RandomBf16(static_cast<size_t>(mod.cols) * mod.rank, rng, 0.1f)));
      cuda::WgmmaLoraSegment g{t, held.back()->p, mod.begin, mod.cols, mod.rank, mod.scale};
      g.slot = mod.slot;
      g.row_begin = rows.front();
      g.row_end = rows.back() + 1;
      segs.push_back(g);
      Buf<uint16_t> tc(compact);
      Buf<int32_t> rows_d(rows);
      const int mr = static_cast<int>(rows.size());
      Buf<float> u(static_cast<size_t>(mr) * mod.cols);
      EXPECT_TRUE(cuda::GemmPipeMmaSync(tc.p, mr, g.b, mod.cols, mod.rank, u.p, mod.cols, true, nullptr).ok());
      EXPECT_TRUE(cuda::LoraScatterAdd(u.p, mr, mod.cols, rows_d.p, mod.scale, mod.begin, ref.p, ldr, true, nullptr).ok());
    }
    return segs;
  };
  Buf<uint16_t> x(RandomBf16(static_cast<size_t>(m) * k, rng, 1.0f));
  {  // The plain form: adapters 1 and 2 on the same columns, 2 also on a part of them, 3 elsewhere.
    Buf<uint16_t> w(RandomBf16(static_cast<size_t>(n) * k, rng, 0.1f));
    Buf<float> ref(static_cast<size_t>(m) * n);
    ASSERT_TRUE(cuda::GemmPipeMmaSync(x.p, m, w.p, n, k, ref.p, n, true, nullptr).ok());
    const auto segs = make({{1, 0, 256, 64, 2.0f}, {2, 0, 200, 16, 0.5f}, {2, 200, 120, 136, 1.5f},
                            {1, 256, 264, 8, 0.25f}, {3, 100, 300, 72, 3.0f}},
                           ref, n);
    const auto want = ref.Get();
    for (WgmmaForm form : {WgmmaForm::kTile128x256, WgmmaForm::kTile128x160, WgmmaForm::kTile128x128}) {
      SCOPED_TRACE(cuda::WgmmaFormName(form));
      Buf<float> got(static_cast<size_t>(m) * n);
      const Status st = cuda::GemmWgmmaLora(x.p, m, w.p, n, k, got.p, n, segs.data(), static_cast<int>(segs.size()),
                                            form, nullptr, slots.p);
      ASSERT_TRUE(st.ok()) << st.ToString();
      const auto g = got.Get();
      for (size_t e = 0; e < g.size(); ++e) {
        ASSERT_EQ(Bits(g[e]), Bits(want[e])) << "row " << e / n << " (adapter " << slot_of[e / n] << ") col " << e % n;
      }
    }
  }
  {  // The gated form: adapter 1 on gate and up, 2 on the up, 3 on the gate.
    Buf<uint16_t> w(RandomBf16(static_cast<size_t>(2) * inter * k, rng, 0.1f));
    Buf<float> gu(static_cast<size_t>(m) * 2 * inter);
    ASSERT_TRUE(cuda::GemmPipeMmaSync(x.p, m, w.p, 2 * inter, k, gu.p, 2 * inter, true, nullptr).ok());
    const auto segs = make({{1, 0, inter, 64, 2.0f}, {2, inter, inter, 128, 0.5f}, {1, inter, inter, 16, 1.5f},
                            {3, 0, inter, 200, 0.75f}},
                           gu, 2 * inter);
    Buf<float> want_d(static_cast<size_t>(m) * inter);
    ASSERT_TRUE(cuda::SiluMul(gu.p, m, inter, true, want_d.p, nullptr).ok());
    const auto want = want_d.Get();
    for (cuda::SwiGluForm form : {cuda::SwiGluForm::kPairs128, cuda::SwiGluForm::kPairs136}) {
      SCOPED_TRACE(cuda::SwiGluFormName(form));
      Buf<uint16_t> act(static_cast<size_t>(m) * inter);
      const Status st = cuda::GemmWgmmaSwiGluLora(x.p, m, w.p, inter, k, act.p, inter, segs.data(),
                                                  static_cast<int>(segs.size()), nullptr, slots.p, &form);
      ASSERT_TRUE(st.ok()) << st.ToString();
      const auto a = act.Get();
      for (size_t e = 0; e < a.size(); ++e) {
        ASSERT_EQ(Bits(Bf16ToFloat(a[e])), Bits(want[e])) << "row " << e / inter << " (adapter " << slot_of[e / inter]
                                                          << ") col " << e % inter;
      }
    }
  }
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

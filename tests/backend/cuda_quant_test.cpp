// Quantized weights on the CUDA backend (issue 10): int4 (with and without zero points) and
// NVFP4 multiply as W4A16 — bit for bit the device's dense bf16 matmul of their dequantized
// weights on the tensor cores, summed over K in 1024-column slices, and the CPU reference's
// bits with fp32 activations; FP8 runs W8A8 with per-token-group activation scales — with fp32
// activations in the CPU reference's order (its bits), with bf16 ones on the FP8 tensor cores
// (within the hardware's accumulation of the CPU's, rows keeping their bits at any batch size);
// a fused weight of mixed tensors fills each tensor's columns; quantized checkpoints serve on
// the device with chunk-independent bits. Skips where no device is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <random>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda_test_util.h"
#include "model/model.h"
#include "weights/quantized.h"
#include "test_util.h"
#include "tools/quantize.h"
#include "util/minifloat.h"

namespace graft {
namespace {

// A quantized tensor of random weights; int4 optionally with random zero points, or with scales
// that are not bf16 values (checkpoints with fp32 scales; Quantize writes bf16 ones), or int4
// regrouped to `group` columns a scale (new random bf16 scales; Quantize uses 128).
// NVFP4 with `all_scale_codes`: the group scales cycle through every e4m3 code but NaN (zero,
// subnormal and negative scales too) and the global scale is an odd float — every entry of the
// device's dequantization table (backend/cuda/nvfp4_table.h) in use.
Weight Quantized(QuantFormat f, int64_t n, int64_t k, bool zero_points, std::mt19937& rng, bool f32_scales = false,
                 int group = 0, bool all_scale_codes = false) {
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::vector<float> v(static_cast<size_t>(n * k));
  for (float& x : v) x = nd(rng);
  auto q = Quantize(v.data(), n, k, f);
  EXPECT_TRUE(q.ok()) << q.status().ToString();
  if (zero_points) {
    q->zero_words.resize(static_cast<size_t>((n + 7) / 8 * (k / q->group)));
    for (auto& z : q->zero_words) z = static_cast<int32_t>(rng());
  }
  if (group > 0) {
    std::uniform_real_distribution<float> ud(0.001f, 0.02f);
    q->group = group;
    q->scale.resize(static_cast<size_t>(n * (k / group)));
    for (float& sc : q->scale) sc = RoundBf16(ud(rng));
  }
  if (f32_scales) {
    for (float& sc : q->scale) sc *= 1.0f + 0x1p-12f;  // below bf16's precision: no longer a bf16 value
  }
  if (all_scale_codes) {
    uint8_t code = static_cast<uint8_t>(rng());
    for (uint8_t& sc : q->scale_fp8) {
      do ++code; while ((code & 0x7f) == 0x7f);
      sc = code;
    }
    q->global *= 1.3703f;
  }
  EXPECT_TRUE(ValidateQuantized(*q).ok());
  Weight w;
  w.name = std::string("quantized ") + QuantFormatName(f);
  w.rows = n;
  w.cols = k;
  w.quant = std::make_shared<QuantizedWeight>(std::move(q).value());
  return w;
}

// The weight as the matmul reads it, dense (bf16 storage when every value is a bf16 value).
Weight DenseOf(const Weight& w) {
  Weight d;
  d.name = "dense " + w.name;
  d.rows = w.rows;
  d.cols = w.cols;
  std::vector<float> v(static_cast<size_t>(w.rows * w.cols));
  WeightRows(w, 0, w.rows, v.data());
  d.is_bf16 = true;
  for (float x : v) d.is_bf16 = d.is_bf16 && x == RoundBf16(x);
  if (d.is_bf16) {
    for (float x : v) d.bf16.push_back(FloatToBf16(x));
  } else {
    d.f32 = v;
  }
  return d;
}

// y [m, N] = x · Wᵀ on `ops`, x bf16-valued rows staged through Embed from the table `xt`.
std::vector<float> MatMulOn(Ops& ops, const Weight& xt, int64_t m, const Weight& w, bool round_output = true) {
  const size_t mark = ops.Mark();
  float* x = ops.Alloc(m * w.cols);
  float* y = ops.Alloc(m * w.rows);
  std::vector<int32_t> ids(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  ops.Embed(xt, ids.data(), static_cast<int>(m), x);
  ops.MatMul(x, m, w, y, round_output);
  std::vector<float> out(static_cast<size_t>(m * w.rows));
  ops.ToHost(y, m * w.rows, out.data());
  const Status e = ops.TakeError();
  EXPECT_TRUE(e.ok()) << e.ToString();
  ops.Release(mark);
  return out;
}

Weight Activations(int64_t m, int64_t k, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Weight t;
  t.name = "x";
  t.rows = m;
  t.cols = k;
  for (int64_t i = 0; i < m * k; ++i) t.f32.push_back(RoundBf16(nd(rng) * (i % 97 == 0 ? 30.0f : 1.0f)));  // outliers
  return t;
}

bool Same(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// Columns [c0, c0 + w) of a table or dense weight.
Weight ColumnsOf(const Weight& t, int64_t c0, int64_t w) {
  Weight s;
  s.name = t.name + " columns";
  s.rows = t.rows;
  s.cols = w;
  s.is_bf16 = t.is_bf16;
  for (int64_t r = 0; r < t.rows; ++r) {
    for (int64_t c = c0; c < c0 + w; ++c) {
      if (t.is_bf16) s.bf16.push_back(t.bf16[static_cast<size_t>(r * t.cols + c)]);
      else s.f32.push_back(t.f32[static_cast<size_t>(r * t.cols + c)]);
    }
  }
  return s;
}

// What the W4A16 forms compute (gemm_decode_w4.h), from the device's dense bf16 matmul: the
// product over each 1024-column slice of K unrounded, the slices added in ascending order (from
// -0, which adds exactly), rounded to bf16 once. For K <= 1024 the plain dense product. The
// slices' tables live as long as the ops (which key device copies by a Weight's address).
struct SlicedDense {
  std::deque<Weight> xs, ds;
  SlicedDense(const Weight& xt, const Weight& d) {
    constexpr int64_t kSlice = 1024;
    for (int64_t k0 = 0; k0 < d.cols; k0 += kSlice) {
      xs.push_back(ColumnsOf(xt, k0, std::min(kSlice, d.cols - k0)));
      ds.push_back(ColumnsOf(d, k0, std::min(kSlice, d.cols - k0)));
    }
  }
  std::vector<float> On(Ops& ops, int64_t m) const {
    std::vector<float> total(static_cast<size_t>(m * ds.front().rows), -0.0f);
    for (size_t i = 0; i < ds.size(); ++i) {
      const auto part = MatMulOn(ops, xs[i], m, ds[i], /*round_output=*/false);
      for (size_t e = 0; e < total.size(); ++e) total[e] += part[e];
    }
    for (float& v : total) v = RoundBf16(v);
    return total;
  }
};

const int64_t kRows[] = {1, 5, 9, 16, 17, 40, 64, 65, 200};  // 16 and 17: the decode forms' edge; 9: the
                                                              // W4A16 decode form's second x tile; 5
                                                              // and 9: its eight-warp blocks

// A weight is uploaded on its first use; that first matmul must see all of it. (Uploads were
// plain cudaMemcpy calls: from pageable memory those may return before the DMA lands, on a
// stream the backend's does not wait for.) Fresh copies of weights of 4 to 64 MB (the W4A16
// test's dense slices among them), each multiplied at once and then again: the first product is
// the second's bits. Dense bf16 and int4 (one upload of several arrays).
TEST(CudaUpload, AWeightsFirstMatMulSeesAllOfIt) {
  REQUIRE_GPU();
  std::mt19937 rng(17);
  std::vector<Weight> kinds;
  for (const auto& [n, k] : {std::pair<int64_t, int64_t>{8192, 256}, {8200, 1024}, {32768, 1024}}) {
    kinds.push_back(DenseOf(Quantized(QuantFormat::kInt4Group, n, k, false, rng)));
  }
  kinds.push_back(Quantized(QuantFormat::kInt4Group, 16384, 2048, false, rng));
  const Weight x = Activations(1, 2048, rng);
  auto bf = test::MakeCuda(ActDtype::kBF16);
  ASSERT_NE(bf, nullptr);
  std::deque<Weight> copies;  // distinct addresses: each one uploaded afresh
  for (int round = 0; round < 8; ++round) {
    for (const Weight& w : kinds) {
      const Weight& c = copies.emplace_back(w);
      const Weight xin = ColumnsOf(x, 0, w.cols);
      const auto first = MatMulOn(*bf, xin, 1, c);
      EXPECT_TRUE(Same(first, MatMulOn(*bf, xin, 1, c))) << c.name << " round " << round;
    }
  }
}

TEST(CudaQuant, W4a16IsTheSlicedDenseBf16MatmulOfItsWeights) {
  REQUIRE_GPU();
  std::mt19937 rng(3);
  CpuOps cpu(ActDtype::kF32, 4);
  struct C {
    QuantFormat f;
    bool zp;
    int64_t n, k;
    bool f32_scales = false;
    int group = 0;
    bool all_scale_codes = false;
  };
  // Up to 16 rows: K % 128 == 0 (symmetric int4 — bf16 or fp32 scales —, NVFP4) takes the
  // register-streaming decode form (gemm_decode_w4.h), other N and K multiples of 16 the WMMA
  // decode form; more rows the tiles. int4 and NVFP4 with K % 128 == 0 are stored in lane order
  // (int4_lanes.h), the rest not; NVFP4 with every scale code (zero, subnormal, negative) through
  // the table. N not a multiple of 64 (200, 130, 40, ...): a block's last warps past N. K > 1024:
  // several slices, one short (4608: eight stages then four; 1152: a one-stage slice; 2176 with
  // zero points: the WMMA forms; 3072 with fp32 scales in groups of 64); 640: more stages than a
  // warp keeps in flight. N = 8200: the sixteen-warp blocks of wide weights past eight rows, the
  // last one short and its last warp half past N; with K = 1152 and 2304 (fp32 scales in groups of
  // 64) the wide blocks' slices too, the last one short.
  for (const C& c : {C{QuantFormat::kInt4Group, false, 208, 384}, C{QuantFormat::kInt4Group, true, 80, 256},
                     C{QuantFormat::kInt4Group, false, 200, 384}, C{QuantFormat::kNvfp4, false, 96, 512},
                     C{QuantFormat::kNvfp4, false, 130, 208}, C{QuantFormat::kInt4Group, false, 200, 768},
                     C{QuantFormat::kInt4Group, false, 136, 512, true}, C{QuantFormat::kInt4Group, false, 72, 1280},
                     C{QuantFormat::kInt4Group, false, 48, 512, false, 32},
                     C{QuantFormat::kInt4Group, false, 40, 512, true, 64}, C{QuantFormat::kInt4Group, false, 56, 1024, false, 512},
                     C{QuantFormat::kNvfp4, false, 264, 1024}, C{QuantFormat::kInt4Group, false, 64, 4608},
                     C{QuantFormat::kNvfp4, false, 48, 2304}, C{QuantFormat::kInt4Group, true, 48, 2176},
                     C{QuantFormat::kInt4Group, false, 40, 3072, true, 64}, C{QuantFormat::kNvfp4, false, 40, 1152},
                     C{QuantFormat::kInt4Group, false, 24, 640}, C{QuantFormat::kNvfp4, false, 72, 1280, false, 0, true},
                     C{QuantFormat::kNvfp4, false, 40, 208, false, 0, true},
                     C{QuantFormat::kInt4Group, false, 8200, 1152}, C{QuantFormat::kNvfp4, false, 8200, 256},
                     C{QuantFormat::kNvfp4, false, 8200, 1152}, C{QuantFormat::kInt4Group, false, 8192, 2304, true, 64}}) {
    const Weight q = Quantized(c.f, c.n, c.k, c.zp, rng, c.f32_scales, c.group, c.all_scale_codes);
    const Weight d = DenseOf(q);
    ASSERT_TRUE(d.is_bf16) << "W4A16 weights are bf16 values";
    ASSERT_EQ(c.f32_scales, !std::all_of(q.quant->scale.begin(), q.quant->scale.end(),
                                         [](float v) { return v == RoundBf16(v); }));
    const Weight x = Activations(200, c.k, rng);
    // Fresh ops per case: a backend keeps its device copies by the Weight's address.
    auto bf = test::MakeCuda(ActDtype::kBF16), f32 = test::MakeCuda(ActDtype::kF32);
    ASSERT_TRUE(bf && f32);
    const auto all = MatMulOn(*bf, x, 200, q);
    const SlicedDense sliced(x, d);
    for (int64_t m : kRows) {
      const auto got = MatMulOn(*bf, x, m, q);
      EXPECT_TRUE(Same(got, sliced.On(*bf, m))) << q.name << " zp " << c.zp << " K " << c.k << " m " << m;
      // A row's bits do not depend on how many rows share the call (which kernel runs).
      EXPECT_TRUE(Same(got, std::vector<float>(all.begin(), all.begin() + static_cast<int64_t>(got.size()))))
          << q.name << " first " << m << " rows alone vs among 200";
      EXPECT_TRUE(Same(MatMulOn(*f32, x, m, q), MatMulOn(cpu, x, m, q))) << q.name << " fp32 activations, m " << m;
    }
  }
}

// The chunked 4-bit form (matmul.h's kW4Prefill): a weight's output rows dequantized to bf16 a
// chunk at a time (the chunk's copy under 96 MB), each chunk's product with its 1024-column
// slices summed in the kernel (GemmWgmmaSplitKSumF32) — past 16 rows for weights the register
// fragments do not take (int4 with zero points: K = 8192, eight slices, chunks of 6144 rows, so N
// = 6400 takes two, the second short; 1100 rows, the last tile of 76), and for every 4-bit weight
// from 2048 rows (lane-order int4: K = 2560, slices of 1024, 1024 and 512; N = 2056, a last tile
// of 8 outputs). Still the sliced dense matmul's bits, and a row's bits the same as the decode
// form's for it alone.
TEST(CudaQuant, W4a16PrefillInOutputChunksKeepsTheSlicedBits) {
  REQUIRE_GPU();
  std::mt19937 rng(11);
  struct C {
    bool zero_points;
    int64_t m, n, k;
  };
  for (const C& c : {C{true, 1100, 6400, 8192}, C{false, 2048, 2056, 2560}}) {
    const Weight q = Quantized(QuantFormat::kInt4Group, c.n, c.k, c.zero_points, rng);
    const Weight d = DenseOf(q);
    const Weight x = Activations(c.m, c.k, rng);
    auto bf = test::MakeCuda(ActDtype::kBF16);
    ASSERT_NE(bf, nullptr);
    const auto got = MatMulOn(*bf, x, c.m, q);
    const SlicedDense sliced(x, d);  // alive while the backend is: it keeps device copies by address
    EXPECT_TRUE(Same(got, sliced.On(*bf, c.m))) << "zero points " << c.zero_points << " m " << c.m;
    const auto first = MatMulOn(*bf, x, 3, q);
    EXPECT_TRUE(Same(first, std::vector<float>(got.begin(), got.begin() + 3 * c.n)))
        << "zero points " << c.zero_points << ": rows alone vs among " << c.m;
  }
}

// The 4-bit prefill form (gemm_wgmma_w4.h: the weights dequantized in registers as wgmma's A
// operand, the slices summed in registers) on grids of more tiles than multiprocessors, so that
// blocks walk several tiles and carry their weight ring from one to the next: every x row's bits
// are the sliced dense matmul's and those of the row alone through the decode form, rounded or not.
// N = 2056: the last weight tile holds 8 rows (its warps' upper rows and every other warp past N);
// 1100 rows: the last x tile 76 rows; K = 2560 (20 stages: slices of 8, 8 and 4, the ring carried
// across tiles), 1408 (11: no carry, a slice of 3), 1152 with int4 groups of 32 and fp32 scales,
// NVFP4 with every scale code.
TEST(CudaQuant, W4a16WgmmaFormKeepsTheSlicedBitsOnManyTiles) {
  REQUIRE_GPU();
  std::mt19937 rng(29);
  struct C {
    QuantFormat f;
    int64_t n, k;
    bool f32_scales = false;
    int group = 0;
    bool all_scale_codes = false;
  };
  const int64_t m = 1100;
  for (const C& c : {C{QuantFormat::kInt4Group, 2056, 2560}, C{QuantFormat::kInt4Group, 1032, 1408, false, 64},
                     C{QuantFormat::kInt4Group, 1032, 1152, true, 32}, C{QuantFormat::kNvfp4, 1032, 1408, false, 0, true}}) {
    const Weight q = Quantized(c.f, c.n, c.k, false, rng, c.f32_scales, c.group, c.all_scale_codes);
    const Weight d = DenseOf(q);
    const Weight x = Activations(m, c.k, rng);
    auto bf = test::MakeCuda(ActDtype::kBF16);
    ASSERT_NE(bf, nullptr);
    const auto got = MatMulOn(*bf, x, m, q);
    // Every Weight the backend has seen stays alive while it lives (it keeps device copies by
    // address): a temporary's slices freed here would hand their addresses, and so their stale
    // device copies, to the rows alone below.
    const SlicedDense sliced(x, d);
    EXPECT_TRUE(Same(got, sliced.On(*bf, m))) << q.name << " N " << c.n << " K " << c.k;
    std::deque<Weight> alone_rows;  // each its own address
    for (int64_t r : {int64_t{0}, int64_t{517}, m - 1}) {  // a row alone: the decode form
      Weight& xr = alone_rows.emplace_back(x);
      xr.rows = 1;
      xr.f32.assign(x.f32.begin() + r * c.k, x.f32.begin() + (r + 1) * c.k);
      const auto alone = MatMulOn(*bf, xr, 1, q);
      EXPECT_TRUE(Same(alone, std::vector<float>(got.begin() + r * c.n, got.begin() + (r + 1) * c.n)))
          << q.name << " K " << c.k << " row " << r << " alone vs among " << m;
    }
    // Unrounded: the slices' sum as it is.
    const auto raw = MatMulOn(*bf, x, m, q, /*round_output=*/false);
    size_t rounded_same = 0;
    for (size_t e = 0; e < raw.size(); ++e) rounded_same += RoundBf16(raw[e]) == got[e] ? 1 : 0;
    EXPECT_EQ(rounded_same, raw.size()) << q.name << ": the rounded outputs are the unrounded ones rounded";
    EXPECT_FALSE(Same(raw, got)) << q.name << ": round_output = false keeps the fp32 sums";
  }
}

// Σ_g Σ_k |xq·wq|·|sx·sw| for each output of row r: the scale of the W8A8 product's terms, in
// double, with the same codes and scales the backends use.
std::vector<double> Fp8TermScale(const Weight& xt, int64_t m, const Weight& w) {
  const QuantizedWeight& q = *w.quant;
  const int64_t n = q.rows, k = q.cols, group = Fp8ActivationGroup(q), groups = (k + group - 1) / group;
  std::vector<float> wd(static_cast<size_t>(n * k));
  DequantizeRows(q, 0, n, wd.data());  // code · sw
  std::vector<double> out(static_cast<size_t>(m * n), 0.0);
  std::vector<uint8_t> codes(static_cast<size_t>(k));
  std::vector<float> sx(static_cast<size_t>(groups));
  for (int64_t r = 0; r < m; ++r) {
    Fp8QuantizeActivations(xt.f32.data() + r * k, k, group, codes.data(), sx.data());
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t c = 0; c < k; ++c) {
        acc += std::fabs(double{Fp8E4M3ToFloat(codes[static_cast<size_t>(c)])} * sx[static_cast<size_t>(c / group)] *
                         wd[static_cast<size_t>(j * k + c)]);
      }
      out[static_cast<size_t>(r * n + j)] = acc;
    }
  }
  return out;
}

// How many of the FP8 tensor-core outputs `got` (the first ref.size() of them) fall outside the
// hardware's accumulation of the CPU reference's: 2^-10 of the output's terms' magnitude (scale)
// plus its bf16 rounding; the first three reported as failures, named by `what`.
int Fp8OffTheCpu(const std::vector<float>& got, const std::vector<float>& ref, const std::vector<double>& scale,
                 const std::string& what) {
  int bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double tol = std::ldexp(scale[i], -10) + std::ldexp(std::fabs(double{ref[i]}), -7);
    if (!(std::fabs(double{got[i]} - ref[i]) <= tol) && bad++ < 3) {
      ADD_FAILURE() << what << " output " << i << ": " << got[i] << " vs the CPU's " << ref[i] << " (tolerance " << tol
                    << ")";
    }
  }
  return bad;
}

// FP8 W8A8: with fp32 activations, and with bf16 ones where the tensor-core form does not fit
// (K % 16 != 0), the CPU reference's bits; with bf16 activations on the FP8 tensor cores
// (gemm_fp8.h) each output within the hardware's accumulation of the CPU's — 2^-10 of its
// terms' magnitude, plus the bf16 rounding of the output — and, either way, a row's bits the
// same alone as among 200 rows.
TEST(CudaQuant, Fp8MatchesTheCpuReferenceAndKeepsRowBits) {
  REQUIRE_GPU();
  std::mt19937 rng(5);
  for (ActDtype act : {ActDtype::kBF16, ActDtype::kF32}) {
    CpuOps cpu(act, 4);
    for (QuantFormat f : {QuantFormat::kFp8Block, QuantFormat::kFp8Channel}) {
      // K = 202: the activation quantization's one-column-a-lane form (K % 4 != 0).
      // 136 x 4224 (fp8-block): K in two halves of 17 and 16 stages, a cluster of two blocks a tile.
      for (auto [n, k] : std::vector<std::pair<int64_t, int64_t>>{{300, 384}, {70, 200}, {136, 1024}, {72, 1040}, {40, 202},
                                                                   {136, 4224}}) {
        const Weight q = Quantized(f, n, k, false, rng);
        const Weight x = Activations(200, k, rng);
        const bool tensor = act == ActDtype::kBF16 && k % 16 == 0;
        auto cuda = test::MakeCuda(act);  // fresh: device copies are kept by the Weight's address
        ASSERT_NE(cuda, nullptr);
        const auto all = MatMulOn(*cuda, x, 200, q);
        const auto scale = Fp8TermScale(x, 200, q);
        for (int64_t m : kRows) {
          const auto got = MatMulOn(*cuda, x, m, q);
          const auto ref = MatMulOn(cpu, x, m, q);
          if (!tensor) {
            EXPECT_TRUE(Same(got, ref)) << q.name << " [" << n << ", " << k << "] m " << m;
          } else {
            EXPECT_EQ(Fp8OffTheCpu(got, ref, scale, q.name + " [" + std::to_string(n) + ", " + std::to_string(k) +
                                                        "] m " + std::to_string(m)),
                      0);
          }
          EXPECT_EQ(std::memcmp(got.data(), all.data(), got.size() * 4), 0) << "a row's bits depend on its batch";
        }
      }
    }
  }
}

// The FP8 tensor-core kernel on grids larger than fit at once (300 blocks of 64 outputs at up to
// 64 rows, 4 x 150 tiles of 64 x 128 at 200 rows: blocks run in several waves): a row's bits are
// the same alone as among 200, and each output within the hardware's accumulation of the CPU's.
TEST(CudaQuant, Fp8KeepsRowBitsOnGridsOfManyWaves) {
  REQUIRE_GPU();
  std::mt19937 rng(11);
  const int64_t n = 19200, k = 384;
  CpuOps cpu(ActDtype::kBF16, 8);
  for (QuantFormat f : {QuantFormat::kFp8Block, QuantFormat::kFp8Channel}) {
    const Weight q = Quantized(f, n, k, false, rng);
    const Weight x = Activations(200, k, rng);
    auto cuda = test::MakeCuda(ActDtype::kBF16);
    ASSERT_NE(cuda, nullptr);
    const auto all = MatMulOn(*cuda, x, 200, q);
    for (int64_t m : {int64_t{1}, int64_t{3}, int64_t{64}, int64_t{65}}) {
      const auto got = MatMulOn(*cuda, x, m, q);
      EXPECT_EQ(std::memcmp(got.data(), all.data(), got.size() * 4), 0) << q.name << " m " << m << ": a row's bits depend on its batch";
    }
    EXPECT_EQ(Fp8OffTheCpu(all, MatMulOn(cpu, x, 3, q), Fp8TermScale(x, 3, q), q.name), 0);
  }
}

// Past 256 rows FP8 runs the persistent prefill kernel (gemm_fp8_prefill.h), up to 256 the first
// kernel (gemm_fp8.cu): each output the same chain, so a row's bits are the same whichever ran it
// and wherever it sits — fp8-block with K in two halves (32 stages, the first half's totals kept
// in shared memory; Fp8KSplit), without (5 stages, a last tile of 8 outputs; 3 stages on 900
// tiles, each block walking several), per channel (one chain over K, 9 stages) — at 700 rows (6
// row tiles, the last of 60 rows) against 1 to 256 on the first kernel and 300 on the second.
TEST(CudaQuant, Fp8PrefillKernelKeepsTheFirstKernelsBits) {
  REQUIRE_GPU();
  std::mt19937 rng(13);
  struct C {
    QuantFormat f;
    int64_t n, k;
  };
  for (const C& c : {C{QuantFormat::kFp8Block, 1000, 4096}, C{QuantFormat::kFp8Block, 2056, 640},
                     C{QuantFormat::kFp8Block, 19200, 384}, C{QuantFormat::kFp8Channel, 520, 1152}}) {
    const Weight q = Quantized(c.f, c.n, c.k, false, rng);
    const Weight x = Activations(700, c.k, rng);
    auto cuda = test::MakeCuda(ActDtype::kBF16);
    ASSERT_NE(cuda, nullptr);
    const auto all = MatMulOn(*cuda, x, 700, q);
    for (int64_t m : {int64_t{1}, int64_t{64}, int64_t{65}, int64_t{256}, int64_t{300}}) {
      const auto got = MatMulOn(*cuda, x, m, q);
      EXPECT_EQ(std::memcmp(got.data(), all.data(), got.size() * 4), 0)
          << q.name << " [" << c.n << ", " << c.k << "] m " << m << ": a row's bits depend on the kernel or its batch";
    }
    CpuOps cpu(ActDtype::kBF16, 8);
    EXPECT_EQ(Fp8OffTheCpu(all, MatMulOn(cpu, x, 3, q), Fp8TermScale(x, 3, q),
                           q.name + " [" + std::to_string(c.n) + ", " + std::to_string(c.k) + "]"),
              0);
  }
}

TEST(CudaQuant, MixedFusedWeightFillsEachTensorsColumns) {
  REQUIRE_GPU();
  std::mt19937 rng(7);
  const int64_t k = 256;
  Weight fused;
  fused.name = "fused";
  fused.cols = k;
  fused.parts.push_back(Quantized(QuantFormat::kInt4Group, 96, k, false, rng));
  Weight dense = DenseOf(Quantized(QuantFormat::kNvfp4, 24, k, false, rng));
  fused.parts.push_back(dense);
  fused.parts.push_back(Quantized(QuantFormat::kFp8Block, 136, k, false, rng));
  for (const auto& p : fused.parts) fused.rows += p.rows;
  auto cuda = test::MakeCuda(ActDtype::kF32);
  ASSERT_NE(cuda, nullptr);
  CpuOps cpu(ActDtype::kF32, 4);
  const Weight x = Activations(70, k, rng);
  for (int64_t m : {int64_t{1}, int64_t{70}}) {
    const auto got = MatMulOn(*cuda, x, m, fused);
    EXPECT_TRUE(Same(got, MatMulOn(cpu, x, m, fused))) << "m " << m;
    const auto middle = MatMulOn(cpu, x, m, fused.parts[1]);  // the dense part alone, into its columns
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < 24; ++j) ASSERT_EQ(got[r * fused.rows + 96 + j], middle[r * 24 + j]);
  }
}

// A fused weight of a 4-bit part and a few bf16 rows after it (Qwen3.5's GDN in-projection and its
// b / a) runs as one launch at up to 16 rows, the bf16 rows as extra blocks of the 4-bit GEMM: each
// part's columns keep the bits the part has alone (the 4-bit form's, and the bf16 forms' slices
// and SumSplits), at every row count; past 16 rows the parts run one after the other. K = 640:
// one slice (no partial sums); 1152: a one-stage last slice; 5120: five. 4-bit parts of 208 rows
// (a block's last warps past N) and 8208; int4 with bf16 and with fp32 scales, NVFP4.
TEST(CudaQuant, W4a16WithABf16TailKeepsEachPartsBits) {
  REQUIRE_GPU();
  std::mt19937 rng(21);
  struct C {
    QuantFormat f;
    int64_t n, tail, k;
    bool f32_scales = false;
  };
  for (const C& c : {C{QuantFormat::kInt4Group, 208, 96, 640}, C{QuantFormat::kInt4Group, 8208, 96, 1152},
                     C{QuantFormat::kNvfp4, 208, 32, 1152}, C{QuantFormat::kInt4Group, 400, 256, 5120},
                     C{QuantFormat::kInt4Group, 208, 16, 1152, true}}) {
    Weight fused;
    fused.name = "fused";
    fused.cols = c.k;
    fused.parts.push_back(Quantized(c.f, c.n, c.k, false, rng, c.f32_scales));
    fused.parts.push_back(DenseOf(Quantized(QuantFormat::kInt4Group, c.tail, c.k, false, rng)));
    ASSERT_TRUE(fused.parts[1].is_bf16);
    fused.rows = c.n + c.tail;
    const Weight x = Activations(40, c.k, rng);
    auto bf = test::MakeCuda(ActDtype::kBF16);
    ASSERT_NE(bf, nullptr);
    for (int64_t m : {1, 2, 3, 4, 8, 9, 16, 17, 40}) {
      const auto got = MatMulOn(*bf, x, m, fused);
      const auto quant = MatMulOn(*bf, x, m, fused.parts[0]), tail = MatMulOn(*bf, x, m, fused.parts[1]);
      int64_t bad = 0;
      for (int64_t r = 0; r < m; ++r) {
        for (int64_t j = 0; j < fused.rows; ++j) {
          const float want = j < c.n ? quant[r * c.n + j] : tail[r * c.tail + j - c.n];
          if (std::memcmp(&got[r * fused.rows + j], &want, 4) != 0 && bad++ < 3) {
            ADD_FAILURE() << fused.parts[0].name << " N " << c.n << " + " << c.tail << " K " << c.k << " m " << m
                          << ": row " << r << " output " << j << " " << got[r * fused.rows + j] << " vs " << want;
          }
        }
      }
      EXPECT_EQ(bad, 0);
    }
  }
}

// The demo base quantized by graft quantize serves on the device: the same top choices as the
// CPU reference, and chunking never changes its bits.
TEST(CudaQuant, QuantizedCheckpointsServeOnTheDevice) {
  REQUIRE_GPU();
  test::TempDir d;
  const std::string base = std::filesystem::path(test::FixturesDir()).parent_path().string() + "/models/base";
  std::mt19937 rng(9);
  std::vector<int32_t> ids(150);
  for (auto& t : ids) t = static_cast<int32_t>(rng() % 8000);
  for (const char* format : {"w4a16", "nvfp4", "fp8-block"}) {
    const std::string out = d.path() + "/" + format;
    auto rep = RunQuantize({base, out, format, 0, 8, 4});
    ASSERT_TRUE(rep.ok()) << rep.status().ToString();
    auto m = LoadModel(out);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    for (ActDtype act : {ActDtype::kBF16, ActDtype::kF32}) {
      auto cuda = test::MakeCuda(act);
      ASSERT_NE(cuda, nullptr);
      const Status up = cuda->Upload((*m)->weights());
      ASSERT_TRUE(up.ok()) << up.ToString();
      CpuOps cpu(act, 4);
      if (act == ActDtype::kF32) {  // every projection of the checkpoint: the CPU's bits
        std::deque<Weight> xs;  // alive while the ops are: device copies are kept by address
        for (size_t l = 0; l < (*m)->weights().layers.size(); ++l) {
          const LayerWeights& lw = (*m)->weights().layers[l];
          for (const Weight* w : {&lw.attn.qkv, &lw.attn.o, &lw.gdn.in_proj, &lw.gdn.out, &lw.gate_up, &lw.down}) {
            if (w->empty()) continue;
            xs.push_back(Activations(40, w->cols, rng));
            const auto a = MatMulOn(*cuda, xs.back(), 40, *w), b = MatMulOn(cpu, xs.back(), 40, *w);
            size_t bad = 0, first = a.size();
            for (size_t i = 0; i < a.size(); ++i) {
              if (a[i] != b[i]) bad++, first = std::min(first, i);
            }
            EXPECT_EQ(bad, 0u) << format << " layer " << l << " " << w->name << " (" << w->storage() << "): first at "
                               << first << (first < a.size() ? ": " + std::to_string(a[first]) + " vs " + std::to_string(b[first]) : "");
          }
        }
      }
      const auto got = test::RunChunks(**m, *cuda, ids, {});
      const auto chunked = test::RunChunks(**m, *cuda, ids, {7, 64, 13});
      EXPECT_TRUE(Same(got, chunked)) << format << ": chunking changed the bits";
      const auto want = test::RunChunks(**m, cpu, ids, {});
      const int vocab = (*m)->config().vocab_size;
      int same = 0;
      for (size_t t = 0; t < ids.size(); ++t) {
        const float* a = got.data() + t * vocab;
        const float* b = want.data() + t * vocab;
        same += std::max_element(a, a + vocab) - a == std::max_element(b, b + vocab) - b;
      }
      EXPECT_GE(same, static_cast<int>(0.97 * static_cast<double>(ids.size()))) << format << " top-1 vs the CPU";
      if (act == ActDtype::kF32 && std::string(format) != "fp8-block") {
        // (FP8 quantizes activations: the last-bit differences of other fp32 ops between the
        // backends move some codes by a step, so its logits agree by top choice only.)
        double diff = 0, mag = 0;
        for (size_t i = 0; i < got.size(); ++i) diff += std::fabs(got[i] - want[i]), mag += std::fabs(want[i]);
        EXPECT_LT(diff / mag, 1e-4) << format << ": fp32 activations stay at the CPU reference";
      }
    }
  }
}

}  // namespace
}  // namespace graft

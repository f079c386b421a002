// MatMul's routing as a table (host only: runs without a GPU): ChooseMatMulForm for the two model
// families' projection shapes, in every weight format, by row count — printed, and checked where
// the design says which form runs; no model projection may land on a fallback form.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/cuda/device_weight.h"
#include "backend/cuda/gemm_decode.h"
#include "backend/cuda/gemm_fp8_prefill.h"
#include "backend/cuda/gemm_wgmma.h"
#include "backend/cuda/gemm_wgmma_w4.h"
#include "backend/cuda/matmul.h"
#include "backend/cuda/nvfp4_table.h"

namespace graft {
namespace {

using cuda::DevFormat;
using cuda::DevWeight;
using cuda::MatMulForm;

const void* Aligned() { return reinterpret_cast<const void*>(uintptr_t{1} << 20); }

DevWeight Dense(int64_t rows, int64_t cols, bool bf16) {
  DevWeight w;
  w.data = Aligned();
  w.rows = rows;
  w.cols = cols;
  w.bf16 = bf16;
  return w;
}

// 4-bit weights as graft uploads them: lane order, symmetric int4 groups of 128 with 16-byte
// aligned scales, or NVFP4 with its table and fp8 scales.
DevWeight FourBit(int64_t rows, int64_t cols, DevFormat f) {
  DevWeight w = Dense(rows, cols, false);
  w.format = f;
  w.int4_lanes = true;
  w.group = f == DevFormat::kInt4 ? 128 : 16;
  w.scale = reinterpret_cast<const float*>(Aligned());
  w.scale_fp8 = reinterpret_cast<const uint8_t*>(Aligned());
  w.nvfp4_table = reinterpret_cast<const cuda::Nvfp4Entry*>(Aligned());
  return w;
}

TEST(MatMulForm, TableForTheModelsProjections) {
  struct Proj {
    const char* name;
    int64_t n, k;
  };
  // Qwen3.5-27B's and Qwen3-32B's fused projections (N x K), and the GDN b / a gates kept bf16.
  const std::vector<Proj> projs = {{"27B qkv", 12288, 5120},   {"27B o", 5120, 6144},      {"27B gdn in", 16640, 5120},
                                   {"27B gdn out", 5120, 6144}, {"27B gate|up", 34816, 5120}, {"27B down", 5120, 17408},
                                   {"32B qkv", 10240, 5120},   {"32B gate|up", 51200, 5120}, {"32B down", 5120, 25600},
                                   {"gdn b|a (bf16)", 96, 5120}};
  const std::vector<int64_t> rows = {1, 8, 16, 17, 32, 33, 64, 65, 1024, 16384};
  struct Fmt {
    const char* name;
    bool quant;
    DevFormat f;
  };
  const std::vector<Fmt> fmts = {{"bf16", false, DevFormat::kDense}, {"int4", true, DevFormat::kInt4},
                                 {"nvfp4", true, DevFormat::kNvfp4}};
  std::string table = "weights, projection \\ rows";
  for (int64_t m : rows) table += "\t" + std::to_string(m);
  std::string legend;
  std::vector<bool> seen(static_cast<size_t>(MatMulForm::kNone) + 1, false);
  for (const Fmt& fm : fmts) {
    for (const Proj& p : projs) {
      const bool gate = p.n == 96;
      if (gate && fm.quant) continue;  // the gates stay bf16 beside a quantized in_proj
      const DevWeight w = fm.quant ? FourBit(p.n, p.k, fm.f) : Dense(p.n, p.k, true);
      table += "\n" + std::string(fm.name) + " " + p.name;
      for (int64_t m : rows) {
        const MatMulForm f = cuda::ChooseMatMulForm(m, w, /*bf16=*/true, /*x_aligned16=*/true);
        EXPECT_EQ(f, cuda::ChooseMatMulForm(m, w, true, true)) << "a pure function";
        table += "\t" + std::to_string(static_cast<int>(f));
        if (!seen[static_cast<size_t>(f)]) {
          seen[static_cast<size_t>(f)] = true;
          legend += "\n  " + std::to_string(static_cast<int>(f)) + ": " + cuda::MatMulFormName(f);
        }
        EXPECT_NE(f, MatMulForm::kTile128) << fm.name << " " << p.name << " at " << m << " rows: a fallback form";
        EXPECT_NE(f, MatMulForm::kTile64) << fm.name << " " << p.name << " at " << m << " rows: a fallback form";
        if (!fm.quant) {
          const MatMulForm want = gate ? (m > cuda::kDecodeFormRows ? MatMulForm::kBf16PrefillSplit : MatMulForm::kBf16DecodeSplit)
                                       : (m > cuda::kDecodeFormRows ? MatMulForm::kBf16Prefill : MatMulForm::kBf16Decode);
          EXPECT_EQ(f, want) << p.name << " at " << m << " rows";
        } else {
          // From 2048 rows the chunked form (a bf16 copy a chunk at a time, then the bf16 GEMM's
          // pace) beats dequantizing in every tile's registers.
          const MatMulForm want = m <= 16 ? MatMulForm::kW4Decode : m >= 2048 ? MatMulForm::kW4Prefill
                                                                               : MatMulForm::kW4PrefillWgmma;
          EXPECT_EQ(f, want) << fm.name << " " << p.name << " at " << m;
        }
      }
    }
  }
  std::printf("MatMul forms (bf16 activations, aligned operands):\n%s\nforms:%s\n", table.c_str(), legend.c_str());
}

TEST(MatMulForm, Float32AndOddShapesAndAlignment) {
  // fp32 activations: the CPU reference's SIMT sums, whatever the weight.
  EXPECT_EQ(cuda::ChooseMatMulForm(4096, Dense(5120, 5120, true), /*bf16=*/false, true), MatMulForm::kSimtTiled);
  EXPECT_EQ(cuda::ChooseMatMulForm(8, Dense(5120, 5120, true), false, true), MatMulForm::kSimt);
  // fp32 weights under bf16 activations (a float32 checkpoint's norms, say): SIMT as well.
  EXPECT_EQ(cuda::ChooseMatMulForm(100, Dense(64, 64, false), true, true), MatMulForm::kSimtTiled);
  // A bf16 weight whose K is not a multiple of 8: no pipelined form takes it: the loud fallback.
  EXPECT_EQ(cuda::ChooseMatMulForm(4096, Dense(512, 500, true), true, true), MatMulForm::kTile64);
  // Misaligned weight data: the streaming forms need 16-byte loads.
  DevWeight odd = Dense(512, 512, true);
  odd.data = reinterpret_cast<const void*>((uintptr_t{1} << 20) + 8);
  EXPECT_EQ(cuda::ChooseMatMulForm(4096, odd, true, true), MatMulForm::kTile64);
  // A misaligned x only costs the 4-bit decode form (it reads x in fp32 with 16-byte loads).
  const DevWeight q = FourBit(5120, 5120, DevFormat::kInt4);
  EXPECT_EQ(cuda::ChooseMatMulForm(1, q, true, /*x_aligned16=*/false), MatMulForm::kW4Skinny);
  EXPECT_EQ(cuda::ChooseMatMulForm(1, Dense(5120, 5120, true), true, false), MatMulForm::kBf16Decode) << "x is copied first";
  EXPECT_EQ(cuda::ChooseMatMulForm(1024, q, true, false), MatMulForm::kW4PrefillWgmma) << "x is copied first";
  // 4-bit weights the register fragments do not take (zero points, groups below 32 columns, no
  // lane order): past 16 rows dequantized a chunk at a time.
  DevWeight zp = q;
  zp.zero = reinterpret_cast<const int32_t*>(Aligned());
  EXPECT_EQ(cuda::ChooseMatMulForm(1024, zp, true, true), MatMulForm::kW4Prefill);
  DevWeight g16 = q;
  g16.group = 16;
  EXPECT_EQ(cuda::ChooseMatMulForm(1024, g16, true, true), MatMulForm::kW4Prefill);
  DevWeight plain = q;
  plain.int4_lanes = false;
  EXPECT_EQ(cuda::ChooseMatMulForm(1024, plain, true, true), MatMulForm::kW4Prefill);
  // FP8 weights are MatMulFp8's.
  DevWeight f8 = Dense(512, 512, false);
  f8.format = DevFormat::kFp8Block;
  EXPECT_EQ(cuda::ChooseMatMulForm(64, f8, true, true), MatMulForm::kNone);
  // Every form has a name; the fallbacks say so.
  for (int f = 0; f <= static_cast<int>(MatMulForm::kNone); ++f) {
    EXPECT_STRNE(cuda::MatMulFormName(static_cast<MatMulForm>(f)), "?") << f;
  }
  EXPECT_NE(std::string(cuda::MatMulFormName(MatMulForm::kTile64)).find("FALLBACK"), std::string::npos);
}

// The group launches of a decode step's LoRA (host checks, before anything launches): more
// products or sums than one launch holds, an added product that is split, a product past the
// decode form's rows or with outputs no multiple of 8, a sum without its partials — each refused,
// naming the launch.
TEST(MatMulForm, DecodeGroupLaunchesRefuseWhatTheyCannotRun) {
  auto* p = reinterpret_cast<uint16_t*>(uintptr_t{1} << 20);
  auto* f = reinterpret_cast<float*>(uintptr_t{1} << 21);
  cuda::DecodeGroup g;
  g.xb = p, g.x_ld = 256, g.m = 1, g.w = p, g.n = 64, g.k = 256, g.y = f, g.ldy = 64;
  auto refused = [](const Status& s, const char* what) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << what;
    EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
  };
  const std::vector<cuda::DecodeGroup> many(cuda::kMaxDecodeGroups + 1, g);
  refused(cuda::GemmDecodeGroups(many.data(), many.data(), static_cast<int>(many.size()), false, nullptr), "GemmDecodeGroups");
  refused(cuda::GemmDecodeGroups(nullptr, &g, 1, false, nullptr), "GemmDecodeGroups");
  cuda::DecodeGroup split = g;
  split.split_k = 128;
  refused(cuda::GemmDecodeGroups(&split, &split, 1, /*add=*/true, nullptr), "not split");
  cuda::DecodeGroup tall = g;
  tall.m = cuda::kDecodeMaxRows + 1;
  refused(cuda::GemmDecodeGroups(&tall, &tall, 1, false, nullptr), "1..64 rows");
  cuda::DecodeGroup odd = g;
  odd.n = 60;
  refused(cuda::GemmDecodeGroups(&odd, &odd, 1, false, nullptr), "N % 8");
  cuda::DecodeGroup summed = g;  // x from an A product's slices: added products only, rows in order
  summed.x_partial = f, summed.x_splits = 2;
  refused(cuda::GemmDecodeGroups(&summed, &summed, 1, /*add=*/false, nullptr), "only for an added product");
  summed.x_rows = reinterpret_cast<const int32_t*>(f);
  refused(cuda::GemmDecodeGroups(&summed, &summed, 1, /*add=*/true, nullptr), "its rows in order");
  summed.x_rows = nullptr, summed.x_splits = 0;
  refused(cuda::GemmDecodeGroups(&summed, &summed, 1, /*add=*/true, nullptr), "one slice or more");
  summed.x_splits = 2, summed.x_partial = f + 1;
  refused(cuda::GemmDecodeGroups(&summed, &summed, 1, /*add=*/true, nullptr), "16-byte aligned");
  EXPECT_TRUE(cuda::GemmDecodeGroups(nullptr, nullptr, 0, false, nullptr).ok()) << "nothing to launch";
  const cuda::SplitSum sum{f, 2, 1, 64, p};
  const std::vector<cuda::SplitSum> sums(cuda::kMaxSplitSums + 1, sum);
  refused(cuda::SumSplitsBf16Groups(sums.data(), static_cast<int>(sums.size()), nullptr), "SumSplitsBf16Groups");
  const cuda::SplitSum none{nullptr, 2, 1, 64, p};
  refused(cuda::SumSplitsBf16Groups(&none, 1, nullptr), "no partials");
}

// The 4-bit prefill form refuses what its kernel cannot run (host checks, before anything
// launches): a weight outside the lane order, with zero points or groups below 32 columns, K not
// a multiple of 128, an x that is not 16-byte aligned, outputs rows closer than N — each naming
// the launch.
TEST(MatMulForm, W4PrefillFormRefusesWhatItCannotRun) {
  const auto* xb = reinterpret_cast<const uint16_t*>(Aligned());
  auto* y = reinterpret_cast<float*>(uintptr_t{1} << 21);
  const DevWeight q = FourBit(256, 1024, DevFormat::kInt4);
  EXPECT_TRUE(cuda::GemmWgmmaW4Fits(300, q, xb));
  EXPECT_TRUE(cuda::GemmWgmmaW4Fits(300, FourBit(256, 1024, DevFormat::kNvfp4), xb));
  auto refused = [&](const DevWeight& w, const uint16_t* x, int64_t ldy, const char* why) {
    EXPECT_FALSE(cuda::GemmWgmmaW4Fits(300, w, x) && ldy >= w.rows) << why;
    const Status s = cuda::GemmWgmmaW4(x, 300, w, y, ldy, true, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << why;
    EXPECT_NE(s.message().find("GemmWgmmaW4"), std::string::npos) << s.message();
  };
  DevWeight w = q;
  w.int4_lanes = false;
  refused(w, xb, 256, "not in lane order");
  w = q;
  w.zero = reinterpret_cast<const int32_t*>(Aligned());
  refused(w, xb, 256, "zero points");
  w = q;
  w.group = 16;
  refused(w, xb, 256, "groups of 16");
  w = FourBit(256, 1040, DevFormat::kInt4);
  refused(w, xb, 256, "K % 128");
  w = FourBit(252, 1024, DevFormat::kInt4);
  refused(w, xb, 256, "N % 8");
  DevWeight fp4 = FourBit(256, 1024, DevFormat::kNvfp4);
  fp4.nvfp4_table = nullptr;
  refused(fp4, xb, 256, "NVFP4 without its table");
  refused(q, xb + 1, 256, "x not 16-byte aligned");
  refused(q, xb, 255, "ldy < N");
  EXPECT_FALSE(cuda::GemmWgmmaW4Fits(0, q, xb)) << "no rows";
}

// The chunked 4-bit form's product (the summed slices into fp32 rows) refuses, before any launch,
// what it cannot run, naming itself.
TEST(MatMulForm, SummedSlicesIntoRowsRefuseWhatTheyCannotRun) {
  const auto* xb = reinterpret_cast<const uint16_t*>(Aligned());
  const auto* w = reinterpret_cast<const uint16_t*>(Aligned());
  auto* y = reinterpret_cast<float*>(uintptr_t{1} << 21);
  auto refused = [&](const uint16_t* x, const uint16_t* wt, int64_t m, int64_t k, int64_t split, float* out, int64_t ldy,
                     const char* why) {
    const Status s = cuda::GemmWgmmaSplitKSumF32(x, m, wt, 256, k, split, out, ldy, true, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << why;
    EXPECT_NE(s.message().find("GemmWgmmaSplitKSumF32"), std::string::npos) << s.message();
  };
  refused(xb, w, 300, 2048, 1024, y, 255, "ldy < N");
  refused(xb, w, 300, 2048, 1000, y, 256, "slices not a multiple of 64 columns");
  refused(xb, w, 300, 2048, 0, y, 256, "no slice width");
  refused(xb, w, 300, 2048, 1024, nullptr, 256, "no output");
  refused(xb + 1, w, 300, 2048, 1024, y, 256, "x not 16-byte aligned");
  refused(xb, w + 1, 300, 2048, 1024, y, 256, "w not 16-byte aligned");
  refused(xb, w, 300, 2044, 1024, y, 256, "K % 8");
  refused(xb, w, 0, 2048, 1024, y, 256, "no rows");
}

// The FP8 prefill kernel refuses, before any launch, what it cannot run, naming itself (GemmFp8's
// contract, and rows).
TEST(MatMulForm, Fp8PrefillRefusesWhatItCannotRun) {
  const auto* xq = reinterpret_cast<const uint8_t*>(Aligned());
  const auto* sx = reinterpret_cast<const float*>(Aligned());
  auto* y = reinterpret_cast<float*>(uintptr_t{1} << 21);
  DevWeight block = Dense(1024, 2048, false);
  block.format = DevFormat::kFp8Block;
  block.group = 128;
  block.scale = reinterpret_cast<const float*>(Aligned());
  DevWeight channel = block;
  channel.format = DevFormat::kFp8Channel;
  EXPECT_TRUE(cuda::GemmFp8PrefillFits(300, block, 128));
  EXPECT_TRUE(cuda::GemmFp8PrefillFits(300, channel, 2048)) << "per channel: one group, the row";
  auto refused = [&](const DevWeight& w, int64_t group, const uint8_t* x, int64_t m, float* out, int64_t ldy,
                     const char* why) {
    const Status s = cuda::GemmFp8Prefill(x, sx, m, w, group, out, ldy, true, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << why;
    EXPECT_NE(s.message().find("GemmFp8Prefill"), std::string::npos) << s.message();
  };
  refused(block, 128, xq, 0, y, 1024, "no rows");
  refused(block, 128, xq, 300, y, 1023, "ldy < N");
  refused(block, 128, xq, 300, nullptr, 1024, "no output");
  refused(block, 128, xq + 8, 300, y, 1024, "codes not 16-byte aligned");
  refused(block, 64, xq, 300, y, 1024, "activation groups other than the weight's");
  refused(channel, 128, xq, 300, y, 1024, "per channel with groups inside the row");
  DevWeight odd = block;
  odd.cols = 2040;
  refused(odd, 128, xq, 300, y, 1024, "K % 16");
  DevWeight narrow = block;
  narrow.group = 64;
  refused(narrow, 64, xq, 300, y, 1024, "blocks of 64: not 128k columns and rows");
  refused(Dense(1024, 2048, true), 128, xq, 300, y, 1024, "not an FP8 weight");
}

}  // namespace
}  // namespace graft

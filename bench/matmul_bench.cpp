// The CUDA projections of one model's layers, timed alone: for each weight format and row count,
// every fused projection of one layer of each kind (as the forward pass runs them, quantized
// slots split into parts as QuantizeWeights leaves them) and the head, with microseconds a
// call, bytes read, the share of the H200's copy bandwidth and TFLOP/s — and the step they add up to
// (each kind's layer times its count, plus the head). Dummy weights on the config cut to a few
// layers, so a format takes seconds, not graft bench's minute of host-side quantization.
//   graft_matmul_bench CONFIG_DIR [--formats bf16,w4a16,nvfp4,fp8-block,fp8-channel] [--rows 1,16,64]
//                      [--iters 50] [--threads 16] [--kernels]
// --kernels: instead, each bf16 projection shape through each prefill kernel on bf16 operands —
// the mma.sync form, the wgmma form in each tile shape, and cuBLAS's default GEMM (not batch
// invariant: the yardstick) — TFLOP/s each, timed by events; up to 64 rows also the decode form
// (MatMul runs it up to cuda::kDecodeFormRows rows: where the two forms cross over).
// --lora-a R: instead, a LoRA adapter's A products t = r(x · Aᵀ) of rank R at each distinct K of
// the projections, one module (N = R) and four stacked (N = 4R): the split form's slices then
// their sum (two launches, the partials through memory) against the summed split form (one).
#include <CLI/CLI.hpp>
#include <cuda_runtime.h>
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "weights/lora.h"
#include "backend/cuda/cublas_gemm.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/gemm_pipe.h"
#include "backend/cuda/gemm_decode.h"
#include "backend/cuda/gemm_wgmma.h"
#include "backend/cuda/matmul.h"
#include "io/model_config.h"
#include "model/architecture.h"
#include "model/projections.h"
#include "model/weight_table.h"
#include "tools/quantize.h"
#include "util/splitmix.h"

namespace graft {
namespace {

constexpr double kCopyBandwidth = 4.2e12;  // bytes/s, the H200's measured copy bandwidth

struct Options {
  std::string config;
  std::vector<std::string> formats = {"bf16", "w4a16", "nvfp4", "fp8-block"};
  std::vector<int> rows = {1, 16, 64};
  int iters = 50, threads = 16;
  bool kernels = false;
  int lora_a = 0;
};

// x rows [m, K], bf16 values in [-1, 1), through Embed from a table.
Weight XTable(int64_t m, int64_t k) {
  Weight t;
  t.name = fmt::format("x [{}, {}]", m, k);
  t.rows = m;
  t.cols = k;
  for (int64_t i = 0; i < m * k; ++i) t.f32.push_back(RoundBf16(SymmetricUniform(0x51ED + static_cast<uint64_t>(i))));
  return t;
}

struct Line {
  std::string what;
  int64_t bytes = 0;
  double seconds = 0;
  double flops = 0;  // 2 m N K
};

// Seconds per MatMul of w on m rows (after a warm-up, which uploads w).
double Time(CudaOps& ops, const Weight& w, int64_t m, int iters, std::map<std::pair<int64_t, int64_t>, Weight>& tables) {
  auto it = tables.find({m, w.cols});
  if (it == tables.end()) it = tables.emplace(std::pair{m, w.cols}, XTable(m, w.cols)).first;
  const size_t mark = ops.Mark();
  float* x = ops.Alloc(m * w.cols);
  float* y = ops.Alloc(m * w.rows);
  std::vector<int32_t> ids(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  ops.Embed(it->second, ids.data(), static_cast<int>(m), x);
  float sink = 0;
  for (int i = 0; i < 3; ++i) ops.MatMul(x, m, w, y, true);
  ops.ToHost(y, 1, &sink);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) ops.MatMul(x, m, w, y, true);
  ops.ToHost(y, 1, &sink);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
  ops.Release(mark);
  return s;
}

// --kernels: seconds per call of `run` (a Status-returning launch; events around `iters` calls
// after three warm-ups), or the first call's error.
template <typename F>
Result<double> EventTime(int iters, F&& run) {
  GRAFT_RETURN_IF_ERROR(run());
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int i = 0; i < 2; ++i) (void)run();
  cudaEventRecord(a);
  for (int i = 0; i < iters; ++i) (void)run();
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms / 1e3 / iters;
}

// EventTime's seconds, or 0 with the error printed under `flag` (the table shows the gap).
template <typename F>
double SecondsOrZero(int iters, F&& run, const char* flag) {
  Result<double> t = EventTime(iters, run);
  if (!t.ok()) fmt::print(stderr, "{}: {}\n", flag, t.status().ToString());
  return t.ok() ? *t : 0;
}

// Device bf16 values in [-1, 1) (a repeating pattern of 1M values: the products' data-dependent
// power is that of random inputs, never of zeros).
uint16_t* DeviceBf16(int64_t count, uint64_t seed) {
  constexpr int64_t kPattern = int64_t{1} << 20;
  std::vector<uint16_t> h(static_cast<size_t>(std::min(count, kPattern)));
  for (size_t i = 0; i < h.size(); ++i) h[i] = FloatToBf16(SymmetricUniform(seed + i));
  void* d = nullptr;
  if (cudaMalloc(&d, static_cast<size_t>(count) * 2) != cudaSuccess) return nullptr;
  for (int64_t off = 0; off < count; off += kPattern) {
    const int64_t c = std::min(kPattern, count - off);
    cudaMemcpy(static_cast<uint16_t*>(d) + off, h.data(), static_cast<size_t>(c) * 2, cudaMemcpyHostToDevice);
  }
  return static_cast<uint16_t*>(d);
}

int RunKernels(const Options& o, const ModelConfig& cfg, const ModelWeights& w) {
  void* workspace = nullptr;
  cudaMalloc(&workspace, size_t{32} << 20);
  auto blas = cuda::CublasGemm::Create(nullptr, workspace, int64_t{32} << 20);
  if (!blas.ok()) fmt::print("cuBLAS: {} (its column left out)\n", blas.status().ToString());
  std::map<LayerKind, int> counts;
  for (LayerKind k : cfg.layer_kinds) counts[k]++;
  for (int m : o.rows) {
    const bool decode = m <= cuda::kDecodeMaxRows;  // the decode form takes these rows
    fmt::print("\nprefill kernels, bf16, rows={}  (TFLOP/s; wgmma's own pick marked *)\n{:<44} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}\n",
               m, "projection", "decode", "mma.sync", "wg 256", "wg 160", "wg 128", "cuBLAS");
    std::map<std::string, double> step;  // kernel -> seconds over the layers x their counts
    std::map<LayerKind, bool> seen;
    for (const LayerWeights& l : w.layers) {
      if (seen[l.kind]) continue;
      seen[l.kind] = true;
      for (int t = 0; t < static_cast<int>(LoraTarget::kCount); ++t) {
        const Weight& p = FusedWeight(l, static_cast<LoraTarget>(t));
        if (p.empty() || !p.is_bf16) continue;
        const int64_t n = p.rows, k = p.cols;
        uint16_t* x = DeviceBf16(m * k, 0x1234);
        uint16_t* wd = DeviceBf16(n * k, 0x9876);
        float* y = nullptr;
        if (x == nullptr || wd == nullptr || cudaMalloc(&y, static_cast<size_t>(m * n) * 4) != cudaSuccess) {
          fmt::print(stderr, "--kernels: no device memory for the {} x {} x {} operands\n", m, n, k);
          return 1;
        }
        const double flops = 2.0 * m * n * k;
        const cuda::WgmmaForm big = cuda::WgmmaForm::kTile128x256, mid = cuda::WgmmaForm::kTile128x160,
                              small = cuda::WgmmaForm::kTile128x128;
        int sms = 0;
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
        const cuda::WgmmaForm pick = cuda::ChooseWgmmaForm(m, n, sms);
        auto time = [&](auto&& run) { return SecondsOrZero(o.iters, run, "--kernels"); };
        const double t_dec = decode ? time([&] { return cuda::GemmDecode(x, m, wd, n, k, y, n, true, nullptr); }) : 0;
        const double t_mma = time([&] { return cuda::GemmPipeMmaSync(x, m, wd, n, k, y, n, true, nullptr); });
        const double t_big = time([&] { return cuda::GemmWgmma(x, m, wd, n, k, y, n, true, nullptr, &big); });
        const double t_mid = time([&] { return cuda::GemmWgmma(x, m, wd, n, k, y, n, true, nullptr, &mid); });
        const double t_small = time([&] { return cuda::GemmWgmma(x, m, wd, n, k, y, n, true, nullptr, &small); });
        const double t_blas = blas.ok() ? time([&] { return (*blas)->Gemm(x, m, wd, n, k, y, n); }) : 0;
        if (t_mma == 0 || t_big == 0 || t_mid == 0 || t_small == 0) return 1;
        const int c = counts[l.kind];
        step["decode"] += c * t_dec;
        step["mma.sync"] += c * t_mma;
        step["wgmma"] += c * (pick == big ? t_big : pick == mid ? t_mid : t_small);
        step["cuBLAS"] += c * t_blas;
        auto mark = [&](cuda::WgmmaForm f) { return pick == f ? "*" : " "; };
        fmt::print("{:<44} {:>9.1f} {:>9.1f} {:>8.1f}{} {:>8.1f}{} {:>8.1f}{} {:>9.1f}\n",
                   fmt::format("{} {} [{}, {}]", l.kind == LayerKind::kLinearAttention ? "gdn" : "attn",
                               LoraTargetName(static_cast<LoraTarget>(t)), n, k),
                   t_dec > 0 ? flops / t_dec / 1e12 : 0.0, flops / t_mma / 1e12, flops / t_big / 1e12, mark(big), flops / t_mid / 1e12, mark(mid),
                   flops / t_small / 1e12, mark(small), t_blas > 0 ? flops / t_blas / 1e12 : 0.0);
        cudaFree(x);
        cudaFree(wd);
        cudaFree(y);
      }
    }
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) {
      fmt::print(stderr, "cuda: {}\n", cudaGetErrorString(e));
      return 1;
    }
    fmt::print("all layers' projections (the layers x their counts): decode {:.1f} ms, mma.sync {:.1f} ms, wgmma {:.1f} ms, "
               "cuBLAS {:.1f} ms\n",
               step["decode"] * 1e3, step["mma.sync"] * 1e3, step["wgmma"] * 1e3, step["cuBLAS"] * 1e3);
  }
  cudaFree(workspace);
  return 0;
}

// --lora-a: the A products' two forms at each distinct K of the config's projections.
int RunLoraA(const Options& o, const ModelWeights& w) {
  std::vector<int64_t> ks;
  for (const LayerWeights& l : w.layers) {
    for (int t = 0; t < static_cast<int>(LoraTarget::kCount); ++t) {
      const Weight& p = FusedWeight(l, static_cast<LoraTarget>(t));
      if (!p.empty() && std::find(ks.begin(), ks.end(), p.cols) == ks.end()) ks.push_back(p.cols);
    }
  }
  std::sort(ks.begin(), ks.end());
  for (int m : o.rows) {
    fmt::print("\nLoRA A products, rank {}, rows={}  (microseconds a call; TFLOP/s)\n{:<24} {:>12} {:>12} {:>9}\n", o.lora_a, m,
               "A [N, K]", "split+sum", "summed", "summed?");
    for (int64_t k : ks) {
      for (int64_t stack : {1, 4}) {
        const int64_t n = o.lora_a * stack;
        uint16_t* x = DeviceBf16(m * k, 0x1234);
        uint16_t* a = DeviceBf16(n * k, 0x9876);
        const int64_t kz = cuda::SplitKColumns(k), splits = (k + kz - 1) / kz;
        float* partial = nullptr;
        uint16_t* t = nullptr;
        if (x == nullptr || a == nullptr || cudaMalloc(&partial, static_cast<size_t>(splits * m * n) * 4) != cudaSuccess ||
            cudaMalloc(&t, static_cast<size_t>(m * n) * 2) != cudaSuccess) {
          fmt::print(stderr, "--lora-a: no device memory for the {} x {} x {} operands\n", m, n, k);
          return 1;
        }
        cuda::DevWeight dw;
        dw.data = a;
        dw.rows = n;
        dw.cols = k;
        dw.bf16 = true;
        std::vector<int64_t> starts;
        for (int64_t b = 0; b <= stack; ++b) starts.push_back(b * o.lora_a);
        const int blocks = static_cast<int>(stack);
        auto time = [&](auto&& run) { return SecondsOrZero(o.iters, run, "--lora-a"); };
        const double t_split = time([&]() -> Status {
          GRAFT_RETURN_IF_ERROR(cuda::MatMulBf16(x, k, m, dw, partial, n, false, /*split_k=*/true, nullptr));
          return cuda::SumSplitsBf16Blocks(partial, m, dw, starts.data(), blocks, t, nullptr);
        });
        const double t_sum = time([&] { return cuda::GemmWgmmaSplitKSum(x, m, a, n, k, kz, starts.data(), blocks, t, nullptr); });
        const double flops = 2.0 * m * n * k;
        fmt::print("{:<24} {:>7.1f} {:>4.0f} {:>7.1f} {:>4.0f} {:>9}\n", fmt::format("[{}, {}]", n, k), t_split * 1e6,
                   t_split > 0 ? flops / t_split / 1e12 : 0.0, t_sum * 1e6, t_sum > 0 ? flops / t_sum / 1e12 : 0.0,
                   cuda::SplitKSumFits(m, dw, k, x) ? "yes" : "no");
        cudaFree(x);
        cudaFree(a);
        cudaFree(partial);
        cudaFree(t);
      }
    }
  }
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) {
    fmt::print(stderr, "cuda: {}\n", cudaGetErrorString(e));
    return 1;
  }
  return 0;
}

int Run(const Options& o) {
  auto cfg_or = LoadModelConfig(o.config);
  if (!cfg_or.ok()) {
    fmt::print(stderr, "{}\n", cfg_or.status().ToString());
    return 1;
  }
  const ModelConfig full = *cfg_or;
  // One layer of each kind is enough: the config cut to its upper layers up to the first
  // repeat of a kind pattern (Qwen3.5: three GDN layers and one full-attention layer).
  ModelConfig cfg = full;
  const int keep = std::min(full.num_layers, 4);
  cfg.num_layers = keep;
  cfg.layer_kinds.assign(full.layer_kinds.end() - keep, full.layer_kinds.end());
  std::map<LayerKind, int> counts;
  for (LayerKind k : full.layer_kinds) counts[k]++;
  fmt::print("{}: {} layers ({} kinds); timing one of each, {} calls a projection\n", o.config, full.num_layers,
             counts.size(), o.iters);
  for (const std::string& fname : o.formats) {
    ModelWeights w;  // declared before the ops, which must not outlive the weights they upload
    CudaOptions co;
    co.scratch_bytes = int64_t{2} << 30;
    auto ops_or = CudaOps::Create(co);  // first: without a device, fail before generating weights
    if (!ops_or.ok()) {
      fmt::print(stderr, "{}\n", ops_or.status().ToString());
      return 1;
    }
    CudaOps& ops = **ops_or;
    auto w_or = DummyWeights(cfg, 7, o.threads);
    if (!w_or.ok()) {
      fmt::print(stderr, "{}\n", w_or.status().ToString());
      return 1;
    }
    w = std::move(w_or).value();
    if (fname != "bf16") {
      if (Status s = QuantizeWeights(w, cfg, ParseBenchQuantFormat(fname).value(), o.threads); !s.ok()) {  // names checked by CLI11
        fmt::print(stderr, "{}\n", s.ToString());
        return 1;
      }
    }
    if (o.kernels || o.lora_a > 0) {
      if (fname != "bf16") continue;
      if (int rc = o.lora_a > 0 ? RunLoraA(o, w) : RunKernels(o, full, w); rc != 0) return rc;
      continue;
    }
    if (Status s = ops.Upload(w); !s.ok()) {
      fmt::print(stderr, "{}\n", s.ToString());
      return 1;
    }
    std::map<std::pair<int64_t, int64_t>, Weight> tables;
    for (int m : o.rows) {
      std::vector<Line> lines;
      double step = 0;
      int64_t step_bytes = 0;
      std::map<LayerKind, bool> seen;
      for (const LayerWeights& l : w.layers) {
        if (seen[l.kind]) continue;
        seen[l.kind] = true;
        double layer = 0;
        int64_t layer_bytes = 0;
        for (int t = 0; t < static_cast<int>(LoraTarget::kCount); ++t) {
          const Weight& p = FusedWeight(l, static_cast<LoraTarget>(t));
          if (p.empty()) continue;
          const double s = Time(ops, p, m, o.iters, tables);
          lines.push_back({fmt::format("{} {} [{}, {}] {}", l.kind == LayerKind::kLinearAttention ? "gdn" : "attn",
                                       LoraTargetName(static_cast<LoraTarget>(t)), p.rows, p.cols, p.storage()),
                           p.bytes(), s, 2.0 * m * p.rows * p.cols});
          layer += s;
          layer_bytes += p.bytes();
        }
        step += layer * counts[l.kind];
        step_bytes += layer_bytes * counts[l.kind];
      }
      const double head = Time(ops, w.head(), m, o.iters, tables);
      lines.push_back({fmt::format("head [{}, {}] {}", w.head().rows, w.head().cols, w.head().storage()), w.head().bytes(),
                       head, 2.0 * m * w.head().rows * w.head().cols});
      step += head;
      step_bytes += w.head().bytes();
      if (Status e = ops.TakeError(); !e.ok()) {
        fmt::print(stderr, "{}\n", e.ToString());
        return 1;
      }
      fmt::print("\n{} rows={}\n{:<58} {:>10} {:>10} {:>8} {:>9}\n", fname, m, "projection", "us", "GB/s", "of copy",
                 "TFLOP/s");
      for (const Line& ln : lines) {
        fmt::print("{:<58} {:>10.2f} {:>10.1f} {:>7.1f}% {:>9.1f}\n", ln.what, ln.seconds * 1e6,
                   ln.bytes / ln.seconds / 1e9, 100.0 * ln.bytes / ln.seconds / kCopyBandwidth, ln.flops / ln.seconds / 1e12);
      }
      fmt::print("{:<58} {:>10.2f} {:>10.1f} {:>7.1f}%   ({:.1f} tok/s from the projections alone)\n",
                 fmt::format("step: the layers x their counts + head ({:.1f} GB)", step_bytes / 1e9), step * 1e6,
                 step_bytes / step / 1e9, 100.0 * step_bytes / step / kCopyBandwidth, m / step);
    }
  }
  return 0;
}

}  // namespace
}  // namespace graft

int main(int argc, char** argv) {
  graft::Options o;
  CLI::App app("Times each fused projection of one layer of each kind, and the head, on the CUDA backend\n"
               "(dummy weights at the config's dimensions, quantized in memory as graft quantize would).");
  app.add_option("config", o.config, "Model directory (config.json)")->required()->check(CLI::ExistingDirectory);
  app.add_option("--formats", o.formats, "Weight formats")
      ->delimiter(',')->capture_default_str()->check(CLI::IsMember({"bf16", "w4a16", "nvfp4", "fp8-block", "fp8-channel"}));
  app.add_option("--rows", o.rows, "Row counts")->delimiter(',')->capture_default_str()->check(CLI::Range(1, 65536));
  app.add_option("--iters", o.iters, "Timed calls a projection")->capture_default_str()->check(CLI::Range(1, 100000));
  app.add_option("--threads", o.threads, "CPU threads for the dummy weights")->capture_default_str()->check(CLI::Range(1, 1024));
  app.add_flag("--kernels", o.kernels,
               "Time each bf16 projection shape through each prefill kernel (mma.sync, wgmma 128x256 / 128x160 / "
               "128x128, cuBLAS) instead, and up to 64 rows the decode form too");
  app.add_option("--lora-a", o.lora_a,
                 "Time a LoRA adapter's A products of this rank at each distinct K (one module and four stacked) "
                 "in the split form and the summed split form instead")
      ->check(CLI::Range(8, 4096));
  CLI11_PARSE(app, argc, argv);
  return graft::Run(o);
}

// The Gated DeltaNet core of one layer, timed alone on the GPU: a prefill of each token count
// through GdnCore (one sequence from an empty state), and decode steps of each batch size through
// GdnCoreSeqs (one row a sequence, each on its own state, the open chunks at varied depths) —
// both forms: the tensor-core form (bf16 activations) and the SIMT form (fp32 activations, the
// kernels bf16 mode ran before the tensor-core form). Random bf16 inputs, events around each
// call, the median of --iters. Milliseconds a layer, and a model's 48 layers for the prefill.
//   graft_gdn_bench [--tokens 1024,4096,16384] [--batches 1,64] [--hk 16] [--hv 48] [--dk 128]
//                   [--dv 128] [--iters 10] [--forms tc,simt]
#include <CLI/CLI.hpp>
#include <cuda_runtime.h>
#include <fmt/core.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/gdn.h"
#include "backend/ops.h"

namespace graft {
namespace {

#define CHECK_CUDA(x)                                                                     \
  do {                                                                                    \
    const cudaError_t e_ = (x);                                                           \
    if (e_ != cudaSuccess) {                                                              \
      fmt::print(stderr, "{}:{}: {}\n", __FILE__, __LINE__, cudaGetErrorString(e_));      \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

template <typename T>
T* DevAlloc(int64_t n) {
  T* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, std::max<int64_t>(n, 1) * sizeof(T)));
  CHECK_CUDA(cudaMemset(p, 0, std::max<int64_t>(n, 1) * sizeof(T)));
  return p;
}

float* DevRandom(int64_t n, std::mt19937& rng, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> h(static_cast<size_t>(n));
  for (auto& v : h) {
    const uint32_t b = std::bit_cast<uint32_t>(d(rng)) & 0xffff0000u;  // a bf16 value
    v = std::bit_cast<float>(b);
  }
  float* p = DevAlloc<float>(n);
  CHECK_CUDA(cudaMemcpy(p, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
  return p;
}

struct State {
  float *S, *pk, *pvn, *pgam, *pkinv;
  State(int hv, int dk, int dv)
      : S(DevAlloc<float>(int64_t{hv} * dk * dv)), pk(DevAlloc<float>(int64_t{kGdnChunk} * hv * dk)),
        pvn(DevAlloc<float>(int64_t{kGdnChunk} * hv * dv)), pgam(DevAlloc<float>(int64_t{kGdnChunk} * hv)),
        pkinv(DevAlloc<float>(int64_t{kGdnChunk} * hv)) {}
  cuda::DevGdnState Dev(int pending) const { return {nullptr, S, pk, pvn, pgam, pkinv, pending}; }
};

// Milliseconds of one call between two events (exits naming the error when the call fails).
template <typename Call>
double TimeCall(cudaEvent_t e0, cudaEvent_t e1, Call call) {
  CHECK_CUDA(cudaEventRecord(e0));
  const Status s = call();
  CHECK_CUDA(cudaEventRecord(e1));
  CHECK_CUDA(cudaEventSynchronize(e1));
  if (!s.ok()) {
    fmt::print(stderr, "{}\n", s.ToString());
    std::exit(1);
  }
  float t = 0;
  CHECK_CUDA(cudaEventElapsedTime(&t, e0, e1));
  return t;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace
}  // namespace graft

int main(int argc, char** argv) {
  using namespace graft;
  CLI::App app{"graft_gdn_bench: the Gated DeltaNet core of one layer on the GPU"};
  std::vector<int> tokens = {1024, 4096, 16384}, batches = {1, 64};
  std::vector<std::string> forms = {"tc", "simt"};
  int hk = 16, hv = 48, dk = 128, dv = 128, iters = 10, layers = 48;
  app.add_option("--tokens", tokens, "prefill lengths")->delimiter(',');
  app.add_option("--batches", batches, "decode batch sizes")->delimiter(',');
  app.add_option("--forms", forms, "tc (bf16 activations) and/or simt (fp32)")->delimiter(',');
  app.add_option("--hk", hk, "key heads");
  app.add_option("--hv", hv, "value heads");
  app.add_option("--dk", dk, "key head width");
  app.add_option("--dv", dv, "value head width");
  app.add_option("--iters", iters, "timed calls (median)");
  app.add_option("--layers", layers, "GDN layers of the model, for the per-model column");
  CLI11_PARSE(app, argc, argv);
  if (hk <= 0 || hv % hk != 0 || dk <= 0 || dv <= 0 || dk > 256 || dv > 256 || iters < 1) {
    fmt::print(stderr, "bad shape: value heads a multiple of key heads, widths 1..256, iters >= 1\n");
    return 2;
  }
  std::mt19937 rng(5);
  const int64_t conv_dim = 2LL * hk * dk + int64_t{hv} * dv;
  const int max_n = std::max(*std::max_element(tokens.begin(), tokens.end()), *std::max_element(batches.begin(), batches.end()));
  float* qkv = DevRandom(int64_t{max_n} * conv_dim, rng, -1.0f, 1.0f);
  float* beta = DevRandom(int64_t{max_n} * hv, rng, 0.1f, 0.9f);
  float* g = DevRandom(int64_t{max_n} * hv, rng, -0.3f, -0.01f);
  float* out = DevAlloc<float>(int64_t{max_n} * hv * dv);
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  fmt::print("GDN core, {} key / {} value heads of {} x {}; median of {} calls\n", hk, hv, dk, dv, iters);
  fmt::print("{:<6} {:<8} {:>8} {:>12} {:>14}\n", "form", "kind", "n", "ms a layer", "ms x layers");
  for (const std::string& form : forms) {
    const bool bf16 = form == "tc";
    if (!bf16 && form != "simt") {
      fmt::print(stderr, "unknown form {} (tc, simt)\n", form);
      return 2;
    }
    for (int n : tokens) {
      State st(hv, dk, dv);
      float* scratch = DevAlloc<float>(cuda::GdnChunkScratchFloats(n, hk, hv, dk, dv));
      std::vector<double> ms;
      for (int it = 0; it < iters + 1; ++it) {
        cuda::DevGdnState ds = st.Dev(0);
        CHECK_CUDA(cudaMemset(st.S, 0, int64_t{hv} * dk * dv * 4));
        cuda::GdnCoreArgs a{qkv, beta, g, n, hk, hv, dk, dv, &ds, bf16, out, nullptr, scratch};
        const double t = TimeCall(e0, e1, [&] { return cuda::GdnCore(a, nullptr); });
        if (it > 0) ms.push_back(t);
      }
      CHECK_CUDA(cudaFree(scratch));
      const double m = Median(ms);
      fmt::print("{:<6} {:<8} {:>8} {:>12.3f} {:>14.2f}\n", form, "prefill", n, m, m * layers);
    }
    for (int b : batches) {
      std::vector<State> states;
      std::vector<cuda::GdnSeq> seqs;
      states.reserve(static_cast<size_t>(b));
      for (int i = 0; i < b; ++i) states.emplace_back(hv, dk, dv);
      cuda::GdnSeq* dseqs = DevAlloc<cuda::GdnSeq>(b);
      std::vector<double> ms;
      for (int step = 0; step < iters + 64; ++step) {  // every open-chunk depth, a chunk end included
        seqs.clear();
        for (int i = 0; i < b; ++i) {
          seqs.push_back({qkv + int64_t{i} * conv_dim, beta + int64_t{i} * hv, g + int64_t{i} * hv,
                          out + int64_t{i} * hv * dv, 1, states[static_cast<size_t>(i)].Dev((step + 7 * i) % kGdnChunk)});
        }
        CHECK_CUDA(cudaMemcpy(dseqs, seqs.data(), seqs.size() * sizeof(cuda::GdnSeq), cudaMemcpyHostToDevice));
        const double t = TimeCall(e0, e1, [&] { return cuda::GdnCoreSeqs(dseqs, b, hk, hv, dk, dv, bf16, nullptr); });
        if (step > 0) ms.push_back(t);
      }
      const double m = Median(ms);
      fmt::print("{:<6} {:<8} {:>8} {:>12.3f} {:>14.2f}\n", form, "decode", b, m, m * layers);
    }
  }
  return 0;
}

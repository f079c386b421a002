// Probe (not part of graft): how close to the copy bandwidth can a batch-1 decode step's weight
// stream get, when it is cut into one kernel a projection (as graft runs it now) and when one
// resident grid streams every projection with a grid-wide barrier where the next one would have
// to wait for its input (a persistent decode step)? No arithmetic: every byte of the step's
// weights (Qwen3.5-27B, int4 with bf16 group-128 scales, and the bf16 head) is read once and
// folded into an XOR, so the times are the structure's alone — the bound each structure puts on
// issue 10's batch-1 target before any dequantization or small op is counted.
//
//   build/graft_probe_decode_stream [--format int4|fp8|bf16] [--smalls S] [--serial-us U] [--reps N]
//   (scripts/build builds it), or
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -cudart static
//        bench/probes/decode_stream.cu -o decode_stream   (one line)
//
// Structures (a step's projections in forward order, each split evenly over the grid's blocks;
// every block keeps 32 KB of 16-byte loads in flight a multiprocessor's four blocks, or as many
// bytes in fewer, deeper blocks):
//   kernels-B     one kernel a projection (B blocks a multiprocessor), launched with
//                 programmatic dependent launch and replayed as a CUDA graph; each block issues
//                 its first loads, then waits for its predecessor (griddepcontrol.wait), as
//                 graft's 4-bit GEMM does
//   persistent    one cooperative grid; a grid barrier between projections, the next
//                 projection's loads issued only after it
//   persist-pre   the same, each block's first kDepth loads of the next projection issued
//                 before the barrier (weights do not depend on the step's data)
//   stream        one grid, no barriers: the step's bytes as one stream (the ceiling)
//   fused-4       kernels-4 with each recurrence (--serial-us) inside the launch of the
//                 projection after it: its blocks stream that projection's weights meanwhile
// The weights are int4 with bf16 group-128 scales (--format int4), e4m3 with 128 x 128 fp32 block
// scales (fp8) or bf16; the head is bf16 in each. With --smalls S (default 0), S small dependent
// ops sit between two projections, as a step's norms and slice sums do: in `kernels` each is a
// one-block kernel (wait, read a 5,120-float row, reduce, write one value), in the persistent
// forms block 0 does the same between two more barriers while the other blocks wait. With
// --serial-us U (default 0) an op of U microseconds on 48 blocks (as the Gated DeltaNet token
// kernel, one block a value head, or a decode row's attention) sits before each GDN-out and o
// projection: the recurrences a batch-1 step cannot overlap with its own data.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "probe_check.h"

namespace {

constexpr int kThreads = 256;
constexpr int kDepth = 8;          // 16-byte loads a thread in flight at four blocks an SM: 32 KB a block
constexpr int kRowFloats = 5120;   // a small op's row (the hidden size)
constexpr int kSerialBlocks = 48;  // a serial op's blocks (one a GDN value head)
constexpr double kCopyTBs = 4.2;   // the H200's measured copy bandwidth (the issue's ceiling)

struct Proj {
  const uint4* p;
  int64_t n16;  // 16-byte words
};

__device__ __forceinline__ uint4 Ld(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
__device__ __forceinline__ unsigned Fold(const uint4& v) { return v.x ^ v.y ^ v.z ^ v.w; }
__device__ __forceinline__ void Keep(unsigned acc, unsigned* sink) {
  if (acc == 0x9e3779b9u) *sink = acc;  // never true for the fill: keeps the loads alive
}
__device__ __forceinline__ void Wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void Release() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }

// Block b's share of a projection: words [lo, hi), read in rounds of kThreads words.
struct Share {
  int64_t lo, hi;
};
__device__ __forceinline__ Share ShareOf(const Proj& pr, int b, int blocks) {
  const int64_t per = (pr.n16 + blocks - 1) / blocks, lo = min(pr.n16, per * b);
  return {lo, min(pr.n16, lo + per)};
}

// The first kD rounds of a share into regs.
template <int kD>
__device__ __forceinline__ void Issue(const Proj& pr, const Share& s, uint4 (&regs)[kD]) {
#pragma unroll
  for (int d = 0; d < kD; ++d) {
    const int64_t i = s.lo + int64_t{d} * kThreads + threadIdx.x;
    regs[d] = i < s.hi ? Ld(pr.p + i) : make_uint4(0, 0, 0, 0);
  }
}
// The share's rounds from kD on, consuming regs (issued by Issue) as they go.
template <int kD>
__device__ __forceinline__ unsigned Drain(const Proj& pr, const Share& s, uint4 (&regs)[kD]) {
  unsigned acc = 0;
  const int64_t rounds = (s.hi - s.lo + kThreads - 1) / kThreads;
  for (int64_t r0 = 0; r0 < rounds; r0 += kD) {
#pragma unroll
    for (int d = 0; d < kD; ++d) {
      acc ^= Fold(regs[d]);
      const int64_t i = s.lo + (r0 + kD + d) * kThreads + threadIdx.x;
      regs[d] = i < s.hi ? Ld(pr.p + i) : make_uint4(0, 0, 0, 0);
    }
  }
  return acc;
}

// A small op: read a row of kRowFloats, reduce it in the block, write one value.
__device__ void SmallOp(const float* row, float* out) {
  __shared__ float part[kThreads / 32];
  float s = 0.0f;
  for (int i = threadIdx.x; i < kRowFloats; i += kThreads) s += row[i] * row[i];
  for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0.0f;
    for (int w = 0; w < kThreads / 32; ++w) t += part[w];
    *out = t;
  }
  __syncthreads();
}

// A serial op: the block busy for ns nanoseconds.
__device__ void SerialOp(int64_t ns) {
  if (threadIdx.x == 0) {
    uint64_t t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (static_cast<int64_t>(t - t0) < ns);
  }
  __syncthreads();
}

template <int kD>
__global__ void __launch_bounds__(kThreads) ProjKernel(Proj pr, unsigned* sink) {
  uint4 regs[kD];
  const Share s = ShareOf(pr, blockIdx.x, gridDim.x);
  Issue<kD>(pr, s, regs);
  Wait();
  Release();
  Keep(Drain<kD>(pr, s, regs), sink);
}

// A recurrence fused with the projection after it: blocks below kSerialBlocks run the serial op,
// the others stream the projection's weights meanwhile (a fused GDN-out / o whose K is split by
// head would consume each head's slice as its head finishes; here nothing is consumed).
template <int kD>
__global__ void __launch_bounds__(kThreads) FusedKernel(Proj pr, int64_t ns, unsigned* sink) {
  if (blockIdx.x < kSerialBlocks) {
    Wait();
    Release();
    SerialOp(ns);
    return;
  }
  uint4 regs[kD];
  const Share s = ShareOf(pr, blockIdx.x - kSerialBlocks, gridDim.x - kSerialBlocks);
  Issue<kD>(pr, s, regs);
  Wait();
  Release();
  Keep(Drain<kD>(pr, s, regs), sink);
}

__global__ void __launch_bounds__(kThreads) SmallKernel(const float* row, float* out) {
  Wait();
  Release();
  SmallOp(row, out);
}

__global__ void __launch_bounds__(kThreads) SerialKernel(int64_t ns) {
  Wait();
  Release();
  SerialOp(ns);
}

// A grid barrier on a counter that only grows: the k-th barrier of a launch waits for k x
// gridDim.x arrivals (the counter is cleared before each launch).
__device__ __forceinline__ void GridBarrier(unsigned* ctr, unsigned& k) {
  __syncthreads();
  ++k;
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(ctr, 1u);
    const unsigned target = k * gridDim.x;
    unsigned seen;
    do {
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(seen) : "l"(ctr) : "memory");
    } while (seen < target);
  }
  __syncthreads();
}

enum class Mode { kBarrier, kPrefetch, kStream };

// serial_before[p]: a serial op precedes projection p.
__global__ void __launch_bounds__(kThreads, 4) PersistentKernel(const Proj* projs, const unsigned char* serial_before,
                                                             int count, Mode mode, int smalls, int64_t serial_ns,
                                                             const float* row, float* out, unsigned* ctr,
                                                             unsigned* sink) {
  uint4 regs[kDepth];
  unsigned k = 0, acc = 0;
  Issue<kDepth>(projs[0], ShareOf(projs[0], blockIdx.x, gridDim.x), regs);
  for (int p = 0; p < count; ++p) {
    acc ^= Drain<kDepth>(projs[p], ShareOf(projs[p], blockIdx.x, gridDim.x), regs);
    if (p + 1 == count) break;
    const Share next = ShareOf(projs[p + 1], blockIdx.x, gridDim.x);
    if (mode != Mode::kBarrier) Issue<kDepth>(projs[p + 1], next, regs);
    if (mode != Mode::kStream) {
      GridBarrier(ctr, k);
      for (int s = 0; s < smalls; ++s) {
        if (blockIdx.x == 0) SmallOp(row, out + s);
        GridBarrier(ctr, k);
      }
      if (serial_before[p + 1]) {
        if (blockIdx.x < kSerialBlocks) SerialOp(serial_ns);
        GridBarrier(ctr, k);
      }
    }
    if (mode == Mode::kBarrier) Issue<kDepth>(projs[p + 1], next, regs);
  }
  Keep(acc, sink);
}

enum class Format { kInt4, kFp8, kBf16 };

struct Shape {
  int64_t n, k;
  bool dense;  // bf16 whatever the format (the head, the GDN b / a rows)
};
int64_t Bytes(const Shape& s, Format f) {
  if (s.dense || f == Format::kBf16) return s.n * s.k * 2;
  if (f == Format::kFp8) return s.n * s.k + ((s.n + 127) / 128) * ((s.k + 127) / 128) * 4;
  return s.n * s.k / 2 + s.n * (s.k / 128) * 2;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 10, smalls = 0;
  double serial_us = 0;
  Format format = Format::kInt4;
  std::string format_name = "int4";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--reps") == 0) {
      reps = std::atoi(argv[i + 1]);
    } else if (std::strcmp(argv[i], "--smalls") == 0) {
      smalls = std::atoi(argv[i + 1]);
    } else if (std::strcmp(argv[i], "--serial-us") == 0) {
      serial_us = std::atof(argv[i + 1]);
    } else if (std::strcmp(argv[i], "--format") == 0) {
      format_name = argv[i + 1];
      if (format_name == "int4") format = Format::kInt4;
      else if (format_name == "fp8") format = Format::kFp8;
      else if (format_name == "bf16") format = Format::kBf16;
      else { std::fprintf(stderr, "--format: int4, fp8 or bf16, not '%s'\n", argv[i + 1]); return 2; }
    } else {
      std::fprintf(stderr, "usage: %s [--format int4|fp8|bf16] [--smalls S] [--serial-us U] [--reps N]\n", argv[0]);
      return 2;
    }
  }
  if (reps < 1 || smalls < 0 || smalls > 64 || serial_us < 0 || serial_us > 1e5) {
    std::fprintf(stderr, "--reps >= 1, --smalls 0..64, --serial-us 0..100000\n");
    return 2;
  }
  // Qwen3.5-27B: 64 layers, three Gated DeltaNet layers to one full-attention layer; one launch a
  // projection as graft runs them (the GDN b / a rows ride in the GDN-in launch).
  struct Launch {
    std::vector<Shape> parts;
    bool after_serial;  // a recurrence (GDN token kernel, attention) precedes it
  };
  std::vector<Launch> step;
  for (int layer = 0; layer < 64; ++layer) {
    if (layer % 4 == 3) {
      step.push_back({{{14336, 5120, false}}, false});  // q|gate, k, v
      step.push_back({{{5120, 6144, false}}, true});    // o, after attention
    } else {
      step.push_back({{{16384, 5120, false}, {96, 5120, true}}, false});  // GDN in (qkv, z) and its b / a rows
      step.push_back({{{5120, 6144, false}}, true});                      // GDN out, after the token kernel
    }
    step.push_back({{{34816, 5120, false}}, false});  // gate|up
    step.push_back({{{5120, 17408, false}}, false});  // down
  }
  step.push_back({{{248320, 5120, true}}, false});  // the bf16 head
  std::vector<int64_t> words;
  int64_t total = 0;
  for (const Launch& l : step) {
    int64_t b = 0;
    for (const Shape& s : l.parts) b += Bytes(s, format);
    words.push_back((b + 15) / 16);
    total += words.back() * 16;
  }
  unsigned char* buf;
  CHECK(cudaMalloc(&buf, total));
  CHECK(cudaMemset(buf, 0x5a, total));
  std::vector<Proj> projs;
  std::vector<unsigned char> serial_before;
  int64_t off = 0;
  for (size_t i = 0; i < step.size(); ++i) {
    projs.push_back({reinterpret_cast<const uint4*>(buf + off), words[i]});
    serial_before.push_back(serial_us > 0 && step[i].after_serial ? 1 : 0);
    off += words[i] * 16;
  }
  Proj* dprojs;
  unsigned char* dserial;
  CHECK(cudaMalloc(&dprojs, projs.size() * sizeof(Proj)));
  CHECK(cudaMemcpy(dprojs, projs.data(), projs.size() * sizeof(Proj), cudaMemcpyHostToDevice));
  CHECK(cudaMalloc(&dserial, serial_before.size()));
  CHECK(cudaMemcpy(dserial, serial_before.data(), serial_before.size(), cudaMemcpyHostToDevice));
  float *row, *out;
  unsigned *ctr, *sink;
  CHECK(cudaMalloc(&row, kRowFloats * 4));
  CHECK(cudaMemset(row, 0, kRowFloats * 4));
  CHECK(cudaMalloc(&out, 64 * 4));
  CHECK(cudaMalloc(&ctr, 4));
  CHECK(cudaMalloc(&sink, 4));
  int sms = 0, per_sm = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, PersistentKernel, kThreads, 0));
  if (per_sm < 4) {
    std::fprintf(stderr, "the persistent grid needs 4 resident blocks a multiprocessor, the device holds %d\n", per_sm);
    return 1;
  }
  cudaStream_t st;
  CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  const int64_t serial_ns = static_cast<int64_t>(serial_us * 1000);
  const double floor_ms = total / (kCopyTBs * 1e9);
  std::printf("step (%s): %zu projection launches, %.3f GB of weights, floor %.3f ms at %.1f TB/s; %d small ops "
              "between projections, a %.1f us serial op before each GDN-out / o\n",
              format_name.c_str(), step.size(), total / 1e9, floor_ms, kCopyTBs, smalls, serial_us);
  std::printf("%-12s %10s %10s %10s\n", "structure", "ms/step", "TB/s", "of floor");
  auto report = [&](const char* name, auto run) {
    run();  // warm-up
    CHECK(cudaStreamSynchronize(st));
    CHECK(cudaEventRecord(a, st));
    for (int r = 0; r < reps; ++r) run();
    CHECK(cudaEventRecord(b, st));
    CHECK(cudaEventSynchronize(b));
    CHECK(cudaGetLastError());
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    const double t = ms / reps;
    std::printf("%-12s %10.3f %10.2f %9.1f%%\n", name, t, total / (t * 1e9), 100.0 * floor_ms / t);
  };

  // One kernel a projection at per_block blocks a multiprocessor, captured once and replayed;
  // fused: each recurrence inside the launch of the projection after it.
  auto kernels = [&](const char* name, auto kernel, int per_block, bool fused = false) {
    cudaGraph_t g;
    CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg{};
    cfg.blockDim = dim3(kThreads);
    cfg.stream = st;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    for (size_t i = 0; i < projs.size(); ++i) {
      if (serial_before[i] && fused) {
        cfg.gridDim = dim3(sms * per_block + kSerialBlocks);
        CHECK(cudaLaunchKernelEx(&cfg, FusedKernel<kDepth>, projs[i], serial_ns, sink));
      } else {
        if (serial_before[i]) {
          cfg.gridDim = dim3(kSerialBlocks);
          CHECK(cudaLaunchKernelEx(&cfg, SerialKernel, serial_ns));
        }
        cfg.gridDim = dim3(sms * per_block);
        CHECK(cudaLaunchKernelEx(&cfg, kernel, projs[i], sink));
      }
      for (int s = 0; s < smalls && i + 1 < projs.size(); ++s) {
        cfg.gridDim = dim3(1);
        CHECK(cudaLaunchKernelEx(&cfg, SmallKernel, static_cast<const float*>(row), out + s));
      }
    }
    CHECK(cudaStreamEndCapture(st, &g));
    cudaGraphExec_t ge;
    CHECK(cudaGraphInstantiate(&ge, g, 0));
    report(name, [&] { CHECK(cudaGraphLaunch(ge, st)); });
    CHECK(cudaGraphExecDestroy(ge));
    CHECK(cudaGraphDestroy(g));
  };
  kernels("kernels-4", ProjKernel<kDepth>, 4);
  kernels("kernels-2", ProjKernel<2 * kDepth>, 2);
  kernels("kernels-1", ProjKernel<4 * kDepth>, 1);
  if (serial_us > 0) kernels("fused-4", ProjKernel<kDepth>, 4, true);
  const int count = static_cast<int>(projs.size()), blocks = sms * 4;
  auto persistent = [&](Mode mode) {
    CHECK(cudaMemsetAsync(ctr, 0, 4, st));
    const Proj* p = dprojs;
    const unsigned char* sb = dserial;
    int sm = mode == Mode::kStream ? 0 : smalls;
    int64_t ns = serial_ns;
    void* args[] = {&p, &sb, const_cast<int*>(&count), &mode, &sm, &ns, &row, &out, &ctr, &sink};
    CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(PersistentKernel), dim3(blocks), dim3(kThreads), args, 0, st));
  };
  report("stream", [&] { persistent(Mode::kStream); });
  report("persistent", [&] { persistent(Mode::kBarrier); });
  report("persist-pre", [&] { persistent(Mode::kPrefetch); });
  return 0;
}

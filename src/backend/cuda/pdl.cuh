// Programmatic dependent launch (Hopper): a kernel may start while the kernel before it in the
// stream is still finishing, so that a decode step's ~1,000 short kernels do not each pay the
// launch and ramp-up gap, and a projection's first weight loads overlap its predecessor's tail.
//
// The contract every graft kernel keeps (LaunchPdl launches them all):
// - Before it reads anything an earlier kernel may have written, or writes anything an
//   earlier kernel may read, each block calls AwaitPredecessors() (griddepcontrol.wait: returns
//   once the preceding grid has completed and its writes are visible). It is called at the top,
//   before any early return, so that a grid never completes ahead of its predecessor (the
//   next grid's wait covers only its own predecessor; the chain stays ordered).
// - Before that call a kernel may read only what its predecessor cannot be writing: model weights
//   (uploaded by copies at load time, never written by a kernel) and arrays staged by copies.
//   Everything older than the predecessor has completed by then (the predecessor released this
//   grid only after its own wait), so state a kernel of an earlier step wrote is safe too; L2
//   prefetch hints are safe on anything (they move no data a thread sees).
// - ReleaseDependents() (griddepcontrol.launch_dependents) right after the wait lets the next
//   grid be scheduled once every block of this one has reached it: at most two grids are in flight,
//   and every block of the running grid is already resident before the next one takes room.
// - One kernel keeps the chain another way: the Gated DeltaNet output kernel (gdn_tc_chunk.cu)
//   runs beside its predecessor, the state kernel that walks the chunks, and reads each chunk's
//   pieces once the walk has set that chunk's flag (a release store after a fence; an acquire load
//   in the reader). Before that it reads only what the kernel before the walk wrote (complete
//   before the walk's blocks released it), and writes only its own outputs, which nothing before
//   it reads; its blocks of a sequence's last chunk wait for the walk before they end, so that the
//   grid still completes after its predecessor.
// Without the launch attribute both instructions are no-ops, so eager, captured and replayed
// steps compute the same bits; the attribute changes when kernels start, never what they compute.
//
// The prefill GEMM path (gemm_pipe's bf16 copy and both prefill GEMMs) launches without it
// (LaunchSerialized): measured on an H100 at Qwen3.5-27B dims, letting those grids start early
// made a whole prefill 8% slower at 1K and 4K and 21% slower at 16K (0.505 against 0.458 s, 2.487
// against 2.060 s), with batch-1 decode unchanged either way (bench/results/prefill.md § pdl
// (2026-12-06b)).
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace graft::cuda {

__device__ __forceinline__ void AwaitPredecessors() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void ReleaseDependents() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }
// The prologue of a kernel with nothing to load ahead: wait for the predecessor, then let the
// successor launch.
__device__ __forceinline__ void PdlBegin() {
  AwaitPredecessors();
  ReleaseDependents();
}

namespace pdl_detail {
// The launch of LaunchPdl and LaunchPdlCluster: programmatic stream serialization allowed, and a
// cluster shape when cluster.x > 0.
template <typename... Params, typename... Args>
void Launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, dim3 cluster,
            Args&&... args) {
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  unsigned count = 1;
  if (cluster.x > 0) {
    attr[1].id = cudaLaunchAttributeClusterDimension;
    attr[1].val.clusterDim.x = cluster.x;
    attr[1].val.clusterDim.y = cluster.y;
    attr[1].val.clusterDim.z = cluster.z;
    count = 2;
  }
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = count;
  (void)cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}
}  // namespace pdl_detail

// kernel<<<grid, block, smem, stream>>>(args...) with programmatic stream serialization allowed
// (the kernel keeps the contract above). Errors surface through cudaGetLastError as a <<<>>>
// launch's do (launched.h: Launched).
template <typename... Params, typename... Args>
void LaunchPdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
  pdl_detail::Launch(kernel, grid, block, smem, stream, dim3(0, 0, 0), std::forward<Args>(args)...);
}

// kernel<<<grid, block, smem, stream>>>(args...) as an ordinary launch: the kernel starts once its
// predecessor has completed (its PdlBegin is then a no-op). For kernels that lose by starting early.
template <typename... Params, typename... Args>
void LaunchSerialized(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  (void)cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

// LaunchPdl for a grid of thread-block clusters of `cluster` blocks (grid a multiple of it).
template <typename... Params, typename... Args>
void LaunchPdlCluster(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, dim3 cluster,
                      Args&&... args) {
  pdl_detail::Launch(kernel, grid, block, smem, stream, cluster, std::forward<Args>(args)...);
}

}  // namespace graft::cuda

// CudaOps' CUDA graphs: capture, recording and replay of a decode step.
#include "backend/cuda/cuda_ops.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops_detail.h"

namespace graft {

using namespace cuda_ops_detail;

// ---- CUDA graphs ----------------------------------------------------------------------------

struct CudaOps::CapturedGraph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  std::string signature;
  GraphShape shape;
  ~CapturedGraph() {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
  }
};

namespace {
// g.shape from its nodes and edges (CudaOps::GraphShape).
Status CountShape(CudaOps::CapturedGraph& g) {
  size_t nodes = 0, edges = 0;
  GRAFT_CUDA_CHECK(cudaGraphGetNodes(g.graph, nullptr, &nodes));
  std::vector<cudaGraphNode_t> all(nodes);
  GRAFT_CUDA_CHECK(cudaGraphGetNodes(g.graph, all.data(), &nodes));
  for (cudaGraphNode_t n : all) {
    cudaGraphNodeType type;
    GRAFT_CUDA_CHECK(cudaGraphNodeGetType(n, &type));
    g.shape.kernels += type == cudaGraphNodeTypeKernel;
  }
  GRAFT_CUDA_CHECK(cudaGraphGetEdges(g.graph, nullptr, nullptr, nullptr, &edges));
  std::vector<cudaGraphNode_t> from(edges), to(edges);
  std::vector<cudaGraphEdgeData> data(edges);
  GRAFT_CUDA_CHECK(cudaGraphGetEdges(g.graph, from.data(), to.data(), data.data(), &edges));
  g.shape.edges = static_cast<int>(edges);
  for (size_t i = 0; i < edges; ++i) g.shape.programmatic_edges += data[i].type == cudaGraphDependencyTypeProgrammatic;
  return Status::Ok();
}
}  // namespace

CudaOps::GraphShape CudaOps::ShapeOf(const CapturedGraph& g) { return g.shape; }

int CudaOps::PageTableCapacity(int pages) {
  int c = 16;
  while (c < pages) c *= 2;
  return c;
}

void CudaOps::FinishHostCopies() {
  for (const HostCopy& c : host_copies_) std::memcpy(c.to, c.from, static_cast<size_t>(c.bytes));
  host_copies_.clear();
}

Status CudaOps::LaunchGraph(void* exec) {
  const int64_t staged = StagedBytes();
  if (staged > 0) {
    GRAFT_CUDA_CHECK(cudaMemcpyAsync(arena_ + arena_floats_ - staged / 4, pinned_ + pinned_bytes_ - staged,
                                     static_cast<size_t>(staged), cudaMemcpyHostToDevice, S(stream_)));
  }
  GRAFT_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec), S(stream_)));
  return Status::Ok();
}

Status CudaOps::BeginCapture() {
  if (mode_ != Mode::kEager) return Internal("a graph capture or record is already open");
  GRAFT_RETURN_IF_ERROR(TakeError());
  GRAFT_CUDA_CHECK(cudaStreamSynchronize(S(stream_)));  // nothing may still read the pinned buffer
  pinned_top_ = 0;
  top_high_ = top_;
  stage_floor_ = arena_floats_;
  signature_.clear();
  host_copies_.clear();
  GRAFT_CUDA_CHECK(cudaStreamBeginCapture(S(stream_), cudaStreamCaptureModeThreadLocal));
  mode_ = Mode::kCapture;
  return Status::Ok();
}

Result<std::shared_ptr<CudaOps::CapturedGraph>> CudaOps::EndCapture() {
  if (mode_ != Mode::kCapture) return Internal("EndCapture without BeginCapture");
  mode_ = Mode::kEager;
  auto g = std::make_shared<CapturedGraph>();
  const cudaError_t end = cudaStreamEndCapture(S(stream_), &g->graph);  // always, so the stream is usable again
  Status err = TakeError();
  if (err.ok()) err = CudaStatus(end, "cudaStreamEndCapture", __FILE__, __LINE__);
  if (!err.ok()) {
    host_copies_.clear();
    return err.WithContext("capturing a CUDA graph");
  }
  GRAFT_CUDA_CHECK(cudaGraphInstantiate(&g->exec, g->graph, 0));
  g->signature = std::move(signature_);
  GRAFT_RETURN_IF_ERROR(CountShape(*g));
  GRAFT_RETURN_IF_ERROR(LaunchGraph(g->exec));
  GRAFT_CUDA_CHECK(cudaStreamSynchronize(S(stream_)));
  FinishHostCopies();
  pinned_top_ = 0;
  return g;
}

Status CudaOps::BeginRecord() {
  if (mode_ != Mode::kEager) return Internal("a graph capture or record is already open");
  GRAFT_RETURN_IF_ERROR(TakeError());
  GRAFT_CUDA_CHECK(cudaStreamSynchronize(S(stream_)));
  pinned_top_ = 0;
  top_high_ = top_;
  stage_floor_ = arena_floats_;
  signature_.clear();
  host_copies_.clear();
  mode_ = Mode::kRecord;
  return Status::Ok();
}

void CudaOps::CancelRecord() {
  mode_ = Mode::kEager;
  host_copies_.clear();
  pinned_top_ = 0;
}

Status CudaOps::ReplayRecorded(const CapturedGraph& g) {
  if (mode_ != Mode::kRecord) return Internal("ReplayRecorded without BeginRecord");
  mode_ = Mode::kEager;
  Status err = TakeError();
  if (err.ok() && signature_ != g.signature) {
    err = Internal("the recorded step is not the captured one (different kernels or parameters): capture it anew");
  }
  if (!err.ok()) {
    host_copies_.clear();
    pinned_top_ = 0;
    return err;
  }
  GRAFT_RETURN_IF_ERROR(LaunchGraph(g.exec));
  GRAFT_CUDA_CHECK(cudaStreamSynchronize(S(stream_)));
  FinishHostCopies();
  pinned_top_ = 0;
  return Status::Ok();
}

}  // namespace graft

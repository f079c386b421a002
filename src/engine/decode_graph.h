// DecodeGraph: a decode step on CudaOps captured once as a CUDA graph and replayed for the
// following steps of the same shape, so a step costs one graph launch instead of a few
// hundred kernel launches.
//
// A step's shape (its Key): the rows, which sequence each belongs to (pool, state slot) and
// the adapter slot each selects, which logit rows are read, each sequence's page-table
// capacity (CudaOps::PageTableCapacity) and the pool's size. Replay runs Model::Forward with
// the ops recording — token ids, positions, page tables, adapter slots and GDN chunk counters
// are staged into the buffers the graph reads — then launches the graph. The values change
// from step to step; the kernels and their parameters may not (CudaOps checks that).
//
// The adapter guard: a graph captured for base rows only never runs a row that selects an
// adapter — Replay refuses it with a clear error before touching anything, whatever else
// matches. A graph captured with adapter rows runs them. Rows of an exact-mode slot are never
// captured (their weights are rebuilt per step; CudaOps refuses ExactWeight while capturing):
// the cache runs those steps eagerly.
//
// Bits: a replayed step computes exactly what the same step computes eagerly (the same kernels
// on the same data), so graphs never change a row's logits.
//
// Thread-safety: as the CudaOps it uses.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/cuda_ops.h"
#include "model/model.h"

namespace graft {

class DecodeGraph {
 public:
  // Whether a step can be captured: every sequence brings exactly one token, and its pages
  // are ready without copy-on-write or pool growth (those run eagerly; capture them and a
  // replay would repeat them).
  static bool Capturable(const StepBatch& b);
  // Runs the step (writing logits as Model::Forward does) while capturing it.
  static Result<std::unique_ptr<DecodeGraph>> Capture(const Model& model, CudaOps& ops, const StepBatch& b,
                                                      const AdapterSet& adapters, float* logits,
                                                      int32_t* ids = nullptr);
  // Runs a later step of the same shape from the graph. Fails before touching any state when
  // the step has adapter rows and the graph was captured for base rows, or when its shape
  // differs (capture a new graph for it).
  Status Replay(const StepBatch& b, const AdapterSet& adapters, float* logits, int32_t* ids = nullptr);

  bool adapter_rows() const { return adapter_rows_; }
  // Its kernels and their programmatic edges (CudaOps::GraphShape).
  CudaOps::GraphShape shape() const { return CudaOps::ShapeOf(*graph_); }
  int replays() const { return replays_; }
  // The last replay's two phases, in seconds: the host's Model::Forward recording the step
  // (staging its arrays, checking its kernels) and the graph from launch to done. The host
  // phase does not overlap the device's: it is what a step costs beyond its kernels.
  double last_record_seconds() const { return last_record_s_; }
  double last_run_seconds() const { return last_run_s_; }
  // Whether b has this graph's shape (Replay's check, exposed for graph caches).
  bool Fits(const StepBatch& b, const AdapterSet& adapters) const { return KeyOf(b, adapters) == key_; }

 private:
  DecodeGraph(const Model& m, CudaOps& ops) : model_(m), ops_(ops) {}
  static std::string KeyOf(const StepBatch& b, const AdapterSet& adapters);
  const Model& model_;
  CudaOps& ops_;
  std::shared_ptr<CudaOps::CapturedGraph> graph_;
  std::string key_;
  bool adapter_rows_ = false;
  int replays_ = 0;
  double last_record_s_ = 0.0, last_run_s_ = 0.0;
};

// The decode graphs of one model on one CudaOps: a step that fits a cached graph replays it,
// another capturable step is captured (the least recently used graph beyond `capacity` is
// dropped), anything else runs eagerly. Has Model::Forward's contract; plug it into the
// engine as its StepRunner.
class DecodeGraphCache {
 public:
  DecodeGraphCache(const Model& model, CudaOps& ops, int capacity = 16)
      : model_(model), ops_(ops), capacity_(capacity) {}
  Status Run(const StepBatch& b, const AdapterSet& adapters, float* logits, int32_t* ids = nullptr);
  int captures() const { return captures_; }
  int replays() const { return replays_; }
  int eager() const { return eager_; }
  // Over the replayed steps: seconds spent recording on the host and running the graphs
  // (DecodeGraph::last_record_seconds, last_run_seconds).
  double record_seconds() const { return record_s_; }
  double run_seconds() const { return run_s_; }
  // "decode graphs: N captured, M steps replayed (host recording a ms + graph b ms a step), K
  // steps run eagerly".
  std::string Summary() const;

 private:
  const Model& model_;
  CudaOps& ops_;
  int capacity_;
  std::vector<std::unique_ptr<DecodeGraph>> graphs_;  // most recently used last
  int captures_ = 0, replays_ = 0, eager_ = 0;
  double record_s_ = 0.0, run_s_ = 0.0;
};

}  // namespace graft

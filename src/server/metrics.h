// Metrics: counters, gauges and latency histograms, rendered as Prometheus text for /metrics.
//
// Two families: graft's own (graft_requests_total and graft_request_duration_seconds by
// endpoint, model and status; the engine's counters and gauges), and vLLM's request metrics with
// vLLM's meanings and buckets, under vLLM's own names (vllm:...) so that vLLM dashboards and
// autoscalers read graft unchanged — num_requests_running / waiting, kv_cache_usage_perc,
// num_preemptions_total, prompt / generation tokens, request_success by finished_reason, and the
// histograms of time to first token, inter-token latency, end-to-end, queue, prefill, decode and
// inference time and of prompt / generation tokens a request, each labelled model_name;
// vllm:lora_requests_info (the adapters with running / waiting requests, as labels) — and the
// same request metrics again as graft_... (promtool's lint objects to the colon in vLLM's names
// and to nothing else).
// Thread-safe.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace graft {

class Metrics {
 public:
  // base_model: the model_name of the engine-wide gauges.
  explicit Metrics(std::string base_model = "base") : base_model_(std::move(base_model)) {}
  // One finished HTTP request.
  void Observe(const std::string& endpoint, const std::string& model, int status, double seconds);
  // One finished generation (a choice) of `model`: its timeline and token counts.
  void ObserveGeneration(const std::string& model, const RequestTimes& t, int prompt_tokens, int completion_tokens,
                         const std::string& finish_reason);
  // slot_names: each adapter slot's served name (for vllm:lora_requests_info); max_lora: adapters served.
  std::string Render(const EngineStats& engine, const std::map<int32_t, std::string>& slot_names = {},
                     int max_lora = 0) const;

 private:
  struct Histogram {
    const std::vector<double>* bounds = nullptr;
    std::vector<uint64_t> buckets;  // counts per bound (not cumulative)
    uint64_t count = 0;
    double sum = 0;
    void Add(double v);
  };
  // vLLM's request histograms, per model: name -> histogram.
  struct ModelStats {
    std::map<std::string, Histogram> hist;
    uint64_t prompt_tokens = 0, generation_tokens = 0;
    std::map<std::string, uint64_t> success;  // by finished_reason
  };
  std::string base_model_;
  mutable std::mutex mu_;
  std::map<std::string, uint64_t> requests_;    // labels -> count   GUARDED_BY(mu_)
  std::map<std::string, Histogram> latency_;    // labels -> histogram GUARDED_BY(mu_)
  std::map<std::string, ModelStats> models_;    // GUARDED_BY(mu_)
};

}  // namespace graft

#include "server/metrics.h"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <set>

namespace graft {
namespace {

const std::vector<double> kHttpBounds = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
// vLLM's buckets (vllm/v1/metrics/loggers.py).
const std::vector<double> kTtftBounds = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                                         1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kItlBounds = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
                                        0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
const std::vector<double> kRequestBounds = {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
                                            30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
// 1, 2, 5, 10, 20, 50, ... (vLLM's build_1_2_5_buckets), up to 10^7 tokens.
const std::vector<double> kTokenBounds = [] {
  std::vector<double> b;
  for (double m = 1; m <= 1e7; m *= 10) {
    for (double f : {1.0, 2.0, 5.0}) b.push_back(f * m);
  }
  return b;
}();

struct Family {
  const char* name;  // after the prefix
  const char* help;
  const std::vector<double>* bounds;
};
const Family kFamilies[] = {
    {"time_to_first_token_seconds", "Time to first token in seconds.", &kTtftBounds},
    {"inter_token_latency_seconds", "Time between consecutive output tokens in seconds.", &kItlBounds},
    {"e2e_request_latency_seconds", "End-to-end request latency in seconds.", &kRequestBounds},
    {"request_queue_time_seconds", "Time a request spent waiting to be scheduled, in seconds.", &kRequestBounds},
    {"request_prefill_time_seconds", "Time in the prefill phase (scheduled to first token), in seconds.", &kRequestBounds},
    {"request_decode_time_seconds", "Time in the decode phase (first to last token), in seconds.", &kRequestBounds},
    {"request_inference_time_seconds", "Time scheduled (prefill + decode), in seconds.", &kRequestBounds},
    {"request_prompt_tokens", "Prompt tokens a request.", &kTokenBounds},
    {"request_generation_tokens", "Generated tokens a request.", &kTokenBounds},
};

std::string Escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '\\' || c == '"') o += '\\';
    if (c == '\n') o += "\\n";
    else o += c;
  }
  return o;
}

// A histogram's series: name_bucket{labels,le} (cumulative), name_sum, name_count.
void RenderHistogram(std::string& out, const std::string& name, const std::string& labels, const std::vector<double>& bounds,
                     const std::vector<uint64_t>& buckets, uint64_t count, double sum) {
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds.size(); ++i) {
    cum += buckets[i];
    out += fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", name, labels, bounds[i], cum);
  }
  out += fmt::format("{}_bucket{{{},le=\"+Inf\"}} {}\n", name, labels, count);
  out += fmt::format("{}_sum{{{}}} {}\n", name, labels, sum);
  out += fmt::format("{}_count{{{}}} {}\n", name, labels, count);
}

}  // namespace

void Metrics::Histogram::Add(double v) {
  if (buckets.empty()) buckets.assign(bounds->size(), 0);
  const auto at = std::lower_bound(bounds->begin(), bounds->end(), v);  // the first bound >= v
  if (at != bounds->end()) buckets[static_cast<size_t>(at - bounds->begin())]++;
  count++;
  sum += v;
}

void Metrics::Observe(const std::string& endpoint, const std::string& model, int status, double seconds) {
  const std::string base = fmt::format("endpoint=\"{}\",model=\"{}\"", Escape(endpoint), Escape(model));
  std::lock_guard<std::mutex> l(mu_);
  requests_[fmt::format("{},status=\"{}\"", base, status)]++;
  Histogram& h = latency_[base];
  h.bounds = &kHttpBounds;
  h.Add(seconds);
}

void Metrics::ObserveGeneration(const std::string& model, const RequestTimes& t, int prompt_tokens,
                                int completion_tokens, const std::string& finish_reason) {
  std::lock_guard<std::mutex> l(mu_);
  ModelStats& m = models_[model];
  auto add = [&](const char* family, double v) {
    Histogram& h = m.hist[family];
    for (const Family& f : kFamilies) {
      if (std::string(f.name) == family) h.bounds = f.bounds;
    }
    h.Add(v);
  };
  add("time_to_first_token_seconds", t.ttft);
  for (double gap : t.itl) add("inter_token_latency_seconds", gap);
  add("e2e_request_latency_seconds", t.e2e);
  add("request_queue_time_seconds", t.queue);
  add("request_prefill_time_seconds", t.prefill);
  add("request_decode_time_seconds", t.decode);
  add("request_inference_time_seconds", t.prefill + t.decode);
  add("request_prompt_tokens", prompt_tokens);
  add("request_generation_tokens", completion_tokens);
  m.prompt_tokens += static_cast<uint64_t>(prompt_tokens);
  m.generation_tokens += static_cast<uint64_t>(completion_tokens);
  m.success[finish_reason]++;
}

std::string Metrics::Render(const EngineStats& e, const std::map<int32_t, std::string>& slot_names, int max_lora) const {
  std::string out;
  out += "# HELP graft_requests_total HTTP requests by endpoint, model and status.\n# TYPE graft_requests_total counter\n";
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& [labels, n] : requests_) out += fmt::format("graft_requests_total{{{}}} {}\n", labels, n);
  out += "# HELP graft_request_duration_seconds Request latency by endpoint and model.\n"
         "# TYPE graft_request_duration_seconds histogram\n";
  for (const auto& [labels, h] : latency_) {
    RenderHistogram(out, "graft_request_duration_seconds", labels, *h.bounds, h.buckets, h.count, h.sum);
  }
  auto scalar = [&out](const std::string& name, const char* type, const char* help, const std::string& labels,
                       double value) {
    out += fmt::format("# HELP {0} {1}\n# TYPE {0} {2}\n{0}{3} {4}\n", name, help, type,
                       labels.empty() ? "" : "{" + labels + "}", value);
  };
  scalar("graft_prompt_tokens_total", "counter", "Prompt tokens processed.", "", e.prompt_tokens);
  scalar("graft_generated_tokens_total", "counter", "Tokens generated.", "", e.generated_tokens);
  scalar("graft_engine_steps_total", "counter", "Forward steps run.", "", e.steps);
  scalar("graft_queue_waiting", "gauge", "Sequences waiting for room.", "", e.waiting);
  scalar("graft_queue_running", "gauge", "Sequences running.", "", e.running);
  scalar("graft_kv_reserved_tokens", "gauge", "KV tokens reserved by live chat sequences.", "", e.kv_reserved);
  scalar("graft_kv_decision_tokens", "gauge", "KV tokens held by decisions (records, question forks, their prefix cache).", "",
         e.kv_decisions);
  scalar("graft_kv_budget_tokens", "gauge", "KV tokens in the pool chat and decisions share.", "", e.kv_budget);
  scalar("graft_cache_pool_bytes", "gauge", "Bytes of the KV pool and its state slots, reserved at start-up.", "", e.pool_bytes);
  scalar("graft_decisions_running", "gauge", "Decisions in progress (sharing steps; --max-decisions).", "",
         e.decisions_running);
  scalar("graft_decision_restarts_total", "counter",
         "Decisions that gave their memory back to start over when the KV pool ran short (the same result).", "",
         e.decision_restarts);

  const std::string base = fmt::format("model_name=\"{}\"", Escape(base_model_));
  // vLLM's adapter gauge: the served names with requests running / waiting (a name once per
  // list, in name order), the value the time of the scrape, as vLLM sets it.
  auto names = [&](const std::map<int32_t, int>& by_slot) {
    std::set<std::string> n;
    for (const auto& [slot, count] : by_slot) {
      auto it = slot_names.find(slot);
      if (slot != 0 && count > 0 && it != slot_names.end()) n.insert(it->second);
    }
    std::string list;
    for (const auto& x : n) list += (list.empty() ? "" : ",") + Escape(x);
    return list;
  };
  out += "# HELP vllm:lora_requests_info Running stats on LoRA requests.\n# TYPE vllm:lora_requests_info gauge\n";
  out += fmt::format("vllm:lora_requests_info{{max_lora=\"{}\",running_lora_adapters=\"{}\",waiting_lora_adapters=\"{}\"}} {:.3f}\n",
                     max_lora, names(e.running_by_slot), names(e.waiting_by_slot),
                     std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
  // vLLM's family under its names (vllm:...), then the same request metrics as graft_... (the
  // engine-wide counts and gauges above are graft's already).
  for (const char* prefix : {"vllm:", "graft_"}) {
    const std::string p = prefix;
    const bool vllm = p == "vllm:";
    if (vllm) {
      scalar(p + "num_requests_running", "gauge", "Requests running (holding KV).", base, e.running);
      scalar(p + "num_requests_waiting", "gauge", "Requests waiting to be scheduled.", base, e.waiting);
    }
    scalar(p + "kv_cache_usage_perc", "gauge", "KV cache usage (held by running requests and decisions over the pool; 1 is full).",
           base, e.kv_budget > 0 ? static_cast<double>(e.kv_reserved + e.kv_decisions) / static_cast<double>(e.kv_budget) : 0.0);
    scalar(p + "prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.", base,
           e.prefix_cache_query_tokens);
    scalar(p + "prefix_cache_hits_total", "counter", "Prompt tokens continued from the prefix cache (not computed).",
           base, e.prefix_cache_hit_tokens);
    scalar(p + "num_preemptions_total", "counter",
           "Preemptions: running requests that gave their KV back to start over (recomputed, the same tokens).", base,
           e.preemptions);
    if (vllm) {
      out += "# HELP vllm:prompt_tokens_total Prompt tokens of finished requests.\n# TYPE vllm:prompt_tokens_total counter\n";
      for (const auto& [model, m] : models_) {
        out += fmt::format("vllm:prompt_tokens_total{{model_name=\"{}\"}} {}\n", Escape(model), m.prompt_tokens);
      }
      out += "# HELP vllm:generation_tokens_total Generated tokens of finished requests.\n"
             "# TYPE vllm:generation_tokens_total counter\n";
      for (const auto& [model, m] : models_) {
        out += fmt::format("vllm:generation_tokens_total{{model_name=\"{}\"}} {}\n", Escape(model), m.generation_tokens);
      }
    }
    out += fmt::format("# HELP {0}request_success_total Finished requests by finish reason.\n# TYPE {0}request_success_total counter\n", p);
    for (const auto& [model, m] : models_) {
      for (const auto& [reason, n] : m.success) {
        out += fmt::format("{}request_success_total{{model_name=\"{}\",finished_reason=\"{}\"}} {}\n", p, Escape(model),
                           Escape(reason), n);
      }
    }
    for (const Family& f : kFamilies) {
      out += fmt::format("# HELP {0}{1} {2}\n# TYPE {0}{1} histogram\n", p, f.name, f.help);
      for (const auto& [model, m] : models_) {
        auto it = m.hist.find(f.name);
        if (it == m.hist.end()) continue;
        const Histogram& h = it->second;
        RenderHistogram(out, p + f.name, fmt::format("model_name=\"{}\"", Escape(model)), *f.bounds,
                        h.buckets.empty() ? std::vector<uint64_t>(f.bounds->size(), 0) : h.buckets, h.count, h.sum);
      }
    }
  }
  return out;
}

}  // namespace graft

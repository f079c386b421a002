#include "server/metrics.h"

#include <fmt/core.h>

namespace graft {
namespace {

constexpr double kBounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};

std::string Escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '\\' || c == '"') o += '\\';
    if (c == '\n') o += "\\n";
    else o += c;
  }
  return o;
}

}  // namespace

void Metrics::Observe(const std::string& endpoint, const std::string& model, int status, double seconds) {
  const std::string base = fmt::format("endpoint=\"{}\",model=\"{}\"", Escape(endpoint), Escape(model));
  std::lock_guard<std::mutex> l(mu_);
  requests_[fmt::format("{},status=\"{}\"", base, status)]++;
  Histogram& h = latency_[base];
  if (h.buckets.empty()) h.buckets.assign(std::size(kBounds), 0);
  for (size_t i = 0; i < std::size(kBounds); ++i) if (seconds <= kBounds[i]) h.buckets[i]++;
  h.count++;
  h.sum += seconds;
}

std::string Metrics::Render(const EngineStats& e) const {
  std::string out;
  out += "# HELP graft_requests_total HTTP requests by endpoint, model and status.\n# TYPE graft_requests_total counter\n";
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& [labels, n] : requests_) out += fmt::format("graft_requests_total{{{}}} {}\n", labels, n);
  out += "# HELP graft_request_duration_seconds Request latency by endpoint and model.\n"
         "# TYPE graft_request_duration_seconds histogram\n";
  for (const auto& [labels, h] : latency_) {
    for (size_t i = 0; i < std::size(kBounds); ++i) {
      out += fmt::format("graft_request_duration_seconds_bucket{{{},le=\"{}\"}} {}\n", labels, kBounds[i], h.buckets[i]);
    }
    out += fmt::format("graft_request_duration_seconds_bucket{{{},le=\"+Inf\"}} {}\n", labels, h.count);
    out += fmt::format("graft_request_duration_seconds_sum{{{}}} {}\n", labels, h.sum);
    out += fmt::format("graft_request_duration_seconds_count{{{}}} {}\n", labels, h.count);
  }
  out += fmt::format("# HELP graft_prompt_tokens_total Prompt tokens processed.\n# TYPE graft_prompt_tokens_total counter\n"
                     "graft_prompt_tokens_total {}\n", e.prompt_tokens);
  out += fmt::format("# HELP graft_generated_tokens_total Tokens generated.\n# TYPE graft_generated_tokens_total counter\n"
                     "graft_generated_tokens_total {}\n", e.generated_tokens);
  out += fmt::format("# HELP graft_engine_steps_total Forward steps run.\n# TYPE graft_engine_steps_total counter\n"
                     "graft_engine_steps_total {}\n", e.steps);
  out += fmt::format("# HELP graft_queue_waiting Sequences waiting for room.\n# TYPE graft_queue_waiting gauge\n"
                     "graft_queue_waiting {}\n", e.waiting);
  out += fmt::format("# HELP graft_queue_running Sequences running.\n# TYPE graft_queue_running gauge\n"
                     "graft_queue_running {}\n", e.running);
  out += fmt::format("# HELP graft_kv_reserved_tokens KV tokens reserved by live sequences.\n# TYPE graft_kv_reserved_tokens gauge\n"
                     "graft_kv_reserved_tokens {}\n", e.kv_reserved);
  out += fmt::format("# HELP graft_kv_budget_tokens KV token budget.\n# TYPE graft_kv_budget_tokens gauge\n"
                     "graft_kv_budget_tokens {}\n", e.kv_budget);
  return out;
}

}  // namespace graft

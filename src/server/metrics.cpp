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
  auto scalar = [&out](const char* name, const char* type, const char* help, int64_t value) {
    out += fmt::format("# HELP {0} {1}\n# TYPE {0} {2}\n{0} {3}\n", name, help, type, value);
  };
  scalar("graft_prompt_tokens_total", "counter", "Prompt tokens processed.", e.prompt_tokens);
  scalar("graft_generated_tokens_total", "counter", "Tokens generated.", e.generated_tokens);
  scalar("graft_engine_steps_total", "counter", "Forward steps run.", e.steps);
  scalar("graft_queue_waiting", "gauge", "Sequences waiting for room.", e.waiting);
  scalar("graft_queue_running", "gauge", "Sequences running.", e.running);
  scalar("graft_kv_reserved_tokens", "gauge", "KV tokens reserved by live sequences.", e.kv_reserved);
  scalar("graft_kv_budget_tokens", "gauge", "KV token budget.", e.kv_budget);
  scalar("graft_cache_pool_bytes", "gauge", "Bytes of the KV and state pools, reserved at start-up.", e.pool_bytes);
  return out;
}

}  // namespace graft

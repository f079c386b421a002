#include "server/stats_log.h"

#include <fmt/core.h>
#include <spdlog/spdlog.h>

namespace graft {

std::string StatsLine(const EngineStats& before, const EngineStats& now, double seconds) {
  const double s = seconds > 0 ? seconds : 1;
  return fmt::format("stats: prompt {:.1f} tok/s, generation {:.1f} tok/s, running {}, waiting {}, KV {:.1f}% of {} tokens",
                     static_cast<double>(now.prompt_tokens - before.prompt_tokens) / s,
                     static_cast<double>(now.generated_tokens - before.generated_tokens) / s, now.running, now.waiting,
                     now.kv_budget > 0 ? 100.0 * static_cast<double>(now.kv_reserved) / static_cast<double>(now.kv_budget) : 0.0,
                     now.kv_budget);
}

StatsLog::StatsLog(const Engine& engine, std::chrono::milliseconds period)
    : engine_(engine), period_(period), thread_([this] { Loop(); }) {}

StatsLog::~StatsLog() { Stop(); }

void StatsLog::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void StatsLog::Loop() {
  EngineStats before = engine_.Stats();
  auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> l(mu_);
  while (!cv_.wait_for(l, period_, [this] { return stop_; })) {
    const EngineStats now = engine_.Stats();
    const auto t1 = std::chrono::steady_clock::now();
    const bool busy = now.steps != before.steps || now.running > 0 || now.waiting > 0;
    if (busy) spdlog::info("{}", StatsLine(before, now, std::chrono::duration<double>(t1 - t0).count()));
    before = now;
    t0 = t1;
  }
}

}  // namespace graft

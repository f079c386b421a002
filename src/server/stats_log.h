// StatsLog: a line every `period` while the engine works (vLLM's periodic stats): prompt and
// generation throughput over the period, running and waiting requests, KV use. Quiet while
// nothing runs. Owns its thread; Stop() (or the destructor) joins it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "engine/engine.h"

namespace graft {

// One stats line from two snapshots `seconds` apart: "stats: prompt 123.4 tok/s, generation
// 56.7 tok/s, running 2, waiting 0, KV 1.2% of 65536 tokens".
std::string StatsLine(const EngineStats& before, const EngineStats& now, double seconds);

class StatsLog {
 public:
  StatsLog(const Engine& engine, std::chrono::milliseconds period);
  ~StatsLog();
  void Stop();

 private:
  void Loop();
  const Engine& engine_;
  std::chrono::milliseconds period_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // GUARDED_BY(mu_)
  std::thread thread_;
};

}  // namespace graft

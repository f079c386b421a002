// Progress: a one-line progress bar on stderr for long work (loading, hashing, ...).
//
// Draws only when stderr is a terminal (CI logs stay clean); rate-limited to ~10 redraws/s.
// Thread-safe: workers of a ParallelFor may Add() their share as they finish it.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace graft {

class Progress {
 public:
  // total: the amount of work in `unit`s (bytes are shown as MB and MB/s).
  Progress(std::string label, uint64_t total, bool bytes);
  ~Progress();
  void Add(uint64_t n);
  void Finish();

 private:
  void Draw(bool final_draw);  // under mu_
  std::mutex mu_;
  std::string label_;
  uint64_t total_, done_ = 0;
  bool bytes_, enabled_, finished_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace graft

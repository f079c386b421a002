// OpProfile: where a step's GPU time goes, op by op (`graft bench --op-profile`). When enabled,
// CudaOps waits for each op to finish and adds its wall time (and, for matmuls, its FLOPs) to
// the op's line; the waiting serialises the stream, so totals are an upper bound of the
// overlapped run, right in their proportions. Off by default: then it costs nothing.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

namespace graft {

class OpProfile {
 public:
  explicit OpProfile(std::function<void()> sync) : sync_(std::move(sync)) {}
  struct Line {
    int64_t calls = 0;
    double seconds = 0, flops = 0;
  };
  // Times one op from construction to destruction (after waiting for the device).
  class Scope {
   public:
    Scope(OpProfile* p, const char* name, double flops) : p_(p), name_(name), flops_(flops) {
      if (p_) p_->sync_(), t0_ = std::chrono::steady_clock::now();
    }
    ~Scope() {
      if (!p_) return;
      p_->sync_();
      Line& l = p_->lines_[name_];
      l.calls++;
      l.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
      l.flops += flops_;
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    OpProfile* p_;
    const char* name_;
    double flops_;
    std::chrono::steady_clock::time_point t0_;
  };
  using Lines = std::map<std::string, Line>;
  // One line per op, by time: calls, seconds, share, TFLOP/s where FLOPs were counted.
  std::string Table() const { return TableOf(lines_); }
  static std::string TableOf(const Lines& lines);
  // What was recorded so far, and (AddSince) what was recorded after such a snapshot, added to
  // `into`: one phase's lines (a decision's question pieces) out of a longer run.
  const Lines& lines() const { return lines_; }
  static void AddSince(const Lines& now, const Lines& before, Lines& into);
  // Times the op named `op` ran (0: never).
  int64_t Calls(const std::string& op) const {
    const auto it = lines_.find(op);
    return it == lines_.end() ? 0 : it->second.calls;
  }
  void Clear() { lines_.clear(); }

 private:
  std::function<void()> sync_;
  Lines lines_;
};

}  // namespace graft

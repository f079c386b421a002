#include "util/progress.h"

#include <fmt/core.h>
#include <unistd.h>

#include <cstdio>

namespace graft {

Progress::Progress(std::string label, uint64_t total, bool bytes)
    : label_(std::move(label)), total_(total), bytes_(bytes), enabled_(::isatty(2) == 1) {
  start_ = last_draw_ = std::chrono::steady_clock::now();
}

Progress::~Progress() { Finish(); }

void Progress::Add(uint64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  done_ += n;
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ > std::chrono::milliseconds(100)) {
    last_draw_ = now;
    Draw(false);
  }
}

void Progress::Finish() {
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_) return;
  finished_ = true;
  if (enabled_) Draw(true);
}

void Progress::Draw(bool final_draw) {
  constexpr int kWidth = 30;
  const double frac = total_ ? static_cast<double>(done_) / static_cast<double>(total_) : 1.0;
  const int filled = static_cast<int>(frac * kWidth);
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::string bar(static_cast<size_t>(filled), '=');
  bar.resize(kWidth, ' ');
  std::string rate;
  if (bytes_ && secs > 0) rate = fmt::format(" {:.0f} MB/s", done_ / 1e6 / secs);
  fmt::print(stderr, "\r{} [{}] {:3.0f}%{}{}", label_, bar, frac * 100.0, rate,
             final_draw ? "\n" : "");
  std::fflush(stderr);
}

}  // namespace graft

#include "backend/cuda/op_profile.h"

#include <fmt/core.h>

#include <algorithm>
#include <vector>

namespace graft {

std::string OpProfile::TableOf(const Lines& lines) {
  std::vector<std::pair<std::string, Line>> v(lines.begin(), lines.end());
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  double total = 0;
  for (const auto& [n, l] : v) total += l.seconds;
  std::string t = fmt::format("{:<28} {:>9} {:>11} {:>7} {:>9}\n", "op", "calls", "seconds", "share", "TFLOP/s");
  for (const auto& [n, l] : v) {
    t += fmt::format("{:<28} {:>9} {:>11.4f} {:>6.1f}% {:>9}\n", n, l.calls, l.seconds, total > 0 ? 100 * l.seconds / total : 0.0,
                     l.flops > 0 ? fmt::format("{:.1f}", l.flops / l.seconds / 1e12) : std::string("-"));
  }
  t += fmt::format("{:<28} {:>9} {:>11.4f}\n", "total", "", total);
  return t;
}

void OpProfile::AddSince(const Lines& now, const Lines& before, Lines& into) {
  for (const auto& [name, l] : now) {
    const auto it = before.find(name);
    const Line b = it == before.end() ? Line{} : it->second;
    if (l.calls == b.calls) continue;
    Line& d = into[name];
    d.calls += l.calls - b.calls;
    d.seconds += l.seconds - b.seconds;
    d.flops += l.flops - b.flops;
  }
}

}  // namespace graft

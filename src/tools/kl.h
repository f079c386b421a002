// KL divergence between the next-token distributions of two logit rows.
#pragma once

#include <algorithm>
#include <cmath>

namespace graft {

// KL(softmax(p) ‖ softmax(q)) over n entries, in double precision; never negative.
inline double KlOfLogits(const float* p, const float* q, int n) {
  double mp = p[0], mq = q[0];
  for (int i = 1; i < n; ++i) mp = std::max<double>(mp, p[i]), mq = std::max<double>(mq, q[i]);
  double zp = 0, zq = 0;
  for (int i = 0; i < n; ++i) zp += std::exp(p[i] - mp), zq += std::exp(q[i] - mq);
  const double lp = std::log(zp) + mp, lq = std::log(zq) + mq;
  double kl = 0;
  for (int i = 0; i < n; ++i) kl += std::exp(p[i] - lp) * ((p[i] - lp) - (q[i] - lq));
  return std::max(kl, 0.0);
}

}  // namespace graft

#include "weights/exact.h"

#include <fmt/core.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>

#include "util/svd.h"
#include "util/bf16.h"

namespace graft {
namespace {

int64_t CountDiffs(const std::vector<uint16_t>& rec, const uint16_t* target) {
  int64_t d = 0;
  for (size_t i = 0; i < rec.size(); ++i) d += rec[i] != target[i];
  return d;
}

// The bf16 neighbours of h (as floats), for the rounding interval of h.
float NextBf16(uint16_t h, bool up) {
  const float f = Bf16ToFloat(h);
  if (f == 0.0f) return up ? Bf16ToFloat(0x0001) : -Bf16ToFloat(0x0001);
  const bool pos = f > 0;
  const uint16_t n = static_cast<uint16_t>(pos == up ? h + 1 : h - 1);
  return Bf16ToFloat(n);
}

}  // namespace

std::vector<uint16_t> ReconstructBf16(const uint16_t* base, int64_t n, int64_t k, const float* a, const float* b, int r) {
  std::vector<uint16_t> out(static_cast<size_t>(n * k));
  ReconstructRows(base, k, a, b, r, 0, n, out.data());
  return out;
}

void ReconstructRows(const uint16_t* base, int64_t k, const float* a, const float* b, int r, int64_t row0, int64_t row1,
                     uint16_t* out) {
  // Column-vectorised: acc[c] gains B[row][j]·A[j][c] for j = 0, 1, ... — per element the
  // same sum in the same order as the contract (the build never contracts to FMA).
  std::vector<float> acc(static_cast<size_t>(k));
  for (int64_t row = row0; row < row1; ++row) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    const float* br = b + row * r;
    for (int j = 0; j < r; ++j) {
      const float bj = br[j];
      const float* aj = a + j * k;
      for (int64_t c = 0; c < k; ++c) acc[c] += bj * aj[c];
    }
    uint16_t* o = out + (row - row0) * k;
    const uint16_t* w = base + row * k;
    for (int64_t c = 0; c < k; ++c) o[c] = FloatToBf16(Bf16ToFloat(w[c]) + acc[c]);
  }
}

Result<IndexedResidual> IndexResidual(ExactResidual res, int64_t count) {
  IndexedResidual out;
  out.count = count;
  if (res.index_stream.size() > UINT32_MAX) return Corrupt("exact residual: index stream over 4 GB");
  size_t at = 0;
  int64_t prev = -1;
  for (size_t v = 0; v < res.values.size(); ++v) {
    if (v % kResidualChunk == 0) {
      out.chunk_byte.push_back(static_cast<uint32_t>(at));
      out.chunk_prev.push_back(prev);
    }
    uint64_t gap = 0;
    int shift = 0;
    while (true) {
      if (at >= res.index_stream.size()) return Corrupt(fmt::format("exact residual: index stream ends at entry {}", v));
      if (shift > 56) return Corrupt("exact residual: varint longer than 64 bits");
      const uint8_t byte = res.index_stream[at++];
      gap |= static_cast<uint64_t>(byte & 0x7f) << shift;
      shift += 7;
      if (!(byte & 0x80)) break;
    }
    if (gap >= static_cast<uint64_t>(count)) {
      return Corrupt(fmt::format("exact residual: entry {} jumps {} elements, past the projection ({} elements)", v, gap, count));
    }
    const int64_t idx = prev + 1 + static_cast<int64_t>(gap);
    if (idx >= count) {
      return Corrupt(fmt::format("exact residual: index {} is outside the projection ({} elements)", idx, count));
    }
    prev = idx;
  }
  if (at != res.index_stream.size()) return Corrupt("exact residual: trailing bytes after the last index");
  out.res = std::move(res);
  return out;
}

void ApplyResidualChunk(const IndexedResidual& r, int64_t c, uint16_t* w) {
  size_t at = r.chunk_byte[static_cast<size_t>(c)];
  int64_t idx = r.chunk_prev[static_cast<size_t>(c)];
  const int64_t end = std::min<int64_t>(r.values(), (c + 1) * kResidualChunk);
  for (int64_t v = c * kResidualChunk; v < end; ++v) {
    uint64_t gap = 0;
    for (int shift = 0;; shift += 7) {
      const uint8_t byte = r.res.index_stream[at++];
      gap |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if (!(byte & 0x80)) break;
    }
    idx += 1 + static_cast<int64_t>(gap);
    w[idx] = r.res.values[static_cast<size_t>(v)];
  }
}

void AppendVarint(std::vector<uint8_t>& out, uint64_t v) {
  do {
    uint8_t byte = v & 0x7f;
    v >>= 7;
    if (v) byte |= 0x80;
    out.push_back(byte);
  } while (v);
}

ExactResidual EncodeResidual(const std::vector<uint16_t>& rec, const uint16_t* target, int64_t count) {
  ExactResidual res;
  int64_t prev = -1;
  for (int64_t i = 0; i < count; ++i) {
    if (rec[i] == target[i]) continue;
    AppendVarint(res.index_stream, static_cast<uint64_t>(i - prev - 1));
    res.values.push_back(target[i]);
    prev = i;
  }
  return res;
}

Status ApplyResidual(const ExactResidual& res, std::vector<uint16_t>& w) {
  size_t at = 0;
  int64_t prev = -1;
  for (size_t v = 0; v < res.values.size(); ++v) {
    uint64_t gap = 0;
    int shift = 0;
    while (true) {
      if (at >= res.index_stream.size()) return Corrupt(fmt::format("exact residual: index stream ends at entry {}", v));
      const uint8_t byte = res.index_stream[at++];
      if (shift > 56) return Corrupt("exact residual: varint longer than 64 bits");
      gap |= static_cast<uint64_t>(byte & 0x7f) << shift;
      shift += 7;
      if (!(byte & 0x80)) break;
    }
    const int64_t idx = prev + 1 + static_cast<int64_t>(gap);
    if (idx < 0 || idx >= static_cast<int64_t>(w.size()) || static_cast<uint64_t>(idx) < gap) {
      return Corrupt(fmt::format("exact residual: index {} is outside the projection ({} elements)", idx, w.size()));
    }
    w[static_cast<size_t>(idx)] = res.values[v];
    prev = idx;
  }
  if (at != res.index_stream.size()) return Corrupt("exact residual: trailing bytes after the last index");
  return Status::Ok();
}

Result<int64_t> RefitForExact(const uint16_t* base, const uint16_t* merged, int64_t n, int64_t k, int r,
                              std::vector<float>& a, std::vector<float>& b, int iterations, uint64_t seed) {
  std::vector<uint16_t> rec = ReconstructBf16(base, n, k, a.data(), b.data(), r);
  int64_t best = CountDiffs(rec, merged);
  std::vector<float> best_a = a, best_b = b, a_cur = a, b_cur = b;
  std::vector<float> t(static_cast<size_t>(n * k));
  int stale = 0;  // iterations without improvement; a few are allowed before giving up
  for (int it = 0; it < iterations && best > 0 && stale < 3; ++it) {
    // Project the current delta into each element's interval: where the rounding already
    // lands on the merged value keep it, elsewhere move it to the exact difference.
    for (int64_t row = 0; row < n; ++row) {
      for (int64_t c = 0; c < k; ++c) {
        const int64_t i = row * k + c;
        float acc = 0.0f;
        for (int j = 0; j < r; ++j) acc += b_cur[row * r + j] * a_cur[j * k + c];
        if (rec[i] == merged[i]) {
          t[i] = acc;
        } else {
          const float w = Bf16ToFloat(base[i]), m = Bf16ToFloat(merged[i]);
          // Aim inside the interval, a quarter of the way from m towards each neighbour.
          const float lo = m + 0.25f * (NextBf16(merged[i], false) - m);
          const float hi = m + 0.25f * (NextBf16(merged[i], true) - m);
          const float target = std::min(std::max(w + acc, std::min(lo, hi)), std::max(lo, hi));
          t[i] = target - w;
        }
      }
    }
    GRAFT_ASSIGN_OR_RETURN(LowRank lr, TruncatedSvd(t.data(), n, k, RankChoice{r, 0.0}, seed + it));
    if (lr.rank != r) break;
    std::vector<uint16_t> cand = ReconstructBf16(base, n, k, lr.a.data(), lr.b.data(), r);
    const int64_t diffs = CountDiffs(cand, merged);
    if (diffs < best) {
      best = diffs;
      best_a = lr.a;
      best_b = lr.b;
      stale = 0;
    } else {
      ++stale;
    }
    // Continue from this iterate either way: the projections may need a few steps to descend.
    a_cur = std::move(lr.a);
    b_cur = std::move(lr.b);
    rec = std::move(cand);
  }
  a = std::move(best_a);
  b = std::move(best_b);
  return best;
}

}  // namespace graft

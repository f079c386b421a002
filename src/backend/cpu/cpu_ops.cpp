#include "backend/cpu/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "weights/exact.h"
#include "backend/cpu/cpu_math.h"
#include "util/minifloat.h"
#include "util/parallel.h"

namespace graft {

using cpu::Dot16;

float CpuOps::R(float v) const { return act_ == ActDtype::kBF16 ? RoundBf16(v) : v; }

float* CpuOps::Alloc(int64_t n) {
  const size_t count = static_cast<size_t>(n > 0 ? n : 1);
  scratch_.push_back(std::make_unique_for_overwrite<float[]>(count));
  float* p = scratch_.back().get();
  std::fill(p, p + count, std::numeric_limits<float>::quiet_NaN());  // Ops::Alloc: a read before a write shows
  return p;
}

void CpuOps::Release(size_t mark) {
  while (scratch_.size() > mark) scratch_.pop_back();
}

void CpuOps::ToHost(const float* src, int64_t n, float* host_dst) {
  if (n > 0 && src != host_dst) std::memcpy(host_dst, src, static_cast<size_t>(n) * sizeof(float));
}

float DotF32(const float* a, const float* b, int64_t k) { return cpu::Dot16F32(a, b, k); }

void CpuOps::Embed(const Weight& table, const int32_t* ids, int n, float* out) {
  const int64_t h = table.cols;
  for (int t = 0; t < n; ++t) {
    const int64_t base = static_cast<int64_t>(ids[t]) * h;
    for (int64_t i = 0; i < h; ++i) out[t * h + i] = R(table.at(base + i));
  }
}

void CpuOps::RmsNorm(const float* x, const Weight& w, int64_t rows, int dim, float eps, NormKind kind, float* out,
                     uint16_t* out_bf16) {
  ParallelFor(rows, threads_, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* xr = x + r * dim;
      float* o = out + r * dim;
      const float inv = 1.0f / std::sqrt(cpu::SumSquares(xr, dim) / static_cast<float>(dim) + eps);
      for (int i = 0; i < dim; ++i) {
        if (kind == NormKind::kPlainW) o[i] = R(w.at(i) * R(xr[i] * inv));
        else o[i] = R(xr[i] * inv * (1.0f + w.at(i)));
      }
      cpu::WriteTwin(o, dim, out_bf16 != nullptr ? out_bf16 + r * dim : nullptr);
    }
  });
}

void CpuOps::MatMul(const float* x, int64_t m, const Weight& w, float* y, bool round_output, const uint16_t* xb) {
  (void)xb;  // x holds the twin's values (the CPU reads no twins)
  if (observer_) observer_(x, m, w);
  if (w.parts.empty()) {
    MatMulColumns(x, m, w, y, w.rows, 0, round_output);
    return;
  }
  int64_t col = 0;  // each tensor of a mixed-storage fused weight fills its own columns of y
  for (const Weight& p : w.parts) {
    MatMulColumns(x, m, p, y, w.rows, col, round_output);
    col += p.rows;
  }
}

// y[r, col0 + j] for j < w.rows (w dense or one quantized tensor), rows of y ldy apart.
void CpuOps::MatMulColumns(const float* x, int64_t m, const Weight& w, float* y, int64_t ldy, int64_t col0,
                           bool round_output) {
  if (w.quant && (w.quant->format == QuantFormat::kFp8Block || w.quant->format == QuantFormat::kFp8Channel)) {
    MatMulFp8(x, m, *w.quant, y, ldy, col0, round_output);
    return;
  }
  const int64_t n = w.rows, k = w.cols;
  constexpr int64_t kBlock = 16;  // output features per task
  ParallelFor((n + kBlock - 1) / kBlock, threads_, [&](int64_t b, int64_t e) {
    std::vector<float> block;  // a block of rows widened (or dequantized) once, then reused for every row of x
    for (int64_t blk = b; blk < e; ++blk) {
      const int64_t j0 = blk * kBlock, j1 = std::min(n, j0 + kBlock);
      const float* wb = nullptr;
      if (!w.dense() || w.is_bf16) {
        block.resize(static_cast<size_t>((j1 - j0) * k));
        WeightRows(w, j0, j1, block.data());
        wb = block.data();
      } else {
        wb = w.f32.data() + j0 * k;
      }
      for (int64_t r = 0; r < m; ++r) {
        const float* xr = x + r * k;
        for (int64_t j = j0; j < j1; ++j) {
          const float acc = DotF32(xr, wb + (j - j0) * k, k);
          y[r * ldy + col0 + j] = round_output ? R(acc) : acc;
        }
      }
    }
  });
}

// FP8 W8A8 as weights/quantized.h defines it.
void CpuOps::MatMulFp8(const float* x, int64_t m, const QuantizedWeight& w, float* y, int64_t ldy, int64_t col0,
                       bool round_output) {
  const int64_t n = w.rows, k = w.cols, group = Fp8ActivationGroup(w), groups = (k + group - 1) / group;
  std::vector<float> xq(static_cast<size_t>(m * k)), sx(static_cast<size_t>(m * groups));
  {
    std::vector<uint8_t> codes(static_cast<size_t>(k));
    for (int64_t r = 0; r < m; ++r) {
      Fp8QuantizeActivations(x + r * k, k, group, codes.data(), sx.data() + r * groups);
      for (int64_t c = 0; c < k; ++c) xq[static_cast<size_t>(r * k + c)] = Fp8E4M3ToFloat(codes[static_cast<size_t>(c)]);
    }
  }
  constexpr int64_t kBlock = 16;
  ParallelFor((n + kBlock - 1) / kBlock, threads_, [&](int64_t b, int64_t e) {
    std::vector<float> wq;
    for (int64_t blk = b; blk < e; ++blk) {
      const int64_t j0 = blk * kBlock, j1 = std::min(n, j0 + kBlock);
      wq.resize(static_cast<size_t>((j1 - j0) * k));
      for (int64_t i = 0; i < (j1 - j0) * k; ++i) wq[static_cast<size_t>(i)] = Fp8E4M3ToFloat(w.codes[static_cast<size_t>(j0 * k + i)]);
      for (int64_t r = 0; r < m; ++r) {
        for (int64_t j = j0; j < j1; ++j) {
          float acc = 0;
          for (int64_t g = 0; g < groups; ++g) {
            const int64_t c0 = g * group, len = std::min(k, c0 + group) - c0;
            const float dot = DotF32(xq.data() + r * k + c0, wq.data() + (j - j0) * k + c0, len);
            acc += dot * (sx[static_cast<size_t>(r * groups + g)] * Fp8WeightScale(w, j, g));
          }
          y[r * ldy + col0 + j] = round_output ? R(acc) : acc;
        }
      }
    }
  });
}

Status CpuOps::ReserveExact(int64_t elements) {
  if (elements > static_cast<int64_t>(exact_.bf16.size())) exact_.bf16.resize(static_cast<size_t>(elements));
  return Status::Ok();
}

const Weight& CpuOps::ExactWeight(const Weight& base, const std::vector<LoraModule>& modules) {
  const int64_t n = base.rows, k = base.cols;
  exact_.name = base.name + " (exact)";
  exact_.rows = n;
  exact_.cols = k;
  exact_.is_bf16 = true;
  if (static_cast<int64_t>(exact_.bf16.size()) < n * k) exact_.bf16.resize(static_cast<size_t>(n * k));
  // Rows no module covers keep the base's values.
  std::vector<const LoraModule*> owner(static_cast<size_t>(n), nullptr);
  for (const LoraModule& m : modules) {
    for (int64_t r = 0; r < m.b.rows; ++r) owner[static_cast<size_t>(m.row_offset + r)] = &m;
  }
  // Factors as floats: fp32 ones (what extract --exact stores) are read in place, bf16 ones
  // widened once per call.
  std::vector<std::vector<float>> widened;
  widened.reserve(2 * modules.size());
  auto floats = [&widened](const Weight& w) -> const float* {
    if (!w.is_bf16) return w.f32.data();
    widened.emplace_back(w.bf16.size());
    for (size_t j = 0; j < w.bf16.size(); ++j) widened.back()[j] = Bf16ToFloat(w.bf16[j]);
    return widened.back().data();
  };
  std::vector<const float*> a(modules.size()), b(modules.size());
  for (size_t i = 0; i < modules.size(); ++i) a[i] = floats(modules[i].a), b[i] = floats(modules[i].b);
  uint16_t* out = exact_.bf16.data();
  ParallelFor(n, threads_, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1;) {
      const LoraModule* m = owner[static_cast<size_t>(r)];
      int64_t e = r + 1;  // the run of rows with the same owner
      while (e < r1 && owner[static_cast<size_t>(e)] == m) ++e;
      if (!m) {
        std::copy(base.bf16.begin() + r * k, base.bf16.begin() + e * k, out + r * k);
      } else {
        const size_t i = static_cast<size_t>(m - modules.data());
        ReconstructRows(base.bf16.data() + m->row_offset * k, k, a[i], b[i], m->rank, r - m->row_offset, e - m->row_offset,
                        out + r * k);
      }
      r = e;
    }
  });
  // Then each module's residual, its chunks in parallel (they write disjoint elements).
  for (const LoraModule& m : modules) {
    const IndexedResidual& res = *m.exact;
    ParallelFor(res.chunks(), threads_, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) ApplyResidualChunk(res, c, out + m.row_offset * k);
    });
  }
  return exact_;
}

void CpuOps::LoraAdd(const LoraArgs& a) {
  ParallelFor(a.m, threads_, [&](int64_t b, int64_t e) {
    std::vector<float> t;
    for (int64_t r = b; r < e; ++r) {
      const int32_t slot = a.row_slot[r];
      if (slot <= 0 || static_cast<size_t>(slot) >= a.modules->size()) continue;
      const std::vector<LoraModule>* mods = (*a.modules)[slot];
      if (!mods) continue;
      const float* x = a.x + r * a.k;
      for (const LoraModule& m : *mods) {
        t.resize(static_cast<size_t>(m.rank));
        for (int j = 0; j < m.rank; ++j) {  // shrink: t = r(x · Aᵀ)
          t[j] = m.a.is_bf16 ? R(Dot16(x, [&](int64_t i) { return Bf16ToFloat(m.a.bf16[j * a.k + i]); }, a.k))
                             : R(Dot16(x, [&](int64_t i) { return m.a.f32[j * a.k + i]; }, a.k));
        }
        float* y = a.y + r * a.y_stride + m.row_offset;
        for (int64_t n = 0; n < m.b.rows; ++n) {  // expand: y = r(y + r(r(t · Bᵀ) * s))
          const float u = m.b.is_bf16 ? R(Dot16(t.data(), [&](int64_t i) { return Bf16ToFloat(m.b.bf16[n * m.rank + i]); }, m.rank))
                                      : R(Dot16(t.data(), [&](int64_t i) { return m.b.f32[n * m.rank + i]; }, m.rank));
          y[n] = R(y[n] + R(u * m.scale));
        }
      }
    }
  });
}

void CpuOps::CopyBlock(const float* src, int64_t src_stride, int64_t src_col, float* dst, int64_t dst_stride,
                       int64_t dst_col, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(dst + r * dst_stride + dst_col, src + r * src_stride + src_col, static_cast<size_t>(cols) * 4);
  }
}

void CpuOps::TopK(const float* x, int64_t rows, int vocab, const float* temperature, int k, float* values,
                  int32_t* ids) {
  std::vector<std::pair<float, int32_t>> row(static_cast<size_t>(vocab));
  auto better = [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; };
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * vocab;
    const float t = temperature[r];
    for (int32_t i = 0; i < vocab; ++i) row[static_cast<size_t>(i)] = {t == 0.0f ? xr[i] : xr[i] / t, i};
    std::partial_sort(row.begin(), row.begin() + k, row.end(), better);
    for (int j = 0; j < k; ++j) {
      values[r * k + j] = row[static_cast<size_t>(j)].first;
      ids[r * k + j] = row[static_cast<size_t>(j)].second;
    }
  }
}

void CpuOps::ScatterRows(const float* src, int64_t width, const int32_t* rows, int n, float* dst) {
  for (int t = 0; t < n; ++t) {
    std::memcpy(dst + int64_t{rows[t]} * width, src + int64_t{t} * width, static_cast<size_t>(width) * 4);
  }
}

void CpuOps::Rope(float* x, int n, int heads, int head_dim, int rot_dim, const int32_t* pos, const float* inv_freq,
                  float attn_scale) {
  const int half = rot_dim / 2;
  std::vector<float> c(static_cast<size_t>(half)), s(static_cast<size_t>(half));
  for (int t = 0; t < n; ++t) {
    for (int i = 0; i < half; ++i) {
      const float ang = static_cast<float>(pos[t]) * inv_freq[i];
      c[i] = R(std::cos(ang) * attn_scale);
      s[i] = R(std::sin(ang) * attn_scale);
    }
    for (int h = 0; h < heads; ++h) {
      float* v = x + (static_cast<int64_t>(t) * heads + h) * head_dim;
      for (int i = 0; i < half; ++i) {
        const float x0 = v[i], x1 = v[i + half];
        v[i] = R(R(x0 * c[i]) + R(-x1 * s[i]));
        v[i + half] = R(R(x1 * c[i]) + R(x0 * s[i]));
      }
    }
  }
}

void CpuOps::Attention(const AttentionArgs& a) {
  const int group = a.num_heads / a.num_kv_heads;
  const int hd = a.head_dim;
  const int64_t kv_stride = static_cast<int64_t>(a.num_kv_heads) * hd;
  const float* k_pages = static_cast<const float*>(a.k_pages);  // the CPU's pages are fp32
  const float* v_pages = static_cast<const float*>(a.v_pages);
  ParallelFor(static_cast<int64_t>(a.n) * a.num_heads, threads_, [&](int64_t b, int64_t e) {
    std::vector<float> p;
    std::vector<float> acc(static_cast<size_t>(hd));
    for (int64_t task = b; task < e; ++task) {
      const int t = static_cast<int>(task / a.num_heads), h = static_cast<int>(task % a.num_heads);
      const int kvh = h / group;
      const float* q = a.q + (static_cast<int64_t>(t) * a.num_heads + h) * hd;
      const int len = a.pos[t] + 1;
      p.resize(static_cast<size_t>(len));
      float mx = -INFINITY;
      auto row = [&](int j) { return static_cast<int64_t>(a.page_table[j / a.page_size]) * a.page_size + j % a.page_size; };
      for (int j = 0; j < len; ++j) {
        const float* k = k_pages + row(j) * kv_stride + kvh * hd;
        p[j] = R(R(DotF32(q, k, hd)) * a.scale);
        mx = std::max(mx, p[j]);
      }
      float sum = 0;
      for (int j = 0; j < len; ++j) {
        p[j] = std::exp(p[j] - mx);
        sum += p[j];
      }
      const float inv = 1.0f / sum;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int j = 0; j < len; ++j) {
        const float pj = R(p[j] * inv);
        const float* v = v_pages + row(j) * kv_stride + kvh * hd;
        for (int d = 0; d < hd; ++d) acc[d] += pj * v[d];
      }
      float* o = a.out + (static_cast<int64_t>(t) * a.num_heads + h) * hd;
      for (int d = 0; d < hd; ++d) o[d] = R(acc[d]);
    }
  });
}

void CpuOps::SiluMul(const float* gu, int64_t n, int64_t inter, float* out, uint16_t* out_bf16) {
  for (int64_t t = 0; t < n; ++t) {
    const float* g = gu + t * 2 * inter;
    const float* u = g + inter;
    for (int64_t i = 0; i < inter; ++i) out[t * inter + i] = R(R(cpu::Silu(g[i])) * u[i]);
  }
  cpu::WriteTwin(out, n * inter, out_bf16);
}

void CpuOps::Add(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = R(x[i] + y[i]);
}

void CpuOps::SigmoidGateMul(float* x, const float* gate, int64_t gate_stride, int64_t rows, int64_t cols,
                            uint16_t* x_bf16) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      x[r * cols + c] = R(x[r * cols + c] * R(cpu::Sigmoid(gate[r * gate_stride + c])));
    }
  }
  cpu::WriteTwin(x, rows * cols, x_bf16);
}

}  // namespace graft

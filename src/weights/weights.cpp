#include "weights/weights.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace graft {

int64_t Weight::bytes() const {
  if (quant) return quant->StoredBytes();
  if (!parts.empty()) {
    int64_t b = 0;
    for (const auto& p : parts) b += p.bytes();
    return b;
  }
  return rows * cols * (is_bf16 ? 2 : 4);
}

std::string ModelWeights::ProjectionStorage() const {
  std::vector<std::string> kinds;  // in order of first appearance
  auto add = [&kinds](const std::string& one) {
    if (std::find(kinds.begin(), kinds.end(), one) == kinds.end()) kinds.push_back(one);
  };
  for (const auto& l : layers) {
    for (const Weight* w : {&l.attn.qkv, &l.attn.o, &l.gdn.in_proj, &l.gdn.out, &l.gate_up, &l.down}) {
      if (w->empty()) continue;
      if (w->parts.empty()) add(w->storage());
      for (const Weight& p : w->parts) add(p.storage());
    }
  }
  return fmt::format("{}", fmt::join(kinds, " + "));
}

std::string Weight::storage() const {
  if (quant) return QuantFormatName(quant->format);
  if (parts.empty()) return is_bf16 ? "bf16" : "float32";
  std::string s;
  for (const auto& p : parts) {
    const std::string one = p.storage();
    if (s.find(one) == std::string::npos) s += (s.empty() ? "" : " + ") + one;
  }
  return s;
}

void MergeParts(Weight& w) {
  std::vector<Weight> merged;
  for (Weight& p : w.parts) {
    Weight* last = merged.empty() ? nullptr : &merged.back();
    if (last && last->dense() && p.dense() && last->is_bf16 == p.is_bf16 && last->cols == p.cols) {
      last->name += "+" + p.name;
      last->rows += p.rows;
      if (p.is_bf16) last->bf16.insert(last->bf16.end(), p.bf16.begin(), p.bf16.end());
      else last->f32.insert(last->f32.end(), p.f32.begin(), p.f32.end());
    } else if (last && last->quant && p.quant && last->cols == p.cols && QuantizedStackable(*last->quant, *p.quant)) {
      last->name += "+" + p.name;
      last->rows += p.rows;
      last->quant = std::make_shared<const QuantizedWeight>(StackQuantized(*last->quant, *p.quant));
    } else {
      merged.push_back(std::move(p));
    }
  }
  if (merged.size() == 1) {  // every part joined: the weight is that part, under the fused name
    Weight only = std::move(merged[0]);
    only.name = w.name;
    w = std::move(only);
    return;
  }
  w.parts = std::move(merged);
}

void WeightRows(const Weight& w, int64_t r0, int64_t r1, float* out) {
  if (!w.parts.empty()) {
    int64_t base = 0;
    for (const auto& p : w.parts) {
      const int64_t a = std::max(r0, base), b = std::min(r1, base + p.rows);
      if (a < b) WeightRows(p, a - base, b - base, out + (a - r0) * w.cols);
      base += p.rows;
    }
    return;
  }
  if (w.quant) {
    DequantizeRows(*w.quant, r0, r1, out);
    if (w.quant->format == QuantFormat::kInt4Group || w.quant->format == QuantFormat::kNvfp4) {
      for (int64_t i = 0; i < (r1 - r0) * w.cols; ++i) out[i] = RoundBf16(out[i]);
    }
    return;
  }
  for (int64_t i = r0 * w.cols; i < r1 * w.cols; ++i) out[i - r0 * w.cols] = w.at(i);
}

int64_t ModelWeights::bytes() const {
  int64_t b = embed.bytes() + final_norm.bytes() + lm_head.bytes();
  for (const auto& l : layers) {
    for (const Weight* w : {&l.input_norm, &l.post_norm, &l.attn.qkv, &l.attn.o, &l.attn.q_norm, &l.attn.k_norm,
                            &l.gdn.in_proj, &l.gdn.conv, &l.gdn.a_log, &l.gdn.dt_bias, &l.gdn.norm, &l.gdn.out,
                            &l.gate_up, &l.down}) {
      b += w->bytes();
    }
  }
  return b;
}

}  // namespace graft

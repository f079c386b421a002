#include "weights/quantized.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "util/bf16.h"
#include "util/minifloat.h"

namespace graft {

const char* QuantFormatName(QuantFormat f) {
  switch (f) {
    case QuantFormat::kFp8Block: return "fp8 (128x128 blocks)";
    case QuantFormat::kFp8Channel: return "fp8 (per channel)";
    case QuantFormat::kInt4Group: return "int4 (groups)";
    case QuantFormat::kNvfp4: return "nvfp4";
  }
  return "?";
}

int64_t QuantizedWeight::StoredBytes() const {
  return static_cast<int64_t>(codes.size() + 4 * words.size() + 4 * scale.size() + scale_fp8.size() + 4 * zero_words.size());
}

namespace {

int64_t Ceil(int64_t a, int64_t b) { return (a + b - 1) / b; }

Status Expect(const char* what, size_t have, int64_t want, const QuantizedWeight& w) {
  if (static_cast<int64_t>(have) == want) return Status::Ok();
  return InvalidArgument(fmt::format("{} weight [{}, {}]: {} has {} elements, expected {}", QuantFormatName(w.format),
                                     w.rows, w.cols, what, have, want));
}

}  // namespace

Status ValidateQuantized(const QuantizedWeight& w) {
  const int64_t n = w.rows, k = w.cols;
  if (n <= 0 || k <= 0) return InvalidArgument(fmt::format("quantized weight: bad shape [{}, {}]", n, k));
  switch (w.format) {
    case QuantFormat::kFp8Block:
      if (w.group <= 0) return InvalidArgument("fp8 block weight: block size must be positive");
      GRAFT_RETURN_IF_ERROR(Expect("codes", w.codes.size(), n * k, w));
      return Expect("scale", w.scale.size(), Ceil(n, w.group) * Ceil(k, w.group), w);
    case QuantFormat::kFp8Channel:
      GRAFT_RETURN_IF_ERROR(Expect("codes", w.codes.size(), n * k, w));
      return Expect("scale", w.scale.size(), n, w);
    case QuantFormat::kInt4Group:
      if (k % 8 != 0) return InvalidArgument(fmt::format("int4 weight: {} columns is not a multiple of 8", k));
      if (w.group <= 0 || k % w.group != 0) {
        return InvalidArgument(fmt::format("int4 weight: group {} does not divide {} columns", w.group, k));
      }
      GRAFT_RETURN_IF_ERROR(Expect("packed words", w.words.size(), n * k / 8, w));
      GRAFT_RETURN_IF_ERROR(Expect("scale", w.scale.size(), n * (k / w.group), w));
      if (!w.zero_words.empty()) return Expect("zero points", w.zero_words.size(), Ceil(n, 8) * (k / w.group), w);
      return Status::Ok();
    case QuantFormat::kNvfp4:
      if (k % 16 != 0) return InvalidArgument(fmt::format("nvfp4 weight: {} columns is not a multiple of 16", k));
      GRAFT_RETURN_IF_ERROR(Expect("codes", w.codes.size(), n * k / 2, w));
      return Expect("group scales", w.scale_fp8.size(), n * k / 16, w);
  }
  return InvalidArgument("quantized weight: unknown format");
}

bool QuantizedStackable(const QuantizedWeight& a, const QuantizedWeight& b) {
  if (a.format != b.format || a.cols != b.cols || a.group != b.group) return false;
  switch (a.format) {
    case QuantFormat::kFp8Block:
      return a.group > 0 && a.rows % a.group == 0;
    case QuantFormat::kFp8Channel:
      return true;
    case QuantFormat::kInt4Group:
      return a.zero_words.empty() == b.zero_words.empty() && (a.zero_words.empty() || a.rows % 8 == 0);
    case QuantFormat::kNvfp4:
      return std::memcmp(&a.global, &b.global, sizeof(float)) == 0;
  }
  return false;
}

QuantizedWeight StackQuantized(const QuantizedWeight& a, const QuantizedWeight& b) {
  QuantizedWeight s;
  s.format = a.format;
  s.rows = a.rows + b.rows;
  s.cols = a.cols;
  s.group = a.group;
  s.global = a.global;
  // Sized once: each array is copied a single time (these are a projection's whole codes).
  auto join = [](auto& to, const auto& x, const auto& y) {
    to.reserve(x.size() + y.size());
    to.assign(x.begin(), x.end());
    to.insert(to.end(), y.begin(), y.end());
  };
  join(s.codes, a.codes, b.codes);
  join(s.words, a.words, b.words);
  join(s.scale, a.scale, b.scale);
  join(s.scale_fp8, a.scale_fp8, b.scale_fp8);
  join(s.zero_words, a.zero_words, b.zero_words);
  return s;
}

void DequantizeRows(const QuantizedWeight& w, int64_t r0, int64_t r1, float* out) {
  const int64_t k = w.cols;
  for (int64_t n = r0; n < r1; ++n) {
    float* o = out + (n - r0) * k;
    switch (w.format) {
      case QuantFormat::kFp8Block: {
        const int64_t sc = Ceil(k, w.group);
        for (int64_t c = 0; c < k; ++c) {
          o[c] = Fp8E4M3ToFloat(w.codes[static_cast<size_t>(n * k + c)]) * w.scale[static_cast<size_t>((n / w.group) * sc + c / w.group)];
        }
        break;
      }
      case QuantFormat::kFp8Channel:
        for (int64_t c = 0; c < k; ++c) o[c] = Fp8E4M3ToFloat(w.codes[static_cast<size_t>(n * k + c)]) * w.scale[static_cast<size_t>(n)];
        break;
      case QuantFormat::kInt4Group: {
        const int64_t groups = k / w.group;
        for (int64_t c = 0; c < k; ++c) {
          const auto word = static_cast<uint32_t>(w.words[static_cast<size_t>(n * (k / 8) + c / 8)]);
          const int u = static_cast<int>((word >> (4 * (c % 8))) & 0xf);
          const int64_t g = c / w.group;
          int zp = 8;
          if (!w.zero_words.empty()) {
            const auto zw = static_cast<uint32_t>(w.zero_words[static_cast<size_t>((n / 8) * groups + g)]);
            zp = static_cast<int>((zw >> (4 * (n % 8))) & 0xf);
          }
          o[c] = static_cast<float>(u - zp) * w.scale[static_cast<size_t>(n * groups + g)];
        }
        break;
      }
      case QuantFormat::kNvfp4:
        for (int64_t c = 0; c < k; ++c) {
          const uint8_t byte = w.codes[static_cast<size_t>((n * k + c) / 2)];
          const uint8_t nib = (c % 2 == 0) ? (byte & 0xf) : (byte >> 4);
          const float s = Fp8E4M3ToFloat(w.scale_fp8[static_cast<size_t>(n * (k / 16) + c / 16)]);
          o[c] = Fp4E2M1ToFloat(nib) * s * w.global;
        }
        break;
    }
  }
}

int64_t Fp8ActivationGroup(const QuantizedWeight& w) {
  return w.format == QuantFormat::kFp8Block ? w.group : w.cols;
}

void Fp8QuantizeActivations(const float* x, int64_t k, int64_t group, uint8_t* codes, float* scales) {
  for (int64_t g0 = 0, g = 0; g0 < k; g0 += group, ++g) {
    const int64_t g1 = std::min(k, g0 + group);
    float amax = 0;
    for (int64_t c = g0; c < g1; ++c) amax = std::max(amax, std::fabs(x[c]));
    const float s = amax > 0 ? amax / 448.0f : 1.0f;
    scales[g] = s;
    for (int64_t c = g0; c < g1; ++c) codes[c] = FloatToFp8E4M3(x[c] / s);
  }
}

Result<QuantizedWeight> Quantize(const float* w, int64_t rows, int64_t cols, QuantFormat format, float shared_amax) {
  QuantizedWeight q;
  q.format = format;
  q.rows = rows;
  q.cols = cols;
  for (int64_t i = 0; i < rows * cols; ++i) {
    if (!std::isfinite(w[i])) return InvalidArgument(fmt::format("quantize: element {} is not finite", i));
  }
  switch (format) {
    case QuantFormat::kFp8Block: {
      q.group = 128;
      const int64_t rb = Ceil(rows, 128), cb = Ceil(cols, 128);
      q.scale.assign(static_cast<size_t>(rb * cb), 1.0f);
      q.codes.resize(static_cast<size_t>(rows * cols));
      for (int64_t bi = 0; bi < rb; ++bi) {
        for (int64_t bj = 0; bj < cb; ++bj) {
          float amax = 0;
          for (int64_t r = bi * 128; r < std::min(rows, (bi + 1) * 128); ++r)
            for (int64_t c = bj * 128; c < std::min(cols, (bj + 1) * 128); ++c) amax = std::max(amax, std::fabs(w[r * cols + c]));
          const float s = amax > 0 ? amax / 448.0f : 1.0f;
          q.scale[static_cast<size_t>(bi * cb + bj)] = s;
          for (int64_t r = bi * 128; r < std::min(rows, (bi + 1) * 128); ++r)
            for (int64_t c = bj * 128; c < std::min(cols, (bj + 1) * 128); ++c)
              q.codes[static_cast<size_t>(r * cols + c)] = FloatToFp8E4M3(w[r * cols + c] / s);
        }
      }
      break;
    }
    case QuantFormat::kInt4Group: {
      q.group = 128;
      if (cols % 128 != 0) return InvalidArgument(fmt::format("quantize int4: {} columns is not a multiple of 128", cols));
      const int64_t groups = cols / 128;
      q.scale.resize(static_cast<size_t>(rows * groups));
      q.words.assign(static_cast<size_t>(rows * cols / 8), 0);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t g = 0; g < groups; ++g) {
          float amax = 0;
          for (int64_t c = g * 128; c < (g + 1) * 128; ++c) amax = std::max(amax, std::fabs(w[r * cols + c]));
          const float s = amax > 0 ? RoundBf16(amax / 7.5f) : 1.0f;  // stored as bf16: round first
          q.scale[static_cast<size_t>(r * groups + g)] = s;
          for (int64_t c = g * 128; c < (g + 1) * 128; ++c) {
            const int v = static_cast<int>(std::clamp(std::nearbyint(w[r * cols + c] / s), -8.0f, 7.0f));
            auto& word = q.words[static_cast<size_t>(r * (cols / 8) + c / 8)];
            word = static_cast<int32_t>(static_cast<uint32_t>(word) | (static_cast<uint32_t>(v + 8) << (4 * (c % 8))));
          }
        }
      }
      break;
    }
    case QuantFormat::kNvfp4: {
      q.group = 16;
      if (cols % 16 != 0) return InvalidArgument(fmt::format("quantize nvfp4: {} columns is not a multiple of 16", cols));
      if (!(shared_amax >= 0.0f) || !std::isfinite(shared_amax)) {
        return InvalidArgument(fmt::format("quantize nvfp4: shared amax {} is not a finite non-negative number", shared_amax));
      }
      float amax = shared_amax;
      for (int64_t i = 0; i < rows * cols; ++i) amax = std::max(amax, std::fabs(w[i]));
      q.global = amax > 0 ? amax / (6.0f * 448.0f) : 1.0f;
      // compressed-tensors stores 1 / global and loaders invert it back: move up to the nearest
      // float for which that round trip is exact, so the served weights are the quantized ones
      // (up is safe: group scales only shrink).
      for (int i = 0; i < 64 && 1.0f / (1.0f / q.global) != q.global; ++i) {
        q.global = std::nextafter(q.global, std::numeric_limits<float>::infinity());
      }
      q.scale_fp8.resize(static_cast<size_t>(rows * cols / 16));
      q.codes.assign(static_cast<size_t>(rows * cols / 2), 0);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t g = 0; g < cols / 16; ++g) {
          float gmax = 0;
          for (int64_t c = g * 16; c < (g + 1) * 16; ++c) gmax = std::max(gmax, std::fabs(w[r * cols + c]));
          const uint8_t sc = FloatToFp8E4M3(gmax / 6.0f / q.global);
          q.scale_fp8[static_cast<size_t>(r * (cols / 16) + g)] = sc;
          const float eff = Fp8E4M3ToFloat(sc) * q.global;
          for (int64_t c = g * 16; c < (g + 1) * 16; ++c) {
            const uint8_t nib = eff > 0 ? FloatToFp4E2M1(w[r * cols + c] / eff) : 0;
            auto& byte = q.codes[static_cast<size_t>((r * cols + c) / 2)];
            byte = static_cast<uint8_t>(byte | (c % 2 == 0 ? nib : nib << 4));
          }
        }
      }
      break;
    }
    case QuantFormat::kFp8Channel: {
      q.scale.resize(static_cast<size_t>(rows));
      q.codes.resize(static_cast<size_t>(rows * cols));
      for (int64_t r = 0; r < rows; ++r) {
        float amax = 0;
        for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(w[r * cols + c]));
        const float s = amax > 0 ? amax / 448.0f : 1.0f;
        q.scale[static_cast<size_t>(r)] = s;
        for (int64_t c = 0; c < cols; ++c) q.codes[static_cast<size_t>(r * cols + c)] = FloatToFp8E4M3(w[r * cols + c] / s);
      }
      break;
    }
  }
  return q;
}

}  // namespace graft

#include "model/quantized.h"

#include <fmt/core.h>

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

}  // namespace graft

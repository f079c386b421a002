#include "io/weight_scan.h"

#include <fmt/core.h>

#include <cstring>
#include <mutex>

#include "util/parallel.h"
#include "util/progress.h"

namespace graft {
namespace {

// Element i of a W-bit code array is non-finite when its exponent bits are all ones (mask) —
// for FP8 E4M3 only S.1111.111 is NaN (it has no infinity).
template <typename T>
void Scan(const uint8_t* data, uint64_t n, T mask, T value, NonFiniteTensor* out) {
  for (uint64_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, data + i * sizeof(T), sizeof(T));
    if ((v & mask) == value) {
      if (out->count == 0) out->first = i;
      ++out->count;
    }
  }
}

bool Floating(DType t) {
  switch (t) {
    case DType::kBF16: case DType::kF16: case DType::kF32: case DType::kF64: case DType::kF8E4M3: case DType::kF8E5M2:
      return true;
    default:
      return false;
  }
}

}  // namespace

WeightScan ScanNonFinite(const Checkpoint& ckpt, int threads) {
  const std::vector<TensorRef> all = ckpt.All();
  std::vector<const TensorRef*> floating;
  WeightScan scan;
  for (const TensorRef& t : all) {
    if (!Floating(t.info->dtype)) continue;
    floating.push_back(&t);
    scan.bytes += t.info->num_bytes();
  }
  scan.tensors = floating.size();
  std::vector<NonFiniteTensor> found(floating.size());
  Progress bar("checking weights for NaN / inf in " + ckpt.dir(), scan.bytes, /*bytes=*/true);
  ParallelFor(static_cast<int64_t>(floating.size()), threads, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      const TensorRef& t = *floating[static_cast<size_t>(k)];
      const uint64_t n = t.info->num_elements();
      NonFiniteTensor& r = found[static_cast<size_t>(k)];
      const uint8_t* d = t.data();
      switch (t.info->dtype) {
        case DType::kBF16: Scan<uint16_t>(d, n, 0x7f80, 0x7f80, &r); break;
        case DType::kF16: Scan<uint16_t>(d, n, 0x7c00, 0x7c00, &r); break;
        case DType::kF32: Scan<uint32_t>(d, n, 0x7f800000u, 0x7f800000u, &r); break;
        case DType::kF64: Scan<uint64_t>(d, n, 0x7ff0000000000000ull, 0x7ff0000000000000ull, &r); break;
        case DType::kF8E4M3: Scan<uint8_t>(d, n, 0x7f, 0x7f, &r); break;
        case DType::kF8E5M2: Scan<uint8_t>(d, n, 0x7c, 0x7c, &r); break;
        default: break;
      }
      r.name = t.info->name;
      bar.Add(t.info->num_bytes());
    }
  });
  bar.Finish();
  for (auto& r : found) {
    if (r.count > 0) scan.bad.push_back(std::move(r));
  }
  return scan;
}

Status NonFiniteError(const Checkpoint& ckpt, const WeightScan& scan) {
  if (scan.bad.empty()) return Status::Ok();
  std::string list;
  for (size_t i = 0; i < scan.bad.size() && i < 8; ++i) {
    const auto& b = scan.bad[i];
    list += fmt::format("{}{}: {} non-finite value{} (the first at element {})", i ? "; " : "", b.name, b.count,
                        b.count == 1 ? "" : "s", b.first);
  }
  if (scan.bad.size() > 8) list += fmt::format("; and {} more tensors", scan.bad.size() - 8);
  return InvalidArgument(fmt::format("{}: weights hold NaN or infinity — {}", ckpt.dir(), list));
}

}  // namespace graft

// Element types of safetensors files, with their widths in bits.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace graft {

enum class DType : uint8_t {
  kBool, kU8, kI8, kU16, kI16, kF16, kBF16, kU32, kI32, kF32, kU64, kI64, kF64,
  kF8E4M3, kF8E5M2, kF8E8M0, kF4, kF6E2M3, kF6E3M2, kF8E4M3Fnuz, kF8E5M2Fnuz, kC64,
};

// The safetensors spelling ("BF16", "F8_E4M3", ...) -> DType; nullopt if unknown.
std::optional<DType> ParseDType(std::string_view s);
const char* DTypeName(DType t);
// Bits per element (4 for F4, 6 for F6_*, 1 byte for BOOL).
int DTypeBits(DType t);

}  // namespace graft

#include "io/dtype.h"

#include <array>
#include <utility>

namespace graft {
namespace {

struct Entry {
  DType type;
  const char* name;
  int bits;
};

constexpr std::array<Entry, 22> kTable = {{
    {DType::kBool, "BOOL", 8},        {DType::kU8, "U8", 8},
    {DType::kI8, "I8", 8},            {DType::kU16, "U16", 16},
    {DType::kI16, "I16", 16},         {DType::kF16, "F16", 16},
    {DType::kBF16, "BF16", 16},       {DType::kU32, "U32", 32},
    {DType::kI32, "I32", 32},         {DType::kF32, "F32", 32},
    {DType::kU64, "U64", 64},         {DType::kI64, "I64", 64},
    {DType::kF64, "F64", 64},         {DType::kF8E4M3, "F8_E4M3", 8},
    {DType::kF8E5M2, "F8_E5M2", 8},   {DType::kF8E8M0, "F8_E8M0", 8},
    {DType::kF4, "F4", 4},            {DType::kF6E2M3, "F6_E2M3", 6},
    {DType::kF6E3M2, "F6_E3M2", 6},   {DType::kF8E4M3Fnuz, "F8_E4M3FNUZ", 8},
    {DType::kF8E5M2Fnuz, "F8_E5M2FNUZ", 8}, {DType::kC64, "C64", 64},
}};

}  // namespace

std::optional<DType> ParseDType(std::string_view s) {
  for (const auto& e : kTable) {
    if (s == e.name) return e.type;
  }
  return std::nullopt;
}

const char* DTypeName(DType t) { return kTable[static_cast<size_t>(t)].name; }
int DTypeBits(DType t) { return kTable[static_cast<size_t>(t)].bits; }

}  // namespace graft

// libFuzzer target for the safetensors header parser: any byte string must give either a
// validated header or an error Status, never a crash, a hang or an out-of-bounds read.
#include <cstddef>
#include <cstdint>

#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The input is a whole file: length prefix, header, buffer.
  auto h = graft::ParseSafetensorsHeader(data, size, size, "fuzz");
  if (h.ok()) {
    for (const auto& t : h->tensors) {
      if (t.end > size) __builtin_trap();  // validated offsets must lie inside the file
    }
  }
  return 0;
}

// A dummy LoRA adapter for benchmarks: rank R on every projection of the upper N layers, with
// seeded random factors (A uniform in ±1/sqrt(K), B uniform in ±1/sqrt(R)) in fp32 (as PEFT
// saves them) or bf16, scale 1. The workload of issue 9 ("rank 256 on every projection of the
// upper 24 layers") without a file.
#pragma once

#include <cstdint>

#include "weights/lora.h"
#include "io/model_config.h"

namespace graft {

LoraAdapter DummyAdapter(const ModelConfig& c, int rank, int upper_layers, bool bf16, uint64_t seed);

// Gives every module of `a` a synthetic exact residual (weights/exact.h) touching about
// `fraction` of its elements at seeded random places with random bf16 values, so the adapter
// can be served in exact mode: the exact-mode workload of issue 11 without a release.
void AddDummyExact(LoraAdapter& a, double fraction, uint64_t seed);

}  // namespace graft

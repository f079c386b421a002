// The declarative map from checkpoint tensor names to model slots, and the loader that applies it.
// The table is the embedding, each layer's rows as its architecture's registry entry lists them
// (model/architecture.h, rows as in model/layer_table.h), the final norm and an untied head.
//
// Each entry names a slot and the checkpoint tensors that fill it, with their expected shapes;
// parts are concatenated by rows (the fusions). Names are relative to the config's weight
// prefix ("model." or "model.language_model."); lm_head.weight is absolute. Loading checks
// every shape, refuses tensors nobody claims (except the vision tower, MTP layers and rotary
// caches, which a text model skips), and ties lm_head to the embedding when the config says so
// or when the checkpoint has no lm_head.
#pragma once

#include <functional>
#include <string>

#include "io/checkpoint.h"
#include "io/model_config.h"
#include "weights/weights.h"
#include "util/status.h"

namespace graft {

Result<ModelWeights> LoadWeights(const Checkpoint& ckpt, const ModelConfig& cfg);

// Only the slots `wanted` accepts (given the slot in the returned weights, e.g. a layer's fused
// projection), every other slot left empty: exact mode's resident bf16 copy of the projections
// its adapters touch. Shapes are checked as LoadWeights checks them.
Result<ModelWeights> LoadSlots(const Checkpoint& ckpt, const ModelConfig& cfg,
                               const std::function<bool(const ModelWeights&, const Weight*)>& wanted);

// `--load-format dummy` (vLLM's name): every slot the table names, at the config's shapes, in
// bf16, filled with seeded pseudo-random values — projections uniform in ±1/sqrt(cols), vectors
// at the table's value (norms at their identity: w = 1 where they scale by w, 0 for Qwen3.5's
// 1+w; GDN A_log 0 and dt_bias 0) — for benchmarks at real dimensions without a checkpoint. The
// same seed gives the same bits. An architecture outside the registry is an error.
Result<ModelWeights> DummyWeights(const ModelConfig& cfg, uint64_t seed, int threads);

// True for tensors a text model skips on purpose: the vision tower, MTP layers, rotary caches,
// and lm_head when the embeddings are tied.
bool SkippedByTextModel(const std::string& name, const ModelConfig& cfg);

}  // namespace graft

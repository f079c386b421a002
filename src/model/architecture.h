// The architecture registry: one entry per architecture graft runs, holding everything that
// differs between them — how config.json names it and its defaults, the weight-table rows of one
// layer (from which the loader, the dummy weights and the projection list all come) and its
// forward pass. An entry lives beside its forward pass (qwen3.cpp, qwen3_5.cpp); adding an
// architecture is one such file and one line in Architectures() (architecture.cpp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "io/model_config.h"
#include "model/layer_table.h"
#include "util/status.h"
#include "weights/weights.h"

namespace graft {

class Model;

struct Architecture {
  ArchConfigSpec config;  // config.name is the registry name ModelConfig::arch holds
  // 1 where the residual and final norms scale by w, 0 where they scale by 1 + w (dummy weights).
  float norm_identity = 1.0f;
  // Appends layer l's rows (l.kind is set; p is "layers.N.") to t, in the order they are loaded.
  void (*layer_table)(const ModelConfig& c, const std::string& p, LayerWeights& l, LayerTable& t) = nullptr;
  std::unique_ptr<Model> (*make)(ModelConfig c, ModelWeights w) = nullptr;
};

const Architecture& Qwen3Architecture();    // qwen3.cpp
const Architecture& Qwen3_5Architecture();  // qwen3_5.cpp

// Every entry, in a fixed order.
const std::vector<const Architecture*>& Architectures();
// The entry named `name`; an unknown name is an error naming it and the known ones.
Result<const Architecture*> FindArchitecture(const std::string& name);
// The entry of a config read by ParseModelConfig below (whose arch is always a registry name).
// Precondition, not input validation: any other name is a bug, reported on stderr before abort().
const Architecture& ArchitectureOf(const ModelConfig& c);

// config.json parsing against every registered architecture.
Result<ModelConfig> ParseModelConfig(const std::string& json_text, const std::string& source);
// Reads DIR/config.json.
Result<ModelConfig> LoadModelConfig(const std::string& dir);

}  // namespace graft

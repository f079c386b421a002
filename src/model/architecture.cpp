#include "model/architecture.h"

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <cstdlib>

namespace graft {
namespace {

std::vector<const ArchConfigSpec*> ConfigSpecs() {
  std::vector<const ArchConfigSpec*> specs;
  for (const Architecture* a : Architectures()) specs.push_back(&a->config);
  return specs;
}

}  // namespace

const std::vector<const Architecture*>& Architectures() {
  static const std::vector<const Architecture*> all = {&Qwen3Architecture(), &Qwen3_5Architecture()};
  return all;
}

Result<const Architecture*> FindArchitecture(const std::string& name) {
  std::vector<std::string> known;
  for (const Architecture* a : Architectures()) {
    if (a->config.name == name) return a;
    known.push_back(a->config.name);
  }
  return Unsupported(fmt::format("unknown architecture '{}' (graft runs {})", name, fmt::join(known, ", ")));
}

const Architecture& ArchitectureOf(const ModelConfig& c) {
  auto a = FindArchitecture(c.arch);
  if (!a.ok()) {
    std::fprintf(stderr, "graft: internal error: a model config outside the registry: %s\n",
                 a.status().message().c_str());
    std::abort();
  }
  return **a;
}

Result<ModelConfig> ParseModelConfig(const std::string& json_text, const std::string& source) {
  return ParseModelConfig(json_text, source, ConfigSpecs());
}

Result<ModelConfig> LoadModelConfig(const std::string& dir) { return LoadModelConfig(dir, ConfigSpecs()); }

}  // namespace graft

// Subcommand wiring: each Add*Command registers its flags on `app`; when that subcommand is
// chosen, CLI11 stores the work to do in `run` (called by main after parsing).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "backend/ops.h"
#include "util/status.h"

namespace graft::cli {

using Runner = std::function<Status()>;

// Flags every model-running command shares.
struct ModelSettings {
  std::string model;
  std::string device = "cpu";
  std::string dtype = "bfloat16";
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
};
void AddModelFlags(CLI::App* cmd, ModelSettings& s);
Status MakeOps(const ModelSettings& s, std::unique_ptr<Ops>* ops);
std::string DefaultCacheDir();

void AddLogitsCommand(CLI::App& app, Runner& run);
void AddInfoCommand(CLI::App& app, Runner& run);
void AddCompareLogitsCommand(CLI::App& app, Runner& run);
void AddTokenizeCommand(CLI::App& app, Runner& run);
void AddGenerateCommand(CLI::App& app, Runner& run);

}  // namespace graft::cli

// graft: one binary, subcommands. Wiring only: each subcommand parses its flags into a
// settings struct and calls library code that returns a Status (src/cli/cmd_*.cpp).
#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "cli/commands.h"
#include "util/version.h"

int main(int argc, char** argv) {
  spdlog::set_default_logger(spdlog::stderr_color_mt("graft"));
  spdlog::set_pattern("%H:%M:%S.%e %^%l%$ %v");
  CLI::App app{"graft: serve a base language model and its fine-tunes, grafted at run time"};
  app.set_version_flag("--version", std::string("graft ") + graft::kGraftVersion);
  app.require_subcommand(1);
  graft::cli::Runner run;
  graft::cli::AddServeCommand(app, run);
  graft::cli::AddLogitsCommand(app, run);
  graft::cli::AddGenerateCommand(app, run);
  graft::cli::AddDecideCommand(app, run);
  graft::cli::AddGateCommand(app, run);
  graft::cli::AddTokenizeCommand(app, run);
  graft::cli::AddAdapterCommand(app, run);
  graft::cli::AddInfoCommand(app, run);
  graft::cli::AddCompareLogitsCommand(app, run);
  graft::cli::AddBenchCommand(app, run);
  graft::cli::AddQuantizeCommand(app, run);
  CLI11_PARSE(app, argc, argv);
  const graft::Status st = run ? run() : graft::Internal("no subcommand ran");
  if (!st.ok()) {
    spdlog::error("{}", st.ToString());
    return 1;
  }
  return 0;
}

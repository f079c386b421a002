#include "tools/decide.h"

#include <fmt/core.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "util/json_depth.h"
#include "util/progress.h"
#include "util/sha256.h"

namespace graft {

Result<DecideReport> RunDecide(DecisionScorer& scorer, const DecideJob& job) {
  std::ifstream in(job.input, std::ios::binary);
  if (!in) return NotFound(job.input + ": cannot open");
  std::vector<std::string> lines;
  std::string line;
  uint64_t total = 0;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    total += line.size();
    lines.push_back(std::move(line));
  }
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  const std::string tmp = job.output + ".tmp";
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  if (!out) return IoError(tmp + ": cannot create");
  DecideReport rep;
  Progress bar("deciding", lines.size(), /*bytes=*/false);
  for (size_t i = 0; i < lines.size(); ++i) {
    rep.lines++;
    Status st = CheckJsonDepth(lines[i], "the line");
    const nlohmann::json body =
        st.ok() ? nlohmann::json::parse(lines[i], nullptr, false) : nlohmann::json(nlohmann::json::value_t::discarded);
    nlohmann::ordered_json response;
    if (st.ok() && body.is_discarded()) st = InvalidArgument("the line is not valid JSON");
    if (st.ok()) {
      auto req = ParseDecisionRequest(body, job.limits);
      if (!req.ok()) {
        st = req.status();
      } else {
        auto slot = job.slots.Select(req->mode.empty() ? job.default_mode : req->mode, job.model_name);
        auto res = slot.ok() ? scorer.Score(req.value(), slot.value()) : Result<DecisionResult>(slot.status());
        if (!res.ok()) {
          st = res.status();
        } else {
          if (job.slots.lora != 0) res->mode = slot.value() == job.slots.exact ? "exact" : "lora";
          res->id = "dec-" + Sha256Hex(lines[i]).substr(0, 24);
          res->model = req->model.empty() ? job.model_name : req->model;
          response = DecisionResultJson(res.value());
        }
      }
    }
    if (!st.ok()) {
      rep.failed++;
      response = {{"error", {{"message", fmt::format("line {}: {}", i + 1, st.message())}, {"type", "invalid_request_error"}}}};
    }
    out << response.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    bar.Add(1);
  }
  bar.Finish();
  out.close();
  if (!out) return IoError(tmp + ": write failed");
  std::error_code ec;
  std::filesystem::rename(tmp, job.output, ec);
  if (ec) return IoError(job.output + ": " + ec.message());
  return rep;
}

}  // namespace graft

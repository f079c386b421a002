#include "io/generation_config.h"

#include <fmt/core.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "util/file.h"
#include "util/json_depth.h"

namespace graft {

std::string SamplingDefaults::Describe() const {
  std::string s;
  auto add = [&](const char* name, const std::string& v) { s += (s.empty() ? "" : ", ") + std::string(name) + " " + v; };
  if (temperature) add("temperature", fmt::format("{}", *temperature));
  if (top_p) add("top_p", fmt::format("{}", *top_p));
  if (top_k) add("top_k", fmt::format("{}", *top_k));
  if (min_p) add("min_p", fmt::format("{}", *min_p));
  if (repetition_penalty) add("repetition_penalty", fmt::format("{}", *repetition_penalty));
  if (max_tokens) add("max_tokens", fmt::format("{}", *max_tokens));
  return s;
}

Result<SamplingDefaults> LoadGenerationConfig(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "generation_config.json").string();
  SamplingDefaults d;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return d;
  GRAFT_ASSIGN_OR_RETURN(std::string text, ReadFileLimited(path, 1u << 20));
  GRAFT_RETURN_IF_ERROR(CheckJsonDepth(text, path));
  const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument(path + ": not a JSON object");
  auto number = [&](const char* key, double lo, double hi, bool lo_open, std::optional<double>* out) -> Status {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return Status::Ok();
    const bool in = it->is_number() && (lo_open ? it->get<double>() > lo : it->get<double>() >= lo) && it->get<double>() <= hi;
    if (!in) {
      return InvalidArgument(fmt::format("{}: \"{}\" must be a number in {}{}, {}]; got {}", path, key, lo_open ? "(" : "[",
                                         lo, hi, it->dump().substr(0, 40)));
    }
    *out = it->get<double>();
    return Status::Ok();
  };
  GRAFT_RETURN_IF_ERROR(number("temperature", 0, 2, false, &d.temperature));
  GRAFT_RETURN_IF_ERROR(number("top_p", 0, 1, true, &d.top_p));
  GRAFT_RETURN_IF_ERROR(number("min_p", 0, 1, false, &d.min_p));
  GRAFT_RETURN_IF_ERROR(number("repetition_penalty", 0, 1e6, true, &d.repetition_penalty));
  auto integer = [&](const char* key, int64_t lo, std::optional<int64_t>* out) -> Status {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return Status::Ok();
    if (!it->is_number_integer() || it->get<int64_t>() < lo || it->get<int64_t>() > (int64_t{1} << 30)) {
      return InvalidArgument(fmt::format("{}: \"{}\" must be an integer in [{}, 2^30]; got {}", path, key, lo,
                                         it->dump().substr(0, 40)));
    }
    *out = it->get<int64_t>();
    return Status::Ok();
  };
  GRAFT_RETURN_IF_ERROR(integer("top_k", -1, &d.top_k));
  GRAFT_RETURN_IF_ERROR(integer("max_new_tokens", 1, &d.max_tokens));
  return d;
}

}  // namespace graft

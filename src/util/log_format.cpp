#include "util/log_format.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>
#include <spdlog/pattern_formatter.h>
#include <spdlog/spdlog.h>

#include <memory>

namespace graft {
namespace {

// %* in a pattern: the message, JSON-escaped.
class JsonMessage final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    const std::string escaped = JsonEscape(std::string(msg.payload.data(), msg.payload.size()));
    dest.append(escaped.data(), escaped.data() + escaped.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<JsonMessage>(); }
};

}  // namespace

std::string JsonEscape(const std::string& s) {
  const std::string quoted = nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return quoted.substr(1, quoted.size() - 2);
}

Status SetLogFormat(const std::string& format) {
  if (format == "text") {
    spdlog::set_pattern("%H:%M:%S.%e %^%l%$ %v");
    return Status::Ok();
  }
  if (format == "json") {
    auto f = std::make_unique<spdlog::pattern_formatter>();
    f->add_flag<JsonMessage>('*').set_pattern(R"({"time":"%Y-%m-%dT%H:%M:%S.%e%z","level":"%l","msg":"%*"})");
    spdlog::set_formatter(std::move(f));
    return Status::Ok();
  }
  return InvalidArgument(fmt::format("--log-format '{}': text or json", format));
}

}  // namespace graft

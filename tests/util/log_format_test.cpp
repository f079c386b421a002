#include "util/log_format.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>
#include <sstream>

namespace graft {
namespace {

// --log-format json: each line an object whose msg is the message, whatever it holds.
TEST(LogFormat, JsonLinesParseAndKeepTheMessage) {
  std::ostringstream os;
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("t", std::make_shared<spdlog::sinks::ostream_sink_mt>(os)));
  ASSERT_TRUE(SetLogFormat("json").ok());
  const std::string msg = "a \"quoted\" line\nwith\ttabs \\ and \x01 control";
  spdlog::info("{}", msg);
  spdlog::warn("second");
  ASSERT_TRUE(SetLogFormat("text").ok());
  spdlog::set_default_logger(previous);
  std::istringstream lines(os.str());
  std::string line;
  ASSERT_TRUE(std::getline(lines, line));
  auto j = nlohmann::json::parse(line, nullptr, false);
  ASSERT_TRUE(j.is_object()) << line;
  EXPECT_EQ(j["msg"], msg);
  EXPECT_EQ(j["level"], "info");
  EXPECT_EQ(j["time"].get<std::string>().size(), std::string("2026-12-04T19:00:00.000+00:00").size()) << j["time"];
  ASSERT_TRUE(std::getline(lines, line));
  EXPECT_EQ(nlohmann::json::parse(line)["level"], "warning");
  const Status bad = SetLogFormat("xml");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.message(), "--log-format 'xml': text or json");
}

}  // namespace
}  // namespace graft

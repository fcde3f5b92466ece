// The JSON-lines format: one object a line with ts, level, logger, msg and
// the message's key=value words as fields; level and format names.
#include "common/log.h"

#include <sstream>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "spdlog/sinks/ostream_sink.h"

namespace refit {
namespace {

TEST(LogTest, JsonLinesCarryTheMessageAndItsFields) {
  std::ostringstream out;
  spdlog::logger logger("t", std::make_shared<spdlog::sinks::ostream_sink_mt>(out));
  SetLogFormat(logger, LogFormat::kJson);
  logger.info("round committed version=7 seconds=0.25 member=t/0, \"quoted\"");
  logger.warn("second line");
  std::istringstream lines(out.str());
  std::string line;
  ASSERT_TRUE(std::getline(lines, line));
  const nlohmann::json j = nlohmann::json::parse(line);
  EXPECT_EQ(j["level"], "info");
  EXPECT_EQ(j["logger"], "t");
  EXPECT_EQ(j["msg"], "round committed version=7 seconds=0.25 member=t/0, \"quoted\"");
  EXPECT_EQ(j["version"], 7);
  EXPECT_DOUBLE_EQ(j["seconds"].get<double>(), 0.25);
  EXPECT_EQ(j["member"], "t/0");
  EXPECT_EQ(j["ts"].get<std::string>().size(), 24u) << j["ts"];
  ASSERT_TRUE(std::getline(lines, line));
  EXPECT_EQ(nlohmann::json::parse(line)["level"], "warning");
  EXPECT_FALSE(std::getline(lines, line));
}

TEST(LogTest, ParsesLevelAndFormatNames) {
  EXPECT_EQ(*ParseLogLevel("warning"), spdlog::level::warn);
  EXPECT_EQ(*ParseLogLevel("OFF"), spdlog::level::off);
  EXPECT_EQ(ParseLogLevel("loud").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*ParseLogFormat("json"), LogFormat::kJson);
  EXPECT_FALSE(ParseLogFormat("xml").ok());
}

}  // namespace
}  // namespace refit

// The client library's log: stderr only, warning unless REFIT_LOG_LEVEL
// says otherwise.
#include "client/log.h"

#include "gtest/gtest.h"
#include "spdlog/sinks/stdout_sinks.h"

namespace refit {
namespace {

TEST(ClientLogTest, WarningUnlessTheEnvironmentSaysOtherwise) {
  EXPECT_EQ(ClientLogLevel(nullptr), spdlog::level::warn);
  EXPECT_EQ(ClientLogLevel(""), spdlog::level::warn);
  EXPECT_EQ(ClientLogLevel("loud"), spdlog::level::warn);
  EXPECT_EQ(ClientLogLevel("debug"), spdlog::level::debug);
  EXPECT_EQ(ClientLogLevel("off"), spdlog::level::off);
}

TEST(ClientLogTest, WritesToStderrOnly) {
  spdlog::logger& log = ClientLog();
  EXPECT_EQ(log.name(), "refit");
  ASSERT_EQ(log.sinks().size(), 1u);
  EXPECT_NE(dynamic_cast<spdlog::sinks::stderr_sink_mt*>(log.sinks()[0].get()), nullptr);
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  log.warn("a warning");
  log.debug("a debug line");
  log.flush();
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "");
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("[refit] [warning] a warning"), std::string::npos) << err;
  EXPECT_EQ(err.find("a debug line"), std::string::npos) << err;
}

}  // namespace
}  // namespace refit

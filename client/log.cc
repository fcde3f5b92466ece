#include "client/log.h"

#include <cstdlib>
#include <cstring>

#include "common/log.h"

namespace refit {

spdlog::level::level_enum ClientLogLevel(const char* value) {
  if (value == nullptr || *value == '\0') return spdlog::level::warn;
  absl::StatusOr<spdlog::level::level_enum> level = ParseLogLevel(value);
  return level.ok() ? *level : spdlog::level::warn;
}

spdlog::logger& ClientLog() {
  static spdlog::logger* const logger = [] {
    const char* env = std::getenv("REFIT_LOG_LEVEL");
    auto* l = new spdlog::logger(*MakeStderrLogger("refit", ClientLogLevel(env)));
    const char* format = std::getenv("REFIT_LOG_FORMAT");
    if (format != nullptr && std::strcmp(format, "json") == 0) {
      SetLogFormat(*l, LogFormat::kJson);
    }
    if (env != nullptr && *env != '\0' && !ParseLogLevel(env).ok()) {
      l->warn("REFIT_LOG_LEVEL={}: not a level; logging at warning", env);
    }
    return l;
  }();
  return *logger;
}

}  // namespace refit

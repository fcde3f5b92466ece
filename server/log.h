// refitd's log: one spdlog logger named "refitd" writing to stderr, text by
// default or JSON lines (common/log.h). Log events of the control plane at
// info (members, plans, rounds and each member's report, shutdown), refused
// calls at warning; never a credential. Messages carry their figures as
// key=value words (round=7 bytes=1024), which the JSON format makes fields.
#ifndef REFIT_SERVER_LOG_H_
#define REFIT_SERVER_LOG_H_

#include <memory>

#include "common/log.h"
#include "spdlog/logger.h"

namespace refit {

// Returns refitd's logger (made on first use at info, text; thread-safe).
inline spdlog::logger& ServerLog() {
  static spdlog::logger* const logger =
      new spdlog::logger(*MakeStderrLogger("refitd", spdlog::level::info));
  return *logger;
}

// Sets refitd's log level and line format. Call before the server starts.
inline void ConfigureServerLog(spdlog::level::level_enum level, LogFormat format) {
  ServerLog().set_level(level);
  SetLogFormat(ServerLog(), format);
}

}  // namespace refit

#endif  // REFIT_SERVER_LOG_H_

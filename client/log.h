// The client library's log: one spdlog logger named "refit" writing to
// stderr (never stdout: the host process owns it) at warning by default.
// The environment turns it up or down: REFIT_LOG_LEVEL=trace|debug|info|
// warn|error|critical|off, and REFIT_LOG_FORMAT=json for JSON lines
// (common/log.h). Read once, at the first log line.
#ifndef REFIT_CLIENT_LOG_H_
#define REFIT_CLIENT_LOG_H_

#include "spdlog/logger.h"

namespace refit {

// Returns the client library's logger (made on first use; thread-safe).
spdlog::logger& ClientLog();

// Returns the level REFIT_LOG_LEVEL's `value` names; warn when `value` is
// null, empty or no level's name.
spdlog::level::level_enum ClientLogLevel(const char* value);

}  // namespace refit

#endif  // REFIT_CLIENT_LOG_H_

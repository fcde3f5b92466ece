// Logging set-up shared by refitd and the client library (spdlog): level
// names, and the two line formats: text ("[time] [logger] [level] msg", the
// message's control characters escaped by Printable, common/printable.h) and
// JSON lines (one object a line: ts, level, logger, msg, and one field per
// "key=value" word of the message, numbers as numbers; "reason=" takes the
// rest of the message).
#ifndef REFIT_COMMON_LOG_H_
#define REFIT_COMMON_LOG_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "spdlog/logger.h"

namespace refit {

enum class LogFormat { kText, kJson };

// Returns the level named `name` (trace, debug, info, warning as the logs
// spell it, or warn,
// error, critical, off); INVALID_ARGUMENT naming it otherwise.
absl::StatusOr<spdlog::level::level_enum> ParseLogLevel(absl::string_view name);

// Returns the format named `name` (text, json); INVALID_ARGUMENT otherwise.
absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view name);

// Returns a new logger named `name` writing to stderr in the text format at
// `level`, flushing every line at info and above.
std::shared_ptr<spdlog::logger> MakeStderrLogger(const std::string& name,
                                                 spdlog::level::level_enum level);

// Sets the line format of `logger` (every sink).
void SetLogFormat(spdlog::logger& logger, LogFormat format);

// Returns the JSON-lines formatter SetLogFormat(kJson) installs.
std::unique_ptr<spdlog::formatter> MakeJsonFormatter();

}  // namespace refit

#endif  // REFIT_COMMON_LOG_H_

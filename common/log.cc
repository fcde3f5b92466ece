#include "common/log.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "absl/strings/ascii.h"
#include "common/printable.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "spdlog/pattern_formatter.h"
#include "spdlog/sinks/stdout_sinks.h"

namespace refit {
namespace {

constexpr char kTextPattern[] = "[%Y-%m-%d %H:%M:%S.%e] [%n] [%l] %v";

// One JSON object per line; see log.h.
class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg,
              spdlog::memory_buf_t& dest) override {
    const absl::string_view text(msg.payload.data(), msg.payload.size());
    nlohmann::ordered_json j;
    j["ts"] = absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ",
                               absl::FromChrono(msg.time), absl::UTCTimeZone());
    const spdlog::string_view_t level = spdlog::level::to_string_view(msg.level);
    j["level"] = std::string(level.data(), level.size());
    j["logger"] = std::string(msg.logger_name.data(), msg.logger_name.size());
    j["msg"] = std::string(text);
    for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
      const size_t eq = word.find('=');
      if (eq == 0 || eq == absl::string_view::npos) continue;
      const std::string key(word.substr(0, eq));
      if (key == "ts" || key == "level" || key == "logger" || key == "msg") continue;
      if (!std::all_of(key.begin(), key.end(), [](char c) {
            return absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '_';
          })) {
        continue;
      }
      absl::string_view value = word.substr(eq + 1);
      if (key == "reason") {  // free text: the rest of the message
        j[key] = std::string(text.substr(text.find("reason=") + 7));
        break;
      }
      while (!value.empty() && (value.back() == ',' || value.back() == ';' ||
                                value.back() == ':')) {
        value.remove_suffix(1);
      }
      int64_t i = 0;
      double d = 0;
      if (absl::SimpleAtoi(value, &i)) {
        j[key] = i;
      } else if (absl::SimpleAtod(value, &d) && std::isfinite(d)) {
        j[key] = d;
      } else {
        j[key] = std::string(value);
      }
    }
    const std::string line =
        j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    dest.append(line.data(), line.data() + line.size());
  }

  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>();
  }
};

// The text format with the message's control characters escaped
// (Printable): text from peers in a message cannot start a new line or
// reach a terminal raw.
class TextFormatter final : public spdlog::formatter {
 public:
  TextFormatter() : pattern_(std::make_unique<spdlog::pattern_formatter>(kTextPattern)) {}

  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const absl::string_view text(msg.payload.data(), msg.payload.size());
    const std::string printable = Printable(text);
    if (printable.size() == text.size()) {
      pattern_->format(msg, dest);
      return;
    }
    spdlog::details::log_msg escaped = msg;
    escaped.payload = spdlog::string_view_t(printable.data(), printable.size());
    pattern_->format(escaped, dest);
  }

  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<TextFormatter>();
  }

 private:
  std::unique_ptr<spdlog::formatter> pattern_;
};

}  // namespace

absl::StatusOr<spdlog::level::level_enum> ParseLogLevel(absl::string_view name) {
  const std::string n = absl::AsciiStrToLower(name);
  if (n == "trace") return spdlog::level::trace;
  if (n == "debug") return spdlog::level::debug;
  if (n == "info") return spdlog::level::info;
  if (n == "warn" || n == "warning") return spdlog::level::warn;
  if (n == "error") return spdlog::level::err;
  if (n == "critical") return spdlog::level::critical;
  if (n == "off") return spdlog::level::off;
  return absl::InvalidArgumentError(absl::StrFormat(
      "log level '%s': not one of trace, debug, info, warning (or warn), error, critical, off",
      name));
}

absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view name) {
  if (name == "text") return LogFormat::kText;
  if (name == "json") return LogFormat::kJson;
  return absl::InvalidArgumentError(
      absl::StrFormat("log format '%s': not one of text, json", name));
}

std::shared_ptr<spdlog::logger> MakeStderrLogger(const std::string& name,
                                                 spdlog::level::level_enum level) {
  auto l = std::make_shared<spdlog::logger>(
      name, std::make_shared<spdlog::sinks::stderr_sink_mt>());
  l->set_formatter(std::make_unique<TextFormatter>());
  l->set_level(level);
  l->flush_on(spdlog::level::info);
  return l;
}

void SetLogFormat(spdlog::logger& logger, LogFormat format) {
  if (format == LogFormat::kJson) {
    logger.set_formatter(MakeJsonFormatter());
  } else {
    logger.set_formatter(std::make_unique<TextFormatter>());
  }
}

std::unique_ptr<spdlog::formatter> MakeJsonFormatter() {
  return std::make_unique<JsonFormatter>();
}

}  // namespace refit

// refitd's log: one spdlog logger named "refitd" writing to stderr, with
// time and level. Log events of the control plane at info (members, plans,
// rounds, shutdown); never a credential.
#ifndef REFIT_SERVER_LOG_H_
#define REFIT_SERVER_LOG_H_

#include <memory>

#include "spdlog/logger.h"
#include "spdlog/sinks/stdout_sinks.h"

namespace refit {

// Returns refitd's logger (made on first use; thread-safe).
inline spdlog::logger& ServerLog() {
  static spdlog::logger* const logger = [] {
    auto* l = new spdlog::logger("refitd",
                                 std::make_shared<spdlog::sinks::stderr_sink_mt>());
    l->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%n] [%l] %v");
    l->set_level(spdlog::level::info);
    l->flush_on(spdlog::level::info);
    return l;
  }();
  return *logger;
}

}  // namespace refit

#endif  // REFIT_SERVER_LOG_H_

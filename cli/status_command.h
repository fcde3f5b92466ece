// `refit status`: asks a running refitd for its members, plan and last
// rounds (RefitClient::GetStatus) and formats the answer for people or as
// JSON. Flag parsing lives in refit_main.cc.
#ifndef REFIT_TOOLS_CLI_STATUS_COMMAND_H_
#define REFIT_TOOLS_CLI_STATUS_COMMAND_H_

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cli/client_tls.h"
#include "proto/refit_service.pb.h"

namespace refit {

struct StatusCommandOptions {
  std::string server;      // "host:port" of refitd
  std::string token_file;  // bearer token file, empty = none
  ClientTlsFiles tls;      // TLS to refitd (client_tls.h); no CA file: plaintext
  absl::Duration timeout = absl::Seconds(10);  // connect + call
  int rounds = 10;         // last rounds shown
  bool json = false;
  bool follow = false;     // --watch: keep watching after a round ends
};

// Connects, calls GetStatus and returns the text to print. Fails with
// INVALID_ARGUMENT for a missing --server, NOT_FOUND naming an unreadable
// --token_file, UNAVAILABLE naming the server when it cannot be reached in
// time, UNAUTHENTICATED (from refitd) for a wrong or missing token.
absl::StatusOr<std::string> RunStatusCommand(const StatusCommandOptions& opt);

// `refit status --watch`: connects, then shows (through `show`) the round
// in flight every `interval` until a round ends (status_watch.h), within
// opt.timeout in all. Returns that round's summary. Fails as
// RunStatusCommand does, and with DEADLINE_EXCEEDED when no round ends in
// time. With opt.follow it keeps watching round after round until
// opt.timeout (FollowRounds) and returns the last round that ended (an
// empty summary when none did).
absl::StatusOr<v1::RoundSummary> RunStatusWatch(
    const StatusCommandOptions& opt, absl::Duration interval, bool clear_screen,
    const std::function<void(const std::string&)>& show);

// The formatting alone (text or JSON), for tests and callers that already
// hold a StatusResponse. Shows at most `rounds` newest rounds.
std::string FormatStatusText(const v1::StatusResponse& r, int rounds);
std::string FormatStatusJson(const v1::StatusResponse& r, int rounds);

}  // namespace refit

#endif  // REFIT_TOOLS_CLI_STATUS_COMMAND_H_

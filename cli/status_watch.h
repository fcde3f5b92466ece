// `refit status --watch`: polls a running refitd and shows the round in
// flight (its version, seconds so far, each member's bytes: reported, or
// moved so far of its plan slice's) until that round ends, then its outcome; --follow round after
// round.
#ifndef REFIT_TOOLS_CLI_STATUS_WATCH_H_
#define REFIT_TOOLS_CLI_STATUS_WATCH_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/refit_service.pb.h"

namespace refit {

// Returns one screen of the watch: the round in flight in `r` (or "no
// round in flight" and the last finished one), one row per participant,
// ids aligned: reported (its bytes, seconds and peak staging) or moving
// (its bytes so far of those its plan slice moves, from its heartbeats).
std::string FormatWatchFrame(const v1::StatusResponse& r, const std::string& server);

// Returns the newest round in `r` whose version is above `after` and that
// has finished (committed or aborted); nullptr when none.
const v1::RoundSummary* FinishedRoundAfter(const v1::StatusResponse& r, int64_t after);

// Polls `get_status` every `interval` and calls `show` with each frame
// that differs from the one before (and with "\033[H\033[2J" before it when
// `clear_screen`), until a round that was not finished at the start ends.
// Returns that round's summary. Fails with DEADLINE_EXCEEDED when no round
// ends by `deadline`, or with get_status's error.
absl::StatusOr<v1::RoundSummary> WatchRounds(
    const std::function<absl::StatusOr<v1::StatusResponse>(absl::Time)>& get_status,
    const std::function<void(const std::string&)>& show, const std::string& server,
    absl::Duration interval, absl::Time deadline, bool clear_screen);

// Keeps watching: WatchRounds again after each round ends, so every round
// shows its frames and its final line, until `deadline`. Returns the
// number of rounds that ended (OK at the deadline, the watch's normal
// end), or get_status's error.
absl::StatusOr<int> FollowRounds(
    const std::function<absl::StatusOr<v1::StatusResponse>(absl::Time)>& get_status,
    const std::function<void(const std::string&)>& show, const std::string& server,
    absl::Duration interval, absl::Time deadline, bool clear_screen);

}  // namespace refit

#endif  // REFIT_TOOLS_CLI_STATUS_WATCH_H_

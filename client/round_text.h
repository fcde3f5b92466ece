// How refit's programs word a round for people (`refit status --watch`, the
// demo): the line for a finished round and the figures of one in flight,
// with bytes and throughput as common/round_bytes.h defines them.
#ifndef REFIT_CLIENT_ROUND_TEXT_H_
#define REFIT_CLIENT_ROUND_TEXT_H_

#include <cstdint>
#include <string>

#include "proto/refit_service.pb.h"

namespace refit {

// Returns "1 member", "4 members": `n` and `noun`, plural unless n == 1.
std::string Counted(int64_t n, const std::string& noun);

// Returns the line for a finished round: "round 3 committed in 2.410 s
// (slowest member 2.398 s): 16.38 GB per engine rank (2 engine ranks),
// 6.83 GB/s, peak staging 64.0 MB (engine/demo/e0/1)", with staged engines
// followed by ", engine pause 12.3 ms (engine/demo/e0/1), 0.005 of the
// round" (the longest pause, and its share of the round's start to commit);
// or "round 3 aborted after 2.410 s: <reason>".
std::string FinishedRoundLine(const v1::RoundSummary& s);

// Returns the bytes of a round in flight so far: ", 816.4 MB per engine
// rank so far" once an engine rank reported, else "".
std::string RunningRoundBytes(const v1::RoundSummary& s);

}  // namespace refit

#endif  // REFIT_CLIENT_ROUND_TEXT_H_

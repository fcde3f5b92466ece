// RoundProgress: the demo's live view of its rounds, from refitd's status
// (GetStatus). While a round has run for at least a threshold (1 s), one
// line every interval (1 s): "round 3: 5/8 members reported, 1.9 s, 12.3
// GB reported"; when a round ends, one final line: "round 3 committed in
// 2.410 s (slowest member 2.398 s): 24.6 GB moved, 10.26 GB/s, peak
// staging 64.0 MB (engine/demo/e0/1)" or "round 3 aborted after 2.410 s:
// <reason>". Bytes reported count what each member sent or received (a
// byte at both of its ends); bytes moved count each byte once; GB = 1e9.
#ifndef REFIT_TOOLS_REFIT_DEMO_ROUND_PROGRESS_H_
#define REFIT_TOOLS_REFIT_DEMO_ROUND_PROGRESS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "proto/refit_service.pb.h"

namespace refit {

// Returns `bytes` for people: "512 bytes", "12.3 MB", "4.56 GB" (1e6, 1e9).
std::string HumanBytes(int64_t bytes);

class RoundProgress {
 public:
  // Rounds running shorter than `threshold` print no progress line; one
  // that runs longer prints one every `interval`.
  explicit RoundProgress(absl::Duration threshold = absl::Seconds(1),
                         absl::Duration interval = absl::Seconds(1))
      : threshold_(threshold), interval_(interval) {}

  // Returns the lines to print for `status`, polled at `now`: a final line
  // for each round that ended since the last call (oldest first, each
  // once), then a progress line for the round in flight when it is due.
  std::vector<std::string> Update(const v1::StatusResponse& status, absl::Time now);

 private:
  const absl::Duration threshold_;
  const absl::Duration interval_;
  int64_t last_finished_ = 0;     // newest round a final line was given for
  int64_t progress_round_ = 0;    // the round of the last progress line
  absl::Time last_progress_ = absl::InfinitePast();
};

}  // namespace refit

#endif  // REFIT_TOOLS_REFIT_DEMO_ROUND_PROGRESS_H_

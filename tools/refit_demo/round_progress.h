// RoundProgress: the demo's live view of its rounds, from refitd's status
// (GetStatus). While a round has run for at least a threshold (1 s), one
// line every interval (1 s): "round 3: 5/8 members reported, 1.9 s, 12.30 GB
// per engine rank so far"; when a round ends, one final line
// (client/round_text.h): "round 3 committed in 2.410 s (slowest member
// 2.398 s): 16.38 GB per engine rank (4 engine ranks), 6.83 GB/s, peak
// staging 64.0 MB (engine/demo/e0/1)" or "round 3 aborted after 2.410 s:
// <reason>". Bytes and GB/s as common/round_bytes.h defines them.
#ifndef REFIT_TOOLS_REFIT_DEMO_ROUND_PROGRESS_H_
#define REFIT_TOOLS_REFIT_DEMO_ROUND_PROGRESS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "proto/refit_service.pb.h"

namespace refit {

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

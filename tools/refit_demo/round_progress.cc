#include "tools/refit_demo/round_progress.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/round_text.h"

namespace refit {

std::vector<std::string> RoundProgress::Update(const v1::StatusResponse& status,
                                               absl::Time now) {
  std::vector<std::string> lines;
  const v1::RoundSummary* running = nullptr;
  int64_t newest = last_finished_;
  // Rounds are listed oldest first; the running one last.
  for (const v1::RoundSummary& s : status.rounds()) {
    if (s.outcome() == "running") {
      running = &s;
      continue;
    }
    if (s.version() <= last_finished_) continue;
    lines.push_back(FinishedRoundLine(s));
    newest = std::max(newest, s.version());
  }
  last_finished_ = newest;
  if (running == nullptr || running->version() <= last_finished_ ||
      absl::Seconds(running->seconds()) < threshold_) {
    return lines;
  }
  if (running->version() == progress_round_ && now - last_progress_ < interval_) {
    return lines;
  }
  progress_round_ = running->version();
  last_progress_ = now;
  lines.push_back(absl::StrFormat(
      "round %d: %d/%d members reported, %.1f s%s", running->version(),
      running->reported_size(), running->reported_size() + running->waiting_size(),
      running->seconds(), RunningRoundBytes(*running)));
  return lines;
}

}  // namespace refit

#include "tools/refit_demo/round_progress.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace refit {

std::string HumanBytes(int64_t bytes) {
  if (bytes < 1000000) return absl::StrCat(bytes, " bytes");
  if (bytes < 1000000000) return absl::StrFormat("%.1f MB", bytes / 1e6);
  return absl::StrFormat("%.2f GB", bytes / 1e9);
}

namespace {

// A committed round's bytes count each byte at its sender and its
// receiver: half of them moved (as RoundSummary.gbps counts).
std::string FinalLine(const v1::RoundSummary& s) {
  if (s.outcome() == "committed") {
    return absl::StrFormat(
        "round %d committed in %.3f s (slowest member %.3f s): %s moved, %.2f GB/s, "
        "peak staging %s%s",
        s.version(), s.duration_seconds(), s.seconds(), HumanBytes(s.bytes() / 2), s.gbps(),
        HumanBytes(s.peak_staging_bytes()),
        s.peak_staging_member().empty() ? "" : " (" + s.peak_staging_member() + ")");
  }
  return absl::StrFormat("round %d %s after %.3f s: %s", s.version(), s.outcome(),
                         s.seconds(), s.reason());
}

}  // namespace

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
    lines.push_back(FinalLine(s));
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
      "round %d: %d/%d members reported, %.1f s, %s reported", running->version(),
      running->reported_size(), running->reported_size() + running->waiting_size(),
      running->seconds(), HumanBytes(running->bytes())));
  return lines;
}

}  // namespace refit

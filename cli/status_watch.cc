#include "cli/status_watch.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/printable.h"

namespace refit {
namespace {

// Returns the newest finished version in `r` (0: none).
int64_t LastFinished(const v1::StatusResponse& r) {
  int64_t v = 0;
  for (const v1::RoundSummary& s : r.rounds()) {
    if (s.outcome() != "running") v = std::max<int64_t>(v, s.version());
  }
  return v;
}

std::string Outcome(const v1::RoundSummary& s) {
  if (s.outcome() == "committed") {
    return absl::StrFormat(
        "round %d committed in %.3f s (slowest member %.3f s): %d bytes, %.2f GB/s, "
        "peak staging %d bytes%s",
        s.version(), s.duration_seconds(), s.seconds(), s.bytes(), s.gbps(),
        s.peak_staging_bytes(),
        s.peak_staging_member().empty() ? "" : " (" + Printable(s.peak_staging_member()) + ")");
  }
  return absl::StrFormat("round %d %s after %.3f s: %s", s.version(), s.outcome(),
                         s.seconds(), Printable(s.reason()));
}

}  // namespace

std::string FormatWatchFrame(const v1::StatusResponse& r, const std::string& server) {
  std::string out = absl::StrCat("refitd ", Printable(server), ": ", r.members_size(),
                                 " members, plan ",
                                 r.plan_fingerprint().empty() ? "(none)"
                                                              : Printable(r.plan_fingerprint()),
                                 "\n");
  const v1::RoundSummary* running = nullptr;
  for (const v1::RoundSummary& s : r.rounds()) {
    if (s.outcome() == "running") running = &s;
  }
  if (running == nullptr) {
    absl::StrAppend(&out, "no round in flight\n");
    if (const v1::RoundSummary* last = FinishedRoundAfter(r, 0)) {
      absl::StrAppend(&out, "last: ", Outcome(*last), "\n");
    }
    return out;
  }
  const int total = running->reported_size() + running->waiting_size();
  absl::StrAppendFormat(&out, "round %d running: %d of %d members reported, %d bytes\n",
                        running->version(), running->reported_size(), total,
                        running->bytes());
  std::map<std::string, const v1::MemberReport*> figures;
  for (const v1::MemberReport& m : running->reports()) figures[m.member_id()] = &m;
  for (const std::string& id : running->reported()) {
    absl::StrAppend(&out, "  reported  ", Printable(id));
    if (auto it = figures.find(id); it != figures.end()) {
      absl::StrAppendFormat(&out, "  %d bytes in %.3f s, peak staging %d bytes",
                            it->second->bytes(), it->second->seconds(),
                            it->second->peak_staging_bytes());
    }
    absl::StrAppend(&out, "\n");
  }
  for (const std::string& id : running->waiting()) {
    absl::StrAppend(&out, "  moving    ", Printable(id), "\n");
  }
  return out;
}

const v1::RoundSummary* FinishedRoundAfter(const v1::StatusResponse& r, int64_t after) {
  const v1::RoundSummary* found = nullptr;
  for (const v1::RoundSummary& s : r.rounds()) {
    if (s.outcome() != "running" && s.version() > after &&
        (found == nullptr || s.version() > found->version())) {
      found = &s;
    }
  }
  return found;
}

absl::StatusOr<v1::RoundSummary> WatchRounds(
    const std::function<absl::StatusOr<v1::StatusResponse>(absl::Time)>& get_status,
    const std::function<void(const std::string&)>& show, const std::string& server,
    absl::Duration interval, absl::Time deadline, bool clear_screen) {
  int64_t before = -1;  // the newest round finished when the watch began
  std::string shown;
  for (;;) {
    absl::StatusOr<v1::StatusResponse> r =
        get_status(std::min(deadline, absl::Now() + absl::Seconds(10)));
    if (!r.ok()) return r.status();
    if (before < 0) before = LastFinished(*r);
    if (const v1::RoundSummary* done = FinishedRoundAfter(*r, before)) {
      show(absl::StrCat(Outcome(*done), "\n"));
      return *done;
    }
    std::string frame = FormatWatchFrame(*r, server);
    if (frame != shown) {
      show(clear_screen ? absl::StrCat("\033[H\033[2J", frame) : frame + "\n");
      shown = std::move(frame);
    }
    if (absl::Now() + interval > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("no round ended before the --timeout_s deadline"));
    }
    absl::SleepFor(interval);
  }
}

}  // namespace refit

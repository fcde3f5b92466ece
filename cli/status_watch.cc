#include "cli/status_watch.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/printable.h"
#include "common/round_bytes.h"
#include "client/round_text.h"

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

}  // namespace

std::string FormatWatchFrame(const v1::StatusResponse& r, const std::string& server) {
  std::string out = absl::StrCat("refitd ", Printable(server), ": ",
                                 Counted(r.members_size(), "member"), ", plan ",
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
      absl::StrAppend(&out, "last: ", FinishedRoundLine(*last), "\n");
    }
    return out;
  }
  const int total = running->reported_size() + running->waiting_size();
  absl::StrAppendFormat(&out, "round %d running: %d of %s reported%s\n",
                        running->version(), running->reported_size(),
                        Counted(total, "member"), RunningRoundBytes(*running));
  std::map<std::string, const v1::MemberReport*> figures;
  for (const v1::MemberReport& m : running->reports()) figures[m.member_id()] = &m;
  std::map<std::string, const v1::MemberBytes*> live;
  for (const v1::MemberBytes& b : running->live()) live[b.member_id()] = &b;
  size_t width = 0;
  for (const std::string& id : running->reported()) width = std::max(width, Printable(id).size());
  for (const std::string& id : running->waiting()) width = std::max(width, Printable(id).size());
  // One row per participant: a reported one with its report's figures, a
  // moving one with its bytes so far of its plan slice's (its heartbeats).
  for (const std::string& id : running->reported()) {
    auto it = figures.find(id);
    if (it == figures.end()) {
      absl::StrAppendFormat(&out, "  reported  %-*s\n", width, Printable(id));
      continue;
    }
    absl::StrAppendFormat(&out, "  reported  %-*s  %s in %.3f s, peak staging %s\n", width,
                          Printable(id), HumanBytes(it->second->bytes()),
                          it->second->seconds(),
                          HumanBytes(it->second->peak_staging_bytes()));
  }
  for (const std::string& id : running->waiting()) {
    auto it = live.find(id);
    const int64_t bytes = it == live.end() ? 0 : it->second->bytes();
    const int64_t planned = it == live.end() ? 0 : it->second->planned_bytes();
    if (planned > 0) {
      absl::StrAppendFormat(&out, "  moving    %-*s  %s of %s (%d%%)\n", width, Printable(id),
                            HumanBytes(bytes), HumanBytes(planned),
                            static_cast<int>(100.0 * static_cast<double>(bytes) /
                                             static_cast<double>(planned)));
    } else {
      absl::StrAppendFormat(&out, "  moving    %-*s  %s so far\n", width, Printable(id),
                            HumanBytes(bytes));
    }
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
      show(absl::StrCat(FinishedRoundLine(*done), "\n"));
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

absl::StatusOr<int> FollowRounds(
    const std::function<absl::StatusOr<v1::StatusResponse>(absl::Time)>& get_status,
    const std::function<void(const std::string&)>& show, const std::string& server,
    absl::Duration interval, absl::Time deadline, bool clear_screen) {
  for (int ended = 0;; ++ended) {
    absl::StatusOr<v1::RoundSummary> r =
        WatchRounds(get_status, show, server, interval, deadline, clear_screen);
    if (absl::IsDeadlineExceeded(r.status()) && absl::Now() + interval > deadline) {
      return ended;
    }
    if (!r.ok()) return r.status();
  }
}

}  // namespace refit

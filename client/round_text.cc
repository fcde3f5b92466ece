// Rounds worded for people (see round_text.h).
#include "client/round_text.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/printable.h"
#include "common/round_bytes.h"

namespace refit {

std::string Counted(int64_t n, const std::string& noun) {
  return absl::StrCat(n, " ", noun, n == 1 ? "" : "s");
}

// ", engine pause 12.3 ms (engine/demo/e0/1), 0.051 of the round" for a
// round with staged engines, else "".
std::string PauseText(const v1::RoundSummary& s) {
  if (s.pause_member().empty()) return "";
  const double round = s.duration_seconds();
  return absl::StrFormat(", engine pause %.1f ms (%s)%s", s.pause_seconds() * 1e3,
                         Printable(s.pause_member()),
                         round > 0 ? absl::StrFormat(", %.3f of the round",
                                                     s.pause_seconds() / round)
                                   : "");
}

// "; delta rounds run dense: ..." for a refitd --delta with host members,
// else "".
std::string DeltaNoteText(const v1::RoundSummary& s) {
  return s.delta_note().empty() ? "" : "; " + Printable(s.delta_note());
}

std::string FinishedRoundLine(const v1::RoundSummary& s) {
  if (s.outcome() == "committed") {
    return absl::StrFormat(
        "round %d committed in %.3f s (slowest member %.3f s): %s per engine rank (%s), "
        "%s, peak staging %s%s",
        s.version(), s.duration_seconds(), s.seconds(), HumanBytes(s.bytes()),
        Counted(s.engine_ranks(), "engine rank"), HumanRate(s.bytes_per_second()),
        HumanBytes(s.peak_staging_bytes()),
        s.peak_staging_member().empty() ? "" : " (" + Printable(s.peak_staging_member()) + ")") +
        PauseText(s) + DeltaNoteText(s);
  }
  return absl::StrFormat("round %d %s after %.3f s: %s", s.version(), s.outcome(),
                         s.seconds(), Printable(s.reason()));
}

std::string RunningRoundBytes(const v1::RoundSummary& s) {
  if (s.engine_ranks() == 0) return "";
  return absl::StrCat(", ", HumanBytes(s.bytes()), " per engine rank so far");
}

}  // namespace refit

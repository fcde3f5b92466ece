// Rounds: the weight-version round that is running (its participants and
// their reports), how earlier rounds ended, and each engine's weights as the
// rounds left them — the last version committed into it, and the round that
// aborted after it had started writing it ("torn"). Not thread-safe: its
// owner holds the lock.
#ifndef REFIT_SERVER_ROUNDS_H_
#define REFIT_SERVER_ROUNDS_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/round_bytes.h"
#include "proto/refit_service.pb.h"

namespace refit {

// The largest round version refitd accepts: 2^53, so that every version is
// exact as a double (JSON, Prometheus, Python floats). A trainer numbering
// rounds by step, or by Unix time in microseconds, stays far below it.
inline constexpr int64_t kMaxRoundVersion = int64_t{1} << 53;

class Rounds {
 public:
  // The round that is running.
  struct Active {
    int64_t version = 0;
    int32_t attempt = 1;  // 1, or k when version's round k-1 aborted
    absl::Time started;
    std::set<std::string> participants;  // member ids
    std::set<std::string> done;          // participants that reported success
    RoundBytes bytes;                    // the engine ranks' received bytes
    double seconds = 0;                  // the slowest reported time
    std::string slowest;                 // the member that reported it
    int64_t peak_staging_bytes = 0;      // the largest reported peak staging
    std::string peak_staging_member;     // the member that reported it
    std::string delta_note;              // RoundSummary.delta_note
    // Each success report, by member id (member_id, bytes, seconds, peak
    // staging as the member sent them).
    std::map<std::string, v1::MemberReport> reports;
    // Each participant's bytes so far from its heartbeats (RecordLive).
    std::map<std::string, int64_t> live;
    // Staged engine members among the participants (Registration.staged):
    // they write their live buffers only once every participant reported
    // done (`applying`, ROUND_STAGED); those that have since reported
    // their apply, and the longest pause one reported, and who.
    std::set<std::string> staged;
    bool applying = false;
    std::set<std::string> writing;  // began writing their live buffers
    std::set<std::string> applied;
    double pause_seconds = 0;
    std::string pause_member;
  };

  // Keeps the summaries of the last `rounds_kept` finished rounds.
  explicit Rounds(int rounds_kept) : rounds_kept_(rounds_kept) {}

  // Checks whether round `version` may start. Returns true when it is the
  // running round or the last one and it committed (an idempotent retry),
  // false when it may start: a version above the last, or the last one
  // after its round aborted (run again, as the next attempt). Fails with
  // FAILED_PRECONDITION while another round runs, INVALID_ARGUMENT naming
  // `version` when it is below the last one, below 1 or above
  // kMaxRoundVersion.
  absl::StatusOr<bool> CheckStart(int64_t version) const;

  // Checks a participant's success figures before RecordDone: OK, or
  // INVALID_ARGUMENT naming the field when bytes or peak_staging_bytes is
  // negative, bytes is above `max_bytes` (what the member's plan slice
  // moves), seconds is not a finite non-negative number, or the round's
  // byte sum would overflow.
  absl::Status CheckReport(const v1::MemberReport& report,
                           int64_t max_bytes = std::numeric_limits<int64_t>::max()) const;

  // Returns whether member `id` reported success in the running round.
  bool HasReported(const std::string& id) const {
    return active_ != nullptr && active_->done.count(id) > 0;
  }

  // Starts round `version` (CheckStart said false) with `participants`;
  // returns its attempt (1, or one more than the last aborted attempt of
  // the same version).
  int32_t Start(int64_t version, std::set<std::string> participants, absl::Time now);

  // Sets the running round's RoundSummary.delta_note (no-op without one).
  void SetDeltaNote(std::string note) {
    if (active_ != nullptr) active_->delta_note = std::move(note);
  }

  // Returns the version a StartRound with next_version starts: one above
  // the last started round's (1 when none started).
  int64_t NextVersion() const { return last_version_ + 1; }

  // Returns the attempt of the last started round (0: none).
  int32_t last_attempt() const { return last_attempt_; }

  // Returns the running round, or null.
  const Active* active() const { return active_.get(); }

  // Returns whether member `id` takes part in the running round.
  bool IsParticipant(const std::string& id) const {
    return active_ != nullptr && active_->participants.count(id) > 0;
  }

  // Returns the answer to a report for round `version`, attempt `attempt`
  // (0: the running one) when it is not the running round: OK when it
  // committed, ABORTED (with its reason) when it aborted (an earlier attempt
  // of the running version aborted), FAILED_PRECONDITION when refitd knows
  // no such round; nullopt when it is running.
  std::optional<absl::Status> ReplyToFinished(int64_t version, int32_t attempt = 0) const;

  // Records participant report.member_id()'s success (its bytes, seconds
  // and peak staging; the first report counts; an `engine` rank's bytes are
  // what it received and count in the round's bytes, common/round_bytes.h);
  // returns true when every participant has now reported success.
  bool RecordDone(const v1::MemberReport& report, bool engine);

  // Records that participant `id` moved `bytes` of round `version`,
  // attempt `attempt` (0: the running one) so far; the figure only rises.
  // OK and no-op when that round is not running or `id` is not a
  // participant still moving (a heartbeat sent as the round ended).
  // INVALID_ARGUMENT naming round_bytes when `bytes` is negative or above
  // `max_bytes` (what the member's plan slice moves).
  absl::Status RecordLive(const std::string& id, int64_t version, int32_t attempt,
                          int64_t bytes, int64_t max_bytes);

  // Marks participants `ids` of the running round as staged members
  // (no-op without a round).
  void MarkStaged(std::set<std::string> ids);

  // Every participant reported done and the round has staged members:
  // they apply now (Active::applying).
  void BeginApply();

  // Records that staged member `id` begins writing its live buffers: an
  // abort from now on tears its engine. FAILED_PRECONDITION as
  // RecordApplied.
  absl::Status RecordWriting(const std::string& id);

  // Records staged member `id`'s apply of the running round, which paused
  // its engine `pause_seconds`; returns true when every staged member has
  // applied. FAILED_PRECONDITION when no round is applying or `id` is not
  // one of its staged members, INVALID_ARGUMENT naming pause_seconds when
  // it is not a finite non-negative number.
  absl::StatusOr<bool> RecordApplied(const std::string& id, double pause_seconds);

  // Ends the running round (no-op without one): records its outcome, its
  // summary and, for each participant `engine_of` maps to an engine id (""
  // for trainers), the engine's committed or torn version: an aborted
  // round tears an engine unless all its participants are staged members
  // that had not begun writing it (their live bytes are untouched). Returns the event
  // to broadcast (ROUND_COMMITTED or ROUND_ABORTED, with `plan_epoch`), or
  // nullopt when no round was running.
  std::optional<v1::RoundEvent> End(
      bool committed, const std::string& reason, absl::Time now, int64_t plan_epoch,
      const std::function<std::string(const std::string&)>& engine_of);

  // Returns the last version committed into engine `engine_id` (0: none).
  int64_t CommittedVersion(const std::string& engine_id) const;

  // Returns the round that aborted after it started on `engine_id` and no
  // commit since (0: none).
  int64_t TornVersion(const std::string& engine_id) const;

  // Returns when the last round committed into `engine_id` ended
  // (InfinitePast: none).
  absl::Time LastCommitTime(const std::string& engine_id) const;

  // Fills `s` with the running round's figures so far (bytes, peak staging;
  // not its time); `s` gets the finished ones' in End.
  void FillFigures(const Active& a, v1::RoundSummary* s) const;

  // Returns the summaries of the last finished rounds, oldest first.
  const std::deque<v1::RoundSummary>& history() const { return history_; }

 private:
  const int rounds_kept_;
  std::unique_ptr<Active> active_;
  int64_t last_version_ = 0;
  int32_t last_attempt_ = 0;  // of last_version_
  std::map<int64_t, absl::Status> outcomes_;  // the last 1024 rounds
  std::map<std::string, int64_t> engine_version_;
  std::map<std::string, int64_t> engine_torn_;
  std::map<std::string, absl::Time> engine_commit_time_;
  std::deque<v1::RoundSummary> history_;
};

}  // namespace refit

#endif  // REFIT_SERVER_ROUNDS_H_

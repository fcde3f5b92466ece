// Rounds (see rounds.h).
#include "server/rounds.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace refit {

absl::StatusOr<bool> Rounds::CheckStart(int64_t version) const {
  if (version < 1 || version > kMaxRoundVersion) {
    return absl::InvalidArgumentError(absl::StrCat(
        "version: ", version, " is outside [1, 2^53 = ", kMaxRoundVersion, "]"));
  }
  if (active_ != nullptr) {
    if (active_->version == version) return true;
    return absl::FailedPreconditionError(absl::StrCat(
        "version: round ", active_->version, " is still running; cannot start ",
        version));
  }
  if (version == last_version_ && version > 0) {
    auto o = outcomes_.find(version);
    // Aborted: the engines may hold part of it (torn); run it again.
    return o == outcomes_.end() || o->second.ok();
  }
  if (version <= 0 || version < last_version_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "version: ", version, " is not above the last version ", last_version_,
        " (this refitd's versions rise across runs and jobs until it restarts: "
        "start at ", last_version_ + 1, " or above, or start the next version "
        "without naming one: start_round() in Python; `refit status` lists the last "
        "rounds)"));
  }
  return false;
}

int32_t Rounds::Start(int64_t version, std::set<std::string> participants,
                      absl::Time now) {
  last_attempt_ = version == last_version_ ? last_attempt_ + 1 : 1;
  active_ = std::make_unique<Active>();
  active_->version = version;
  active_->attempt = last_attempt_;
  active_->started = now;
  active_->participants = std::move(participants);
  last_version_ = version;
  return last_attempt_;
}

std::optional<absl::Status> Rounds::ReplyToFinished(int64_t version,
                                                    int32_t attempt) const {
  if (active_ != nullptr && active_->version == version) {
    if (attempt == 0 || attempt == active_->attempt) return std::nullopt;
    return absl::AbortedError(absl::StrCat("round ", version, " attempt ", attempt,
                                           " already aborted; attempt ",
                                           active_->attempt, " runs now"));
  }
  auto o = outcomes_.find(version);
  if (o == outcomes_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("version: round ", version, " is not running"));
  }
  if (o->second.ok()) return absl::OkStatus();
  return absl::AbortedError(
      absl::StrCat("round ", version, " already aborted: ", o->second.message()));
}

absl::Status Rounds::CheckReport(const v1::MemberReport& report, int64_t max_bytes) const {
  if (report.bytes() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bytes: ", report.bytes(), " is negative"));
  }
  if (report.bytes() > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bytes: ", report.bytes(), " is more than the ", max_bytes,
        " bytes the member's plan slice moves"));
  }
  if (report.peak_staging_bytes() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "peak_staging_bytes: ", report.peak_staging_bytes(), " is negative"));
  }
  if (!std::isfinite(report.seconds()) || report.seconds() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "seconds: ", report.seconds(), " is not a finite non-negative number"));
  }
  const int64_t sum = active_ == nullptr ? 0 : active_->bytes.all_engine_ranks;
  if (report.bytes() > std::numeric_limits<int64_t>::max() - sum) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bytes: ", report.bytes(), " overflows the round's sum (", sum,
        " bytes reported so far)"));
  }
  return absl::OkStatus();
}

bool Rounds::RecordDone(const v1::MemberReport& report, bool engine) {
  if (active_ == nullptr) return false;
  const std::string& id = report.member_id();
  if (active_->done.insert(id).second) {
    active_->reports[id] = report;
    if (engine) active_->bytes.AddEngineRank(report.bytes());
    if (active_->slowest.empty() || report.seconds() > active_->seconds) {
      active_->seconds = report.seconds();
      active_->slowest = id;
    }
    if (active_->peak_staging_member.empty() ||
        report.peak_staging_bytes() > active_->peak_staging_bytes) {
      active_->peak_staging_bytes = report.peak_staging_bytes();
      active_->peak_staging_member = id;
    }
  }
  return active_->done.size() == active_->participants.size();
}

absl::Status Rounds::RecordLive(const std::string& id, int64_t version, int32_t attempt,
                               int64_t bytes, int64_t max_bytes) {
  if (bytes < 0 || bytes > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "round_bytes: ", bytes, " is outside [0, ", max_bytes,
        "], the bytes the member's plan slice moves"));
  }
  if (active_ == nullptr || active_->version != version ||
      (attempt != 0 && attempt != active_->attempt) ||
      active_->participants.count(id) == 0 || active_->done.count(id) > 0) {
    return absl::OkStatus();
  }
  int64_t& live = active_->live[id];
  live = std::max(live, bytes);
  return absl::OkStatus();
}

void Rounds::MarkStaged(std::set<std::string> ids) {
  if (active_ != nullptr) active_->staged = std::move(ids);
}

void Rounds::BeginApply() {
  if (active_ != nullptr) active_->applying = true;
}

absl::Status Rounds::RecordWriting(const std::string& id) {
  if (active_ == nullptr || !active_->applying) {
    return absl::FailedPreconditionError(absl::StrCat(
        "member_id: ", id, " reported an apply, but no round waits for applies"));
  }
  if (active_->staged.count(id) == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "member_id: ", id, " is not a staged member of round ", active_->version));
  }
  active_->writing.insert(id);
  return absl::OkStatus();
}

absl::StatusOr<bool> Rounds::RecordApplied(const std::string& id, double pause_seconds) {
  if (absl::Status s = RecordWriting(id); !s.ok()) return s;
  if (!std::isfinite(pause_seconds) || pause_seconds < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pause_seconds: ", pause_seconds, " is not a finite non-negative number"));
  }
  if (active_->applied.insert(id).second &&
      (active_->pause_member.empty() || pause_seconds > active_->pause_seconds)) {
    active_->pause_seconds = pause_seconds;
    active_->pause_member = id;
  }
  return active_->applied.size() == active_->staged.size();
}

std::optional<v1::RoundEvent> Rounds::End(
    bool committed, const std::string& reason, absl::Time now, int64_t plan_epoch,
    const std::function<std::string(const std::string&)>& engine_of) {
  if (active_ == nullptr) return std::nullopt;
  const double secs = absl::ToDoubleSeconds(now - active_->started);
  v1::RoundSummary s;
  s.set_version(active_->version);
  s.set_attempt(active_->attempt);
  s.set_outcome(committed ? "committed" : "aborted");
  s.set_reason(reason);
  FillFigures(*active_, &s);
  s.set_seconds(committed ? active_->seconds : secs);
  s.set_duration_seconds(secs);
  if (committed) s.set_bytes_per_second(RoundBytesPerSecond(active_->bytes, active_->seconds));
  history_.push_back(s);
  while (static_cast<int>(history_.size()) > rounds_kept_) history_.pop_front();
  outcomes_[active_->version] = committed ? absl::OkStatus() : absl::AbortedError(reason);
  while (outcomes_.size() > 1024) outcomes_.erase(outcomes_.begin());
  for (const std::string& id : active_->participants) {
    const std::string engine = engine_of(id);
    if (engine.empty()) continue;
    if (committed) {
      engine_version_[engine] = active_->version;
      engine_commit_time_[engine] = now;
      engine_torn_.erase(engine);
    } else if (active_->staged.count(id) == 0 || active_->writing.count(id) > 0) {
      engine_torn_[engine] = active_->version;  // this rank may have written live bytes
    }
  }
  v1::RoundEvent e;
  e.set_kind(committed ? v1::RoundEvent::ROUND_COMMITTED
                       : v1::RoundEvent::ROUND_ABORTED);
  e.set_version(active_->version);
  e.set_attempt(active_->attempt);
  e.set_reason(reason);
  e.set_epoch(plan_epoch);
  active_.reset();
  return e;
}

int64_t Rounds::CommittedVersion(const std::string& engine_id) const {
  auto it = engine_version_.find(engine_id);
  return it == engine_version_.end() ? 0 : it->second;
}

int64_t Rounds::TornVersion(const std::string& engine_id) const {
  auto it = engine_torn_.find(engine_id);
  return it == engine_torn_.end() ? 0 : it->second;
}

absl::Time Rounds::LastCommitTime(const std::string& engine_id) const {
  auto it = engine_commit_time_.find(engine_id);
  return it == engine_commit_time_.end() ? absl::InfinitePast() : it->second;
}

void Rounds::FillFigures(const Active& a, v1::RoundSummary* s) const {
  s->set_delta_note(a.delta_note);
  s->set_bytes(a.bytes.per_engine_rank);
  s->set_engine_ranks(a.bytes.engine_ranks);
  s->set_engine_bytes(a.bytes.all_engine_ranks);
  s->set_peak_staging_bytes(a.peak_staging_bytes);
  s->set_peak_staging_member(a.peak_staging_member);
  s->set_pause_seconds(a.pause_seconds);
  s->set_pause_member(a.pause_member);
}

}  // namespace refit

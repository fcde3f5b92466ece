// Coordinator (see coordinator.h): rounds, their outcomes and status. The
// rest of the class is in coordinator.cc.
#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "proto/protocol_version.h"
#include "server/coordinator.h"
#include "server/bounded_text.h"
#include "server/log.h"
#include "server/registration.h"

namespace refit {

// --- rounds -----------------------------------------------------------------

namespace {

// Room per message for the delta data plane's message header (32 bytes,
// exec/delta/delta_codec.h), with margin.
constexpr int64_t kDeltaHeaderRoom = 64;

// Room in a Report request for its fields other than `digests`: the
// reason's text limit (64 KiB), the others' (request_text.h), with margin.
constexpr int64_t kReportFieldsRoom = 80 << 10;
// Room for one digest part: its numbers, framing and a tensor name at its
// text limit (1 KiB).
constexpr int64_t kDigestPartRoom = 1100;

// Returns the most bytes a member whose slice is `bounds` may report: its
// slice's bytes plus the delta headers (no bound when unknown).
int64_t MaxReportBytes(const SliceBounds* bounds) {
  if (bounds == nullptr) return std::numeric_limits<int64_t>::max();
  return bounds->bytes + kDeltaHeaderRoom * bounds->messages;
}

}  // namespace

absl::StatusOr<v1::StartRoundResponse> Coordinator::StartRound(
    const v1::StartRoundRequest& req) {
  absl::StatusOr<v1::StartRoundResponse> r = TryStartRound(req);
  if (!r.ok()) {
    const std::string version =
        req.next_version() ? std::string("next") : absl::StrCat(req.version());
    const std::string reason = BoundedText(std::string(r.status().ToString()));
    if (absl::IsUnavailable(r.status())) {
      ServerLog().debug("round start refused round={} member={} reason={}", version,
                        BoundedText(req.member_id()), reason);
    } else {
      ServerLog().warn("round start refused round={} member={} reason={}", version,
                       BoundedText(req.member_id()), reason);
    }
  }
  return r;
}

absl::StatusOr<v1::StartRoundResponse> Coordinator::TryStartRound(
    const v1::StartRoundRequest& req) {
  Locked l(this);
  const Member* m = membership_.Find(req.member_id());
  if (m == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("member_id: ", req.member_id(), " is not registered"));
  }
  REFIT_RETURN_IF_ERROR(CheckSecret(req.member_id(), req.member_secret()));
  if (m->reg.identity().side() != v1::SIDE_TRAINER) {
    return absl::PermissionDeniedError("member_id: only trainer members start rounds");
  }
  const int64_t v = req.next_version() ? rounds_.NextVersion() : req.version();
  if (req.has_plan_epoch() && req.plan_epoch() != membership_.epoch()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "round ", v, ": the trainer prepared the plan of membership epoch ",
        req.plan_epoch(), " but the membership is at epoch ", membership_.epoch(),
        "; await the new plan and prepare again"));
  }
  v1::StartRoundResponse resp;
  resp.set_version(v);
  REFIT_ASSIGN_OR_RETURN(const bool already_started, rounds_.CheckStart(v));
  if (already_started) {
    resp.set_already_started(true);
    resp.set_attempt(rounds_.last_attempt());
    return resp;
  }
  if (plan_dirty_ || plan_epoch_ != membership_.epoch()) {
    return absl::UnavailableError("membership changed; the new plan is being built, retry");
  }
  if (plan_incomplete_ || !plan_status_.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no valid plan: ", plan_status_.message()));
  }
  // A participant without a stream (it registered a moment ago, or its
  // process died and has not expired yet) could not learn of the round.
  std::set<std::string> participants;
  for (const auto& [id, plan] : member_plans_) {
    if (streams_.count(id) == 0) {
      return absl::UnavailableError(
          absl::StrCat("member ", Describe(id), " has no round stream yet; retry"));
    }
    participants.insert(id);
  }
  const size_t n = participants.size();
  const int32_t attempt = rounds_.Start(v, std::move(participants), absl::Now());
  resp.set_attempt(attempt);
  // With --delta, host members' rounds run dense where the codec loses.
  const BuiltPlan* built =
      current_plan_ != nullptr && current_plan_->ok() ? &**current_plan_ : nullptr;
  const bool delta_dense = options_.delta && built != nullptr && built->host_delta_dense;
  if (options_.delta && built != nullptr) rounds_.SetDeltaNote(built->host_delta_note);
  ServerLog().info("round started round={} attempt={} members={} plan_epoch={}{}", v,
                   attempt, n, plan_epoch_,
                   delta_dense ? " dense (delta rounds run dense: see the plan's line)" : "");
  v1::RoundEvent e;
  e.set_kind(v1::RoundEvent::ROUND_STARTED);
  e.set_version(v);
  e.set_attempt(attempt);
  e.set_epoch(plan_epoch_);
  // Keyed by the plan's engine rank: one per (engine, rank).
  std::map<int32_t, std::string> engine_members;
  std::set<std::string> staged;
  for (const auto& [id, plan] : member_plans_) {
    if (!plan.trainer) engine_members[plan.engine_rank] = id;
  }
  for (const std::string& id : rounds_.active()->participants) {
    const Member* pm = membership_.Find(id);
    if (pm != nullptr && pm->reg.identity().side() == v1::SIDE_ENGINE && pm->reg.staged()) {
      staged.insert(id);
    }
  }
  rounds_.MarkStaged(std::move(staged));
  delta_rounds_.Announce(engine_members, &e, delta_dense);
  Broadcast(e);
  return resp;
}

absl::Status Coordinator::CheckReportSize(size_t bytes) const {
  const int64_t parts = max_report_parts_.load(std::memory_order_relaxed);
  if (parts < 0) return absl::OkStatus();
  const int64_t max = kReportFieldsRoom + parts * kDigestPartRoom;
  if (bytes <= static_cast<size_t>(max)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "digests: a Report request of ", bytes, " bytes, over the ", max,
      " bytes any report of the current plan holds (its largest plan slice writes ", parts,
      " digest parts); not read"));
}

void Coordinator::BoundReports() {
  int64_t parts = 0;
  for (const auto& [id, plan] : member_plans_) {
    if (plan.bounds == nullptr) {
      parts = -1;
      break;
    }
    parts = std::max(parts, static_cast<int64_t>(plan.bounds->digest_keys.size()));
  }
  max_report_parts_.store(parts, std::memory_order_relaxed);
}

absl::Status Coordinator::Report(const v1::ReportRequest& req) {
  Locked l(this);
  // Outcomes come only from the members themselves.
  REFIT_RETURN_IF_ERROR(CheckSecret(req.member_id(), req.member_secret()));
  const int64_t v = req.version();
  // Late report of a finished round: tell the caller how it ended.
  if (std::optional<absl::Status> reply = rounds_.ReplyToFinished(v, req.attempt())) {
    return *reply;
  }
  if (!rounds_.IsParticipant(req.member_id())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "member_id: ", req.member_id(), " is not a participant of round ", v));
  }
  membership_.Touch(req.member_id(), absl::Now());
  if (req.ok() && req.applying()) return rounds_.RecordWriting(req.member_id());
  if (req.ok() && req.applied()) return ReportApplied(req);
  if (!req.ok()) {
    // The reason is the member's own text: cut, so one peer cannot make
    // refitd keep, log and broadcast megabytes.
    const std::string reason = BoundedText(req.reason());
    ServerLog().warn("member reported failure round={} member={} reason={}", v,
                     req.member_id(), reason);
    EndRound(false, absl::StrCat("member ", Describe(req.member_id()),
                                 " failed: ", reason),
             AbortReason::kMemberFailed);
    return absl::OkStatus();
  }
  // A member's success counts once: a retry is answered, not added again.
  if (rounds_.HasReported(req.member_id())) return absl::OkStatus();
  const Member* m = membership_.Find(req.member_id());
  const std::string transport =
      m == nullptr ? "" : ServerMetrics::TransportLabel(m->reg.identity().transport());
  const bool engine = m != nullptr && m->reg.identity().side() == v1::SIDE_ENGINE;
  auto plan = member_plans_.find(req.member_id());
  const SliceBounds* bounds = plan == member_plans_.end() ? nullptr : plan->second.bounds;
  v1::MemberReport report;
  report.set_member_id(req.member_id());
  report.set_bytes(req.bytes());
  report.set_seconds(req.seconds());
  report.set_peak_staging_bytes(req.peak_staging_bytes());
  report.set_digest_seconds(req.digest_seconds());
  // Figures that would corrupt the round's sum, status and metrics are
  // refused; the round goes on (the member may report again).
  REFIT_RETURN_IF_ERROR(rounds_.CheckReport(report, MaxReportBytes(bounds)));
  REFIT_RETURN_IF_ERROR(delta_rounds_.CheckParts(
      engine, plan == member_plans_.end() ? -1 : plan->second.engine_rank, bounds, req,
      Describe(req.member_id())));
  ServerLog().info(
      "member reported round={} member={} bytes={} seconds={:.6f} "
      "peak_staging_bytes={} transport={}",
      v, req.member_id(), req.bytes(), req.seconds(), req.peak_staging_bytes(),
      transport.empty() ? "none" : transport);
  metrics_.MemberReported(transport, req.bytes(), req.seconds());
  delta_rounds_.AddReport(req.member_id(), engine, bounds, req, Describe(req.member_id()));
  if (rounds_.RecordDone(report, engine)) {
    // A verified round commits only when the digests agree.
    const absl::Status verified = delta_rounds_.Check();
    if (verified.ok() && !rounds_.active()->staged.empty()) {
      BeginApply();  // staged engines hold it: they apply, then it commits
    } else {
      EndRound(verified.ok(), std::string(verified.message()), AbortReason::kMemberFailed);
    }
  }
  return absl::OkStatus();
}

void Coordinator::BeginApply() {
  const Rounds::Active* a = rounds_.active();
  rounds_.BeginApply();
  ServerLog().info("round staged round={} attempt={} staged_members={} seconds={:.6f}",
                   a->version, a->attempt, a->staged.size(),
                   absl::ToDoubleSeconds(absl::Now() - a->started));
  v1::RoundEvent e;
  e.set_kind(v1::RoundEvent::ROUND_STAGED);
  e.set_version(a->version);
  e.set_attempt(a->attempt);
  e.set_epoch(plan_epoch_);
  Broadcast(e);
}

absl::Status Coordinator::ReportApplied(const v1::ReportRequest& req) {
  REFIT_ASSIGN_OR_RETURN(const bool all,
                         rounds_.RecordApplied(req.member_id(), req.pause_seconds()));
  ServerLog().info("member applied round={} member={} pause_seconds={:.6f}", req.version(),
                   req.member_id(), req.pause_seconds());
  metrics_.EnginePaused(req.pause_seconds());
  if (all) EndRound(true, "", AbortReason::kMemberFailed);
  return absl::OkStatus();
}

void Coordinator::EndRound(bool committed, const std::string& reason,
                           AbortReason abort_reason) {
  const Rounds::Active* active = rounds_.active();
  if (active == nullptr) return;
  const absl::Time now = absl::Now();
  const double secs = absl::ToDoubleSeconds(now - active->started);
  const int64_t version = active->version;
  const RoundBytes bytes = active->bytes;
  const std::string slowest = active->slowest;
  const double slowest_seconds = active->seconds;
  const int64_t peak_staging = active->peak_staging_bytes;
  const std::string peak_member = active->peak_staging_member;
  const size_t members = active->participants.size();
  const double pause = active->pause_seconds;
  const std::string pause_member = active->pause_member;
  std::map<std::string, std::vector<std::string>> engines;
  for (const std::string& id : active->participants) {
    const Member* pm = membership_.Find(id);
    if (pm != nullptr && pm->reg.identity().side() == v1::SIDE_ENGINE) {
      engines[pm->reg.identity().engine_id()].push_back(id);
    }
  }
  delta_rounds_.End(committed, version, active->participants, engines);
  std::optional<v1::RoundEvent> e =
      rounds_.End(committed, reason, now, plan_epoch_, [this](const std::string& id) {
        const Member* m = membership_.Find(id);
        return m != nullptr && m->reg.identity().side() == v1::SIDE_ENGINE
                   ? m->reg.identity().engine_id()
                   : std::string();
      });
  if (committed) {
    ServerLog().info(
        "round committed round={} seconds={:.6f} bytes={} bytes_per_second={:.6g} "
        "engine_ranks={} members={} slowest={} slowest_seconds={:.6f} "
        "peak_staging_bytes={} peak_staging_member={} pause_seconds={:.6f} pause_member={}",
        version, secs, bytes.per_engine_rank, RoundBytesPerSecond(bytes, slowest_seconds),
        bytes.engine_ranks, members, slowest.empty() ? "none" : slowest, slowest_seconds,
        peak_staging, peak_member.empty() ? "none" : peak_member, pause,
        pause_member.empty() ? "none" : pause_member);
    metrics_.RoundCommitted(secs, bytes, slowest_seconds, peak_staging);
  } else {
    ServerLog().warn("round aborted round={} seconds={:.6f} cause={} reason={}",
                     version, secs, AbortReasonName(abort_reason), reason);
    metrics_.RoundAborted(abort_reason, secs);
  }
  Broadcast(*e);
}

v1::EngineStateResponse Coordinator::GetEngineState(
    const v1::EngineStateRequest& req) {
  Locked l(this);
  v1::EngineStateResponse resp;
  resp.set_committed_version(rounds_.CommittedVersion(req.engine_id()));
  resp.set_torn_version(rounds_.TornVersion(req.engine_id()));
  return resp;
}

absl::Status Coordinator::RecordLiveBytes(const v1::HeartbeatRequest& req) {
  auto plan = member_plans_.find(req.member_id());
  const SliceBounds* bounds = plan == member_plans_.end() ? nullptr : plan->second.bounds;
  return rounds_.RecordLive(req.member_id(), req.round_version(), req.round_attempt(),
                            req.round_bytes(), MaxReportBytes(bounds));
}

void Coordinator::FillLiveBytes(const Rounds::Active& a, v1::RoundSummary* s) const {
  for (const std::string& id : a.participants) {
    v1::MemberBytes* b = s->add_live();
    b->set_member_id(id);
    auto plan = member_plans_.find(id);
    const SliceBounds* bounds = plan == member_plans_.end() ? nullptr : plan->second.bounds;
    const Member* m = membership_.Find(id);
    b->set_engine(m != nullptr && m->reg.identity().side() == v1::SIDE_ENGINE);
    auto report = a.reports.find(id);
    b->set_reported(report != a.reports.end());
    auto live = a.live.find(id);
    int64_t bytes = report != a.reports.end() ? report->second.bytes()
                    : live != a.live.end()     ? live->second
                                               : 0;
    if (bounds != nullptr) {
      // A delta round's figures may carry message headers beyond the slice.
      bytes = std::min(bytes, bounds->bytes);
      b->set_planned_bytes(bounds->bytes);
    }
    b->set_bytes(bytes);
  }
}

v1::StatusResponse Coordinator::GetStatus() {
  v1::StatusResponse resp;
  resp.set_protocol_version(kProtocolVersion);
  Locked l(this);
  const absl::Time now = absl::Now();
  for (std::string& r : refusals_.Describe()) resp.add_refusals(std::move(r));
  std::set<std::string> engines;
  for (const auto& [id, m] : membership_.members()) {
    v1::MemberStatus* ms = resp.add_members();
    ms->set_member_id(id);
    *ms->mutable_identity() = m.reg.identity();
    ms->set_num_buffers(m.reg.buffers_size());
    ms->set_seconds_since_heartbeat(absl::ToDoubleSeconds(now - m.last_heartbeat));
    if (m.reg.identity().side() == v1::SIDE_ENGINE) {
      engines.insert(m.reg.identity().engine_id());
    }
  }
  resp.set_plan_fingerprint(plan_fingerprint_);
  resp.set_epoch(plan_epoch_);
  if (current_plan_ != nullptr && current_plan_->ok() && plan_status_.ok()) {
    resp.set_pull_pairs((*current_plan_)->pull_pairs);
    resp.set_network_pairs((*current_plan_)->network_pairs);
  }
  if (!plan_status_.ok()) resp.set_plan_error(std::string(plan_status_.message()));
  for (const v1::RoundSummary& s : rounds_.history()) *resp.add_rounds() = s;
  for (const std::string& e : engines) {
    v1::EngineStatus* es = resp.add_engines();
    es->set_engine_id(e);
    es->set_committed_version(rounds_.CommittedVersion(e));
    es->set_torn_version(rounds_.TornVersion(e));
    es->set_verified_version(delta_rounds_.VerifiedVersion(e));
  }
  if (const Rounds::Active* a = rounds_.active()) {
    v1::RoundSummary* s = resp.add_rounds();
    s->set_version(a->version);
    s->set_attempt(a->attempt);
    s->set_outcome("running");
    rounds_.FillFigures(*a, s);
    s->set_seconds(absl::ToDoubleSeconds(now - a->started));
    for (const auto& [id, report] : a->reports) *s->add_reports() = report;
    FillLiveBytes(*a, s);
    for (const std::string& id : a->participants) {
      if (a->done.count(id) > 0) {
        s->add_reported(id);
      } else {
        s->add_waiting(id);
      }
    }
  }
  return resp;
}

}  // namespace refit

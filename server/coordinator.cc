// Coordinator (see coordinator.h). All state lives behind one mutex. The
// housekeeping thread ticks every options.tick: it announces membership
// epochs, expires members and waits, times out rounds and, once the
// membership has settled, queues a plan job; the planner thread builds it
// without the lock and applies it only if the membership is still the one it
// was built for. Rounds and status are in coordinator_rounds.cc.
#include "server/coordinator.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/constant_time.h"
#include "common/member_secret.h"
#include "common/status_macros.h"
#include "proto/protocol_version.h"
#include "server/bounded_text.h"
#include "server/delta_transports.h"
#include "server/log.h"
#include "server/registration.h"

namespace refit {

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(Options options) {
  if (!options.plan_function) {
    return absl::InvalidArgumentError("options.plan_function: not set");
  }
  std::unique_ptr<Coordinator> c(new Coordinator(std::move(options)));
  c->housekeeper_ = std::thread([p = c.get()] { p->HousekeepingLoop(); });
  c->planner_ = std::thread([p = c.get()] { p->PlannerLoop(); });
  return c;
}

Coordinator::Coordinator(Options options)
    : options_(std::move(options)),
      membership_(options_.min_engines, options_.max_registration_bytes),
      rounds_(options_.rounds_kept),
      delta_rounds_(options_.delta, options_.verify_every),
      kv_(options_.kv_quota),
      credentials_(options_.job_key),
      refusals_(static_cast<size_t>(std::max(1, options_.max_members))),
      plan_cache_(16, options_.max_plan_cache_bytes) {}

Coordinator::~Coordinator() { Stop(); }

void Coordinator::Stop() {
  stop_requested_.store(true);
  {
    Locked l(this);
    if (!stopping_) {
      // Members of a round in flight learn that it ended, and why.
      EndRound(false, "refitd shutting down", AbortReason::kShutdown);
      stopping_ = true;
      waits_.EndAll(absl::UnavailableError("refitd shutting down"));
      for (auto& [id, s] : streams_) s->End(absl::UnavailableError("refitd shutting down"));
    }
  }
  if (housekeeper_.joinable()) housekeeper_.join();
  if (planner_.joinable()) planner_.join();
}

ServerMetrics::State Coordinator::MetricsState() {
  Locked l(this);
  ServerMetrics::State state;
  const Rounds::Active* active = rounds_.active();
  std::set<std::string> engines;
  for (const auto& [id, m] : membership_.members()) {
    const bool engine = m.reg.identity().side() == v1::SIDE_ENGINE;
    std::string st = "idle";
    if (active != nullptr && active->participants.count(id) > 0) {
      st = active->done.count(id) > 0 ? "reported" : "in_round";
    }
    ++state.members[{engine ? "engine" : "trainer", st}];
    if (engine) engines.insert(m.reg.identity().engine_id());
  }
  for (const std::string& e : engines) {
    state.engines.push_back({e, rounds_.CommittedVersion(e), rounds_.TornVersion(e) != 0,
                             rounds_.LastCommitTime(e)});
  }
  if (active != nullptr) {
    state.round_age_seconds = absl::ToDoubleSeconds(absl::Now() - active->started);
  }
  return state;
}

std::string Coordinator::Describe(const std::string& member_id) const {
  const Member* m = membership_.Find(member_id);
  return m == nullptr ? member_id : DescribeMember(m->reg.identity());
}

// --- membership -------------------------------------------------------------

absl::Status Coordinator::CheckSecret(const std::string& member_id,
                                      const std::string& secret) const {
  return credentials_.Check(member_id, Describe(member_id), secret);
}

absl::StatusOr<v1::RegisterResponse> Coordinator::Register(const v1::Registration& reg,
                                                           std::string secret,
                                                           const std::string& job_key) {
  REFIT_RETURN_IF_ERROR(CheckProtocolVersion(reg));
  REFIT_RETURN_IF_ERROR(ValidateRegistration(reg, options_.max_buffers_per_member,
                                             options_.max_metadata_bytes));
  if (secret.size() > kMaxMemberSecretBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "member_secret: ", secret.size(), " bytes; at most ", kMaxMemberSecretBytes));
  }
  const v1::MemberIdentity& ident = reg.identity();
  v1::RegisterResponse resp;
  resp.set_member_id(MemberKey(ident));
  if (secret.empty()) secret = NewMemberSecret();
  Locked l(this);
  // Only the process holding the member's secret registers it again while
  // it is a member, stream open or not; with a job key, a registrant that
  // presents it takes the member over (member_credentials.h).
  std::string held_note;
  if (const Member* m = membership_.Find(resp.member_id())) {
    held_note = absl::StrCat(
        "its last heartbeat came ",
        absl::FormatDuration(absl::Trunc(absl::Now() - m->last_heartbeat, absl::Milliseconds(1))),
        " ago; it expires after ", absl::FormatDuration(options_.heartbeat_timeout),
        " without one");
  }
  REFIT_ASSIGN_OR_RETURN(
      const MemberCredentials::Admission admission,
      credentials_.CheckRegister(resp.member_id(), DescribeMember(ident), secret, job_key,
                                 streams_.count(resp.member_id()) > 0, held_note));
  if (membership_.Find(resp.member_id()) == nullptr &&
      membership_.members().size() >= static_cast<size_t>(options_.max_members)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "member ", resp.member_id(), ": refitd holds ", membership_.members().size(),
        " members, its limit (--max_members)"));
  }
  REFIT_ASSIGN_OR_RETURN(Membership::Admitted admitted,
                         membership_.Admit(reg, absl::Now()));
  credentials_.Bind(resp.member_id(), secret);
  resp.set_member_secret(secret);
  // A new process (or new metadata) holds no version's bytes yet.
  if (admitted != Membership::Admitted::kSame) delta_rounds_.Forget(resp.member_id());
  if (refusals_.Clear(resp.member_id())) {
    ServerLog().info("member {} registered: its refusal is withdrawn", resp.member_id());
  }
  // The same registration from the new process is the same membership: the
  // plan stands, and the data planes reconnect after the round it aborts.
  if (admission == MemberCredentials::Admission::kTakeOver) TakeOver(resp.member_id(), ident);
  if (admitted == Membership::Admitted::kSame) {
    resp.set_already_registered(true);
    return resp;
  }
  if (admitted == Membership::Admitted::kReplaced &&
      rounds_.IsParticipant(resp.member_id())) {
    EndRound(false, absl::StrCat("member ", DescribeMember(ident),
                                 " re-registered with different metadata"),
             AbortReason::kReregistered);
  }
  ServerLog().info("member {} member={} host={} buffers={}: {}",
                   admitted == Membership::Admitted::kNew ? "joined" : "re-registered",
                   resp.member_id(), ident.host_id(), reg.buffers_size(),
                   DescribeMember(ident));
  MembershipChanged();
  return resp;
}

absl::StatusOr<v1::RegisterResponse> Coordinator::Refuse(const v1::Registration& reg,
                                                         const std::string& reason,
                                                         const std::string& secret,
                                                         const std::string& job_key) {
  REFIT_RETURN_IF_ERROR(CheckProtocolVersion(reg));
  REFIT_RETURN_IF_ERROR(ValidateRegistration(reg, options_.max_buffers_per_member,
                                             options_.max_metadata_bytes));
  const v1::MemberIdentity& ident = reg.identity();
  v1::RegisterResponse resp;
  resp.set_member_id(MemberKey(ident));
  const std::string who = DescribeMember(ident);
  Locked l(this);
  if (membership_.Find(resp.member_id()) != nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "member ", who, " is registered: a registered member cannot refuse to join "
        "(leave first)"));
  }
  REFIT_RETURN_IF_ERROR(
      credentials_.CheckRegister(resp.member_id(), who, secret, job_key, false, "").status());
  REFIT_RETURN_IF_ERROR(refusals_.Add(resp.member_id(), ident.job(), who, reason, absl::Now()));
  ServerLog().warn("member refused to join member={} host={}: {}", resp.member_id(),
                   ident.host_id(), BoundedText(reason, 512));
  WakeWaiters();
  return resp;
}

void Coordinator::TakeOver(const std::string& id, const v1::MemberIdentity& ident) {
  const std::string why = absl::StrCat(
      "member ", DescribeMember(ident),
      " was taken over by a newer registration with the job key (its restarted process)");
  if (rounds_.IsParticipant(id)) EndRound(false, why, AbortReason::kReregistered);
  delta_rounds_.Forget(id);  // the new process holds none of the old one's bytes
  ServerLog().warn("member taken over member={} host={}", id, ident.host_id());
  // The old process learns at once that it is out.
  auto s = streams_.find(id);
  if (s != streams_.end()) {
    RoundStream* stream = s->second;
    streams_.erase(s);
    stream->End(absl::PermissionDeniedError(why));
  }
}

absl::StatusOr<v1::HeartbeatResponse> Coordinator::Heartbeat(
    const v1::HeartbeatRequest& req) {
  Locked l(this);
  REFIT_RETURN_IF_ERROR(CheckSecret(req.member_id(), req.member_secret()));
  if (!membership_.Touch(req.member_id(), absl::Now())) {
    return absl::NotFoundError(
        absl::StrCat("member_id: ", req.member_id(), " is not registered"));
  }
  v1::HeartbeatResponse resp;
  resp.set_active_version(rounds_.active() != nullptr ? rounds_.active()->version : 0);
  if (req.round_version() != 0) REFIT_RETURN_IF_ERROR(RecordLiveBytes(req));
  return resp;
}

absl::Status Coordinator::Leave(const v1::LeaveRequest& req) {
  Locked l(this);
  REFIT_RETURN_IF_ERROR(CheckSecret(req.member_id(), req.member_secret()));
  RemoveMember(req.member_id(), "left", AbortReason::kMemberLeft);
  WakeWaiters();
  return absl::OkStatus();
}

void Coordinator::RemoveMember(const std::string& id, const std::string& why,
                               AbortReason round_abort) {
  const Member* m = membership_.Find(id);
  if (m == nullptr) return;
  const v1::MemberIdentity ident = m->reg.identity();
  if (rounds_.IsParticipant(id)) {
    EndRound(false, absl::StrCat("member ", DescribeMember(ident), " ", why), round_abort);
  }
  ServerLog().info("member removed member={} host={} reason={} ({})", id,
                   ident.host_id(), why, DescribeMember(ident));
  last_departure_ = absl::StrCat(DescribeMember(ident), " ", why, " at ",
                                 absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", absl::Now(),
                                                  absl::UTCTimeZone()));
  departure_untold_ = true;
  departed_wait_mark_ = waits_.last_id();
  membership_.Remove(id);
  delta_rounds_.Forget(id);
  kv_.DropOwner(id);
  credentials_.Unbind(id);
  // The member's round stream ends with the reason, so a member that is
  // still alive (a long pause, a network partition) learns at once that it
  // is out instead of waiting for rounds it is no longer part of.
  auto s = streams_.find(id);
  if (s != streams_.end()) {
    RoundStream* stream = s->second;
    streams_.erase(s);
    stream->End(absl::NotFoundError(absl::StrCat("refitd removed member ", id, ": ", why)));
  }
  MembershipChanged();
}

void Coordinator::MembershipChanged() {
  const absl::Time now = absl::Now();
  if (!plan_dirty_) dirty_since_ = now;
  last_change_ = now;
  plan_dirty_ = true;
  // Announced by the next housekeeping tick: a burst of N registrations
  // costs one broadcast per tick, not N broadcasts to N streams. Until then
  // StartRound and AwaitPlan see plan_dirty_.
  epoch_announce_pending_ = true;
}

void Coordinator::AnnounceEpoch() {
  if (!epoch_announce_pending_) return;
  // While the plan is rebuilt, one announcement tells every member that its
  // plan is void; the next goes out with the new plan (ApplyPlan) or once
  // the membership is found incomplete, not once per sweep of a burst of
  // joins (each announcement writes to every member's stream).
  if (plan_dirty_ && announced_while_dirty_) return;
  epoch_announce_pending_ = false;
  announced_while_dirty_ = plan_dirty_;
  v1::RoundEvent e;
  e.set_kind(v1::RoundEvent::PLAN_CHANGED);
  e.set_epoch(membership_.epoch());
  Broadcast(e);
}

void Coordinator::Broadcast(const v1::RoundEvent& e) {
  auto shared = std::make_shared<const v1::RoundEvent>(e);
  for (auto& [id, s] : streams_) s->Push(shared);
}

// --- round streams ----------------------------------------------------------

absl::Status Coordinator::Watch(const std::string& member_id, const std::string& secret,
                                RoundStream* stream) {
  Locked l(this);
  if (stopping_ || membership_.Find(member_id) == nullptr) {
    return absl::NotFoundError("member_id: not registered");
  }
  REFIT_RETURN_IF_ERROR(CheckSecret(member_id, secret));
  auto old = streams_.find(member_id);
  if (old != streams_.end()) {
    RoundStream* prev = old->second;
    streams_.erase(old);
    prev->End(absl::AbortedError("replaced by a newer stream"));
  }
  streams_[member_id] = stream;
  // Tell a late watcher where things stand.
  v1::RoundEvent e;
  e.set_kind(v1::RoundEvent::PLAN_CHANGED);
  e.set_epoch(membership_.epoch());
  stream->Push(std::make_shared<const v1::RoundEvent>(e));
  if (rounds_.active() != nullptr) {
    e.set_kind(v1::RoundEvent::ROUND_STARTED);
    e.set_version(rounds_.active()->version);
    e.set_attempt(rounds_.active()->attempt);
    e.set_epoch(plan_epoch_);
    stream->Push(std::make_shared<const v1::RoundEvent>(e));
  }
  return absl::OkStatus();
}

void Coordinator::Unwatch(const std::string& member_id, RoundStream* stream,
                          const std::string& why) {
  Locked l(this);
  auto it = streams_.find(member_id);
  if (it == streams_.end() || it->second != stream) return;
  streams_.erase(it);
  if (!why.empty() && rounds_.IsParticipant(member_id)) {
    EndRound(false, absl::StrCat("member ", Describe(member_id), ": ", why),
             AbortReason::kMemberFailed);
  }
}

// --- waits and the key-value store -----------------------------------------

Coordinator::Locked::Locked(Coordinator* c) : c_(c) { c_->mu_.Lock(); }

Coordinator::Locked::~Locked() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  std::vector<std::function<void()>> answers;
  answers.swap(c_->answers_);
  c_->mu_.Unlock();
  for (auto& answer : answers) answer();
}

void Coordinator::RunAnswers() {
  if (answers_.empty()) return;
  std::vector<std::function<void()>> answers;
  answers.swap(answers_);
  mu_.Unlock();
  for (auto& answer : answers) answer();
  mu_.Lock();
}

// The callbacks below run where Waits or TrySatisfy answer a wait, always
// under mu_ (the analysis cannot see through std::function).
PlanDone Coordinator::Deferred(PlanDone done) {
  return [this, done = std::move(done)](absl::StatusOr<v1::AwaitPlanResponse> r)
             ABSL_NO_THREAD_SAFETY_ANALYSIS {
               answers_.push_back(
                   [done, r = std::move(r)]() mutable { done(std::move(r)); });
             };
}

KvDone Coordinator::Deferred(KvDone done) {
  return [this, done = std::move(done)](absl::StatusOr<std::string> r)
             ABSL_NO_THREAD_SAFETY_ANALYSIS {
               answers_.push_back(
                   [done, r = std::move(r)]() mutable { done(std::move(r)); });
             };
}

Coordinator::WaitId Coordinator::AwaitPlan(const v1::AwaitPlanRequest& req,
                                           absl::Time deadline, PlanDone answer) {
  Locked l(this);
  PlanDone done = Deferred(std::move(answer));
  if (stopping_) {
    done(absl::UnavailableError("refitd shutting down"));
    return 0;
  }
  // A member's plan slice and bootstrap are for the member alone.
  if (absl::Status s = CheckSecret(req.member_id(), req.member_secret()); !s.ok()) {
    done(s);
    return 0;
  }
  Waiter w;
  w.member_id = req.member_id();
  w.min_epoch = req.min_epoch();
  w.plan_done = std::move(done);
  w.deadline = deadline;
  if (TrySatisfy(w)) return 0;
  return waits_.Add(std::move(w));
}

Coordinator::WaitId Coordinator::KvGet(const v1::KvGetRequest& req, absl::Time deadline,
                                       KvDone answer, const std::string& caller) {
  Locked l(this);
  KvDone done = Deferred(std::move(answer));
  // Only members read the data-plane bootstrap (addresses, NCCL ids).
  absl::Status member = membership_.Find(req.member_id()) == nullptr
                            ? absl::PermissionDeniedError(absl::StrCat(
                                  "key ", req.key(), ": member_id '", req.member_id(),
                                  "' is not a registered member; only members read keys"))
                            : CheckSecret(req.member_id(), req.member_secret());
  if (!member.ok()) {
    done(member);
    return 0;
  }
  Waiter w;
  w.key = req.key();
  w.kv_done = std::move(done);
  w.deadline = deadline;
  w.caller = caller;
  w.member_id = req.member_id();
  w.planned = member_plans_.count(req.member_id()) > 0;
  if (TrySatisfy(w)) return 0;
  if (!req.wait() || stopping_) {
    w.kv_done(absl::NotFoundError(absl::StrCat("key ", req.key(), " is not set")));
    return 0;
  }
  if (absl::Status room = waits_.KvRoom(
          w, {options_.max_kv_waits, options_.max_kv_waits_per_caller,
              options_.max_kv_waits_per_member});
      !room.ok()) {
    w.kv_done(room);
    return 0;
  }
  return waits_.Add(std::move(w));
}

void Coordinator::CancelWait(WaitId id) {
  Locked l(this);
  waits_.Cancel(id);
}

absl::Status Coordinator::KvSet(const v1::KvSetRequest& req) {
  if (req.key().empty()) return absl::InvalidArgumentError("key: empty");
  Locked l(this);
  if (membership_.Find(req.member_id()) == nullptr) {
    return absl::PermissionDeniedError(absl::StrCat(
        "key ", req.key(), ": member_id '", req.member_id(),
        "' is not a registered member; only members set keys"));
  }
  REFIT_RETURN_IF_ERROR(CheckSecret(req.member_id(), req.member_secret()));
  REFIT_RETURN_IF_ERROR(kv_.Set(req.member_id(), req.key(), req.value()));
  waits_.WakeKey(req.key(),
                 [this](Waiter& w) ABSL_NO_THREAD_SAFETY_ANALYSIS { return TrySatisfy(w); });
  return absl::OkStatus();
}

bool Coordinator::TrySatisfy(Waiter& w) {
  if (w.kv_done) {
    const std::string* value = kv_.Find(w.key);
    if (value == nullptr) return false;
    w.kv_done(*value);
    return true;
  }
  const Member* m = membership_.Find(w.member_id);
  if (m == nullptr) {
    w.plan_done(absl::NotFoundError(absl::StrCat(
        "member ", w.member_id, " is not registered (left or expired)")));
    return true;
  }
  if (!refusals_.empty()) {
    // Only a refusal of the member's own job fails its wait.
    if (absl::Status refused = refusals_.AsPlanError(m->reg.identity().job()); !refused.ok()) {
      w.plan_done(refused);
      return true;
    }
  }
  if (plan_dirty_ || plan_epoch_ < w.min_epoch || plan_epoch_ != membership_.epoch()) {
    return false;
  }
  if (plan_incomplete_) return false;
  if (!plan_status_.ok()) {
    w.plan_done(plan_status_);
    return true;
  }
  auto it = member_plans_.find(w.member_id);
  if (it == member_plans_.end()) return false;  // e.g. its engine is incomplete
  const MemberPlan& mp = it->second;
  const BuiltPlan& built = **current_plan_;
  v1::AwaitPlanResponse resp = mp.head;
  resp.set_slice(mp.trainer ? built.trainer_slices[mp.index]
                            : built.engine_slices[mp.index]);
  w.plan_done(std::move(resp));
  return true;
}

void Coordinator::FailPlanWaiters() {
  departure_untold_ = false;
  waits_.Wake([this](Waiter& w) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (w.kv_done || w.id > departed_wait_mark_) return false;  // parked later
    if (membership_.Find(w.member_id) == nullptr) return TrySatisfy(w);  // NOT_FOUND
    w.plan_done(plan_status_);
    return true;
  });
}

void Coordinator::WakeWaiters() {
  waits_.Wake([this](Waiter& w) ABSL_NO_THREAD_SAFETY_ANALYSIS { return TrySatisfy(w); });
}

// --- housekeeping and planning ---------------------------------------------

void Coordinator::HousekeepingLoop() {
  Locked l(this);
  while (!stopping_) {
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), options_.tick);
    if (stopping_) break;
    Tick(absl::Now());
    RunAnswers();
  }
}

void Coordinator::Tick(absl::Time now) {
  // The passes over every stream (the epoch announcement) and every member
  // (expiry) hold the lock for milliseconds with thousands of members:
  // they run every twentieth of the heartbeat timeout (at most 100 ms, at
  // least a tick), not every tick, so a burst of registrations is not
  // held up behind them.
  if (now >= next_sweep_) {
    next_sweep_ =
        now + std::max(options_.tick,
                       std::min(options_.heartbeat_timeout / 20, absl::Milliseconds(100)));
    AnnounceEpoch();
    refusals_.Expire(now, options_.heartbeat_timeout);
    for (const std::string& id : membership_.Expired(now, options_.heartbeat_timeout)) {
      RemoveMember(id,
                   absl::StrCat("expired: stopped heart-beating for more than ",
                                absl::FormatDuration(options_.heartbeat_timeout)),
                   AbortReason::kMemberExpired);
    }
  }
  const Rounds::Active* round = rounds_.active();
  if (round != nullptr && now - round->started > options_.round_timeout) {
    EndRound(false,
             absl::StrCat("round timed out after ",
                          absl::FormatDuration(options_.round_timeout)),
             AbortReason::kTimeout);
  }
  waits_.Expire(now, plan_incomplete_ && !plan_status_.ok()
                         ? std::string(plan_status_.message())
                         : std::string());
  MaybePlan(now);
}

void Coordinator::MaybePlan(absl::Time now) {
  // Plan between rounds only, once the membership has settled: a burst of
  // joins is planned once, not once per join (but never later than
  // plan_settle_max after the first unplanned change).
  if (!plan_dirty_ || planning_ || rounds_.active() != nullptr) return;
  if (now - last_change_ < options_.plan_settle &&
      now - dirty_since_ < options_.plan_settle_max) {
    return;
  }
  std::optional<PlanInput> input = membership_.Complete();
  if (!input.has_value()) {
    plan_dirty_ = false;
    plan_epoch_ = membership_.epoch();
    plan_status_ = absl::UnavailableError(
        last_departure_.empty() ? std::string("membership incomplete")
                                : absl::StrCat("membership incomplete: ", last_departure_));
    plan_incomplete_ = true;
    announced_while_dirty_ = false;
    epoch_announce_pending_ = true;
    member_plans_.clear();
    plan_fingerprint_.clear();
    if (departure_untold_) FailPlanWaiters();
    return;  // waits parked from now on wait for a member to join
  }
  departure_untold_ = false;  // the waiters get the plan of the new membership
  if (PlanCache::Entry cached = plan_cache_.Find(input->fingerprint)) {
    ApplyPlan(*input, std::move(cached), /*seconds=*/-1);
    return;
  }
  planning_ = true;
  plan_job_ = std::move(input);
}

void Coordinator::PlannerLoop() {
  Locked l(this);
  while (true) {
    mu_.AwaitWithTimeout(absl::Condition(this, &Coordinator::PlanJobOrStopping),
                         absl::Seconds(1));
    if (stopping_) return;
    if (!plan_job_.has_value()) continue;
    auto shared_input = std::make_shared<const PlanInput>(std::move(*plan_job_));
    const PlanInput& input = *shared_input;
    plan_job_.reset();
    mu_.Unlock();  // the plan function may take seconds
    const absl::Time start = absl::Now();
    // Delta rounds do not run on the colocated pull path: refused here, by
    // name, rather than every round going dense unannounced.
    const absl::Status refused =
        options_.delta ? CheckDeltaTransports(input) : absl::OkStatus();
    std::optional<absl::StatusOr<BuiltPlan>> result =
        refused.ok()
            ? RunPlanFunctionOnItsOwnThread(options_.plan_function, shared_input, stop_requested_)
            : std::optional<absl::StatusOr<BuiltPlan>>(refused);
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    mu_.Lock();
    planning_ = false;
    if (stopping_ || !result.has_value()) {
      if (!result.has_value()) {
        ServerLog().info("plan build abandoned epoch={} seconds={:.6f} reason=refitd stopping",
                         input.epoch, seconds);
      }
      return;
    }
    if (input.epoch != membership_.epoch()) {
      ServerLog().info(
          "plan dropped epoch={} seconds={:.6f} reason=the membership changed (epoch {})",
          input.epoch, seconds, membership_.epoch());
      continue;  // housekeeping plans the new membership
    }
    auto entry = std::make_shared<const absl::StatusOr<BuiltPlan>>(std::move(*result));
    plan_cache_.Insert(input.fingerprint, entry);
    metrics_.PlanBuilt(seconds);
    metrics_.SetPlanCacheBytes(plan_cache_.bytes());
    ApplyPlan(input, std::move(entry), seconds);
    RunAnswers();
  }
}

void Coordinator::ApplyPlan(const PlanInput& input, PlanCache::Entry entry,
                            double seconds) {
  const absl::StatusOr<BuiltPlan>& built = *entry;
  current_plan_ = std::move(entry);
  last_departure_.clear();  // the membership is complete again
  plan_dirty_ = false;
  plan_incomplete_ = false;
  announced_while_dirty_ = false;
  epoch_announce_pending_ = true;  // the epoch of the new plan
  plan_epoch_ = input.epoch;
  // What members and status see: the plan's own fingerprint (the
  // registrations' one is the same for plans built with other planner
  // options, e.g. another staging budget).
  plan_fingerprint_ =
      built.ok() && !built->fingerprint.empty() ? built->fingerprint : input.fingerprint;
  member_plans_.clear();
  const bool cached = seconds < 0;  // from the plan cache
  seconds = std::max(seconds, 0.0);
  if (!built.ok()) {
    // Cut: a plan error naming every one of a million buffers is not kept
    // (and sent by every GetStatus and AwaitPlan) whole.
    plan_status_ = BoundedStatus(AnnotateStatus(built.status(), "building the plan"));
    metrics_.PlanFailed();
    ServerLog().warn("plan failed epoch={} seconds={:.6f} cached={} reason={}",
                     input.epoch, seconds, cached ? "yes" : "no", plan_status_.ToString());
  } else {
    plan_status_ = absl::OkStatus();
    member_plans_ = AssembleMemberPlans(input, *built, plan_fingerprint_, options_.kv_prefix);
    BoundReports();
    ServerLog().info(
        "plan ready plan={} epoch={} seconds={:.6f} cached={} trainers={} engines={} "
        "bytes={} predicted_seconds={:.6g}",
        plan_fingerprint_, input.epoch, seconds, cached ? "yes" : "no",
        input.trainer.size(), input.engine.size(), built->bytes, built->predicted_seconds);
    if (options_.delta && !built->host_delta_note.empty()) {
      ServerLog().info("plan {}: {}", plan_fingerprint_, built->host_delta_note);
    }
  }
  WakeWaiters();
}

}  // namespace refit

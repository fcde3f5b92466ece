// Coordinator: refitd's state and rules, without any RPC framework. It
// admits members, expires the silent ones, plans each complete membership
// (on its own planner thread, so that housekeeping never waits for a plan),
// hands plans to waiting members, runs weight-version rounds, and keeps the
// data-plane bootstrap key-value store. The RPC service (refit_server.cc)
// translates each call into one method here.
//
// Threads and callbacks: every method may be called from any thread. Waits
// (AwaitPlan, KvGet) are answered through callbacks that the coordinator
// calls after releasing its lock (a burst of plan answers, one per member,
// holds up no registration or heartbeat); they may call back into the
// coordinator. Round streams are written with the lock held: a stream's
// calls must not block and must not call back into the coordinator.
#ifndef REFIT_SERVER_COORDINATOR_H_
#define REFIT_SERVER_COORDINATOR_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/refit_service.pb.h"
#include "server/coordinator_options.h"
#include "server/kv_table.h"
#include "server/member_credentials.h"
#include "server/membership.h"
#include "server/metrics.h"
#include "server/plan_assembly.h"
#include "server/plan_cache.h"
#include "server/plan_function.h"
#include "server/refusals.h"
#include "server/delta_rounds.h"
#include "server/rounds.h"
#include "server/waits.h"

namespace refit {

// A round event as queued on round streams: one copy shared by every
// stream it is broadcast to, however long its abort reason.
using SharedRoundEvent = std::shared_ptr<const v1::RoundEvent>;

// Where the coordinator sends a member's round events (the member's
// WatchRounds stream). Both methods are called with the coordinator's lock
// held and must not block.
class RoundStream {
 public:
  virtual ~RoundStream() = default;
  // Queues `event` for the member.
  virtual void Push(SharedRoundEvent event) = 0;
  // Ends the stream with `status` after the queued events.
  virtual void End(absl::Status status) = 0;
};

class Coordinator {
 public:
  using Options = CoordinatorOptions;  // coordinator_options.h

  // Names a wait for CancelWait; 0 names none. The answer callbacks
  // (PlanDone, KvDone: waits.h) are called exactly once, without the lock.
  using WaitId = Waits::Id;

  // Starts the housekeeping and planner threads. Fails with INVALID_ARGUMENT
  // when options.plan_function is not set.
  static absl::StatusOr<std::unique_ptr<Coordinator>> Create(Options options);

  // Stops (see Stop) and joins the threads.
  ~Coordinator();

  // Returns refitd's metrics (rounds, reports, plans; the listener adds
  // refused calls).
  ServerMetrics& metrics() { return metrics_; }

  // Returns what the metrics read at scrape time: the members counted by
  // side ("trainer", "engine") and state ("idle", "in_round": in the
  // running round and not reported yet, "reported"), and each registered
  // engine's committed version, torn or not, and last commit time.
  ServerMetrics::State MetricsState();

  // Aborts a round in flight ("refitd shutting down", members told), ends
  // every wait (UNAVAILABLE "refitd shutting down") and every round
  // stream (UNAVAILABLE), refuses new waits, and joins the threads. A plan
  // being built (on a thread of its own) is waited for at most 2 s, then
  // left to finish without refitd (the default plan function is told to
  // cancel through DefaultPlanOptions::cancel). Idempotent.
  void Stop();

  // Admits a member and binds it to `secret` (empty: a new random one),
  // returned in the response, until it leaves or expires
  // (member_credentials.h). Every later call acting for the member or
  // reading its data (AwaitPlan, StartRound, Watch, Report, Heartbeat,
  // Leave, KvSet, KvGet) must carry it, or fails with PERMISSION_DENIED
  // naming the member. Fails with FAILED_PRECONDITION on another protocol
  // version, INVALID_ARGUMENT on a bad registration or one inconsistent
  // with the members there (or a secret over kMaxMemberSecretBytes),
  // RESOURCE_EXHAUSTED when a new member would pass options.max_members,
  // PERMISSION_DENIED when options.job_key is set and `job_key` is not it,
  // when `secret` was retired for this member, or when the member is
  // registered with another secret and refitd has no job key (UNAVAILABLE
  // instead while that member has no round stream: it may expire). With the job
  // key, a registration with another secret takes the member over (its
  // restarted process): the old secret is retired and the old round stream
  // ends PERMISSION_DENIED. A member re-registering with other metadata, or
  // taken over, aborts a round it takes part in.
  absl::StatusOr<v1::RegisterResponse> Register(const v1::Registration& reg,
                                                std::string secret = "",
                                                const std::string& job_key = "");

  // Records that the member `reg` names cannot join, and why (see
  // RegisterRequest.refusal and refusals.h): every plan wait of a member of
  // its job, parked or later, then ends with FAILED_PRECONDITION naming it
  // and `reason` (control bytes escaped) until that member registers or
  // options.heartbeat_timeout passes. Fails as
  // Register does on a malformed registration, a wrong job key or a
  // retired secret; FAILED_PRECONDITION when the member is registered now;
  // RESOURCE_EXHAUSTED past max_members refusals, or Refusals::kMaxPerJob
  // of its job. Returns the member id.
  absl::StatusOr<v1::RegisterResponse> Refuse(const v1::Registration& reg,
                                              const std::string& reason,
                                              const std::string& secret = "",
                                              const std::string& job_key = "");

  // Answers with the member's plan (PERMISSION_DENIED when req's
  // member_secret is not the member's) once a plan of at least min_epoch is
  // current for the membership now: `done` gets the plan, the plan error
  // (the plan function's code), NOT_FOUND when the member is not (or no
  // longer) registered, DEADLINE_EXCEEDED at `deadline`, UNAVAILABLE when
  // stopping, CANCELLED by CancelWait. When a member leaves or expires and
  // the membership is then incomplete, the waits parked at that moment end
  // at once (within plan_settle_max) with UNAVAILABLE "membership
  // incomplete: trainer rank 1 left at <time>" (or "... expired: stopped
  // heart-beating for more than <timeout> at <time>"); a wait begun later
  // waits for a member to join (a replacement, or the one that left coming
  // back), and says why at its deadline. Returns the id of the wait, or 0 when
  // `done` was already called.
  WaitId AwaitPlan(const v1::AwaitPlanRequest& req, absl::Time deadline,
                   PlanDone done);

  // Answers with the value of a key to a registered member (PERMISSION_DENIED
  // when req's member_id is not one, or its member_secret is not the
  // member's): at once when set; NOT_FOUND when not set
  // and `req.wait()` is false (or stopping); else when it is set, or
  // DEADLINE_EXCEEDED at `deadline`, CANCELLED by CancelWait;
  // RESOURCE_EXHAUSTED at once when options.max_kv_waits_per_member of
  // the member are parked, or, for a member outside the current plan,
  // options.max_kv_waits of such members or max_kv_waits_per_caller of
  // `caller` (the caller's address) are.
  // Returns the id of the wait, or 0 when `done` was already called.
  WaitId KvGet(const v1::KvGetRequest& req, absl::Time deadline, KvDone done,
               const std::string& caller = "");

  // Ends wait `id` with CANCELLED if it is still waiting.
  void CancelWait(WaitId id);

  // Sets a key for req.member_id() and wakes its waiters. INVALID_ARGUMENT
  // on an empty key; KvTable::Set's PERMISSION_DENIED (another member's key)
  // and RESOURCE_EXHAUSTED (quota).
  absl::Status KvSet(const v1::KvSetRequest& req);

  // Starts round req.version(): a version above the last, or the last one
  // again after its round aborted (the next attempt: the engines it tore
  // are made whole when it commits). The response's attempt is the one
  // running; already_started when that version runs or committed (an
  // idempotent retry). Fails with NOT_FOUND (member unknown),
  // PERMISSION_DENIED (not a trainer), FAILED_PRECONDITION (req.plan_epoch
  // is set and is not the membership's epoch, another round runs, or no
  // valid plan), INVALID_ARGUMENT naming `version` (below the last, or outside
  // [1, kMaxRoundVersion = 2^53]),
  // UNAVAILABLE (the plan for a changed membership is pending, or a
  // participant has no round stream yet: retry). With req.next_version the
  // version is one above the last started (response.version says which).
  // A refusal is logged (UNAVAILABLE, which trainers retry, at debug level).
  absl::StatusOr<v1::StartRoundResponse> StartRound(const v1::StartRoundRequest& req);

  // Records a participant's outcome; all successes commit the round, one
  // failure aborts it (its reason cut to kMaxReasonBytes). For a round that
  // is not running (or an earlier attempt, req.attempt, of the running
  // version): OK if it committed, ABORTED if it aborted,
  // FAILED_PRECONDITION if unknown or when the member is not a participant;
  // INVALID_ARGUMENT naming the field for a success whose figures are
  // absurd (Rounds::CheckReport: negative bytes, seconds NaN, infinite or
  // negative, a byte sum that would overflow), which the round ignores.
  absl::Status Report(const v1::ReportRequest& req);

  // OK when a Report request of `bytes` serialized bytes may be parsed: at
  // most its other fields' text limits (80 KiB in all) plus room for as
  // many digest parts (1,100 bytes each, a tensor name at its 1 KiB limit)
  // as the largest slice of the last plan built writes; any size while a
  // plan slice has no bounds. INVALID_ARGUMENT naming `digests` and both
  // sizes otherwise. Takes no lock: refitd calls it before parsing.
  absl::Status CheckReportSize(size_t bytes) const;

  // Records a heartbeat and, when it names the running round, the bytes
  // the member moved of it so far (RoundSummary.live). NOT_FOUND when the
  // member is not registered; INVALID_ARGUMENT naming round_bytes when
  // they are negative or above what the member's plan slice moves (the
  // heartbeat still counts; the figure is ignored).
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& req);

  // Removes the member (aborting a round it takes part in); OK when unknown.
  absl::Status Leave(const v1::LeaveRequest& req);

  // Returns an engine's committed and torn versions (0 when none).
  v1::EngineStateResponse GetEngineState(const v1::EngineStateRequest& req);

  // Returns members, plan, rounds and engines as this coordinator sees them.
  v1::StatusResponse GetStatus();

  // Attaches `stream` as member_id's round stream (PERMISSION_DENIED when
  // `secret` is not the member's) (replacing an older one,
  // which ends ABORTED) and pushes PLAN_CHANGED with the current epoch (and
  // ROUND_STARTED when a round runs). Fails with NOT_FOUND when the member is
  // not registered or the coordinator is stopping; then `stream` is not kept.
  absl::Status Watch(const std::string& member_id, const std::string& secret,
                     RoundStream* stream);

  // Detaches `stream` (no-op when it is not attached). A non-empty `why`
  // means it dropped: a round its member takes part in aborts.
  void Unwatch(const std::string& member_id, RoundStream* stream,
               const std::string& why);

 private:
  // Holds mu_ for a scope; on leaving it releases mu_, then runs the wait
  // answers owed (answers_), so that no answer runs under the lock.
  class ABSL_SCOPED_LOCKABLE Locked {
   public:
    explicit Locked(Coordinator* c) ABSL_EXCLUSIVE_LOCK_FUNCTION(c->mu_);
    ~Locked() ABSL_UNLOCK_FUNCTION();
    Locked(const Locked&) = delete;
    Locked& operator=(const Locked&) = delete;

   private:
    Coordinator* const c_;
  };
  // `done` as a wait's callback: called under mu_ (by Waits or
  // TrySatisfy), it queues the answer in answers_ for Locked or
  // RunAnswers to run once mu_ is released.
  PlanDone Deferred(PlanDone done);
  KvDone Deferred(KvDone done);
  // Runs the answers owed with mu_ released for the while (the threads
  // that hold mu_ across a loop: housekeeping, planner).
  void RunAnswers() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // StartRound without its log line for a refusal.
  absl::StatusOr<v1::StartRoundResponse> TryStartRound(const v1::StartRoundRequest& req);
  explicit Coordinator(Options options);

  void HousekeepingLoop();
  void PlannerLoop();
  bool PlanJobOrStopping() const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return stopping_ || plan_job_.has_value();
  }
  void Tick(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybePlan(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplyPlan(const PlanInput& input, PlanCache::Entry entry, double seconds)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets the bound CheckReportSize applies from member_plans_.
  void BoundReports() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MembershipChanged() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AnnounceEpoch() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Broadcast(const v1::RoundEvent& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every participant of the running round reported done and it has staged
  // engine members: tells every member (ROUND_STAGED) that they apply now.
  void BeginApply() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A staged member's report that its live buffers hold the running round
  // (Rounds::RecordApplied's errors); commits the round once every staged
  // member applied.
  absl::Status ReportApplied(const v1::ReportRequest& req) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Heartbeat's round figure (see Heartbeat).
  absl::Status RecordLiveBytes(const v1::HeartbeatRequest& req)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Returns the running round's participants' bytes so far (RoundSummary.live).
  void FillLiveBytes(const Rounds::Active& a, v1::RoundSummary* s) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the running round (no-op without one); `abort_reason` labels an
  // abort in the metrics.
  void EndRound(bool committed, const std::string& reason, AbortReason abort_reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends member `id`'s part as its old process: aborts a round it takes
  // part in and ends its round stream with PERMISSION_DENIED.
  void TakeOver(const std::string& id, const v1::MemberIdentity& ident)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveMember(const std::string& id, const std::string& why,
                    AbortReason round_abort) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool TrySatisfy(Waiter& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WakeWaiters() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends every plan wait parked when the last member departed
  // (departed_wait_mark_) with plan_status_ (the membership is incomplete,
  // and why), or NOT_FOUND for a member no longer registered.
  void FailPlanWaiters() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string Describe(const std::string& member_id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // OK when member_id is unknown or `secret` is its secret; else
  // PERMISSION_DENIED naming the member.
  absl::Status CheckSecret(const std::string& member_id, const std::string& secret) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  ServerMetrics metrics_;
  std::thread housekeeper_;
  std::thread planner_;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  Membership membership_ ABSL_GUARDED_BY(mu_);
  Rounds rounds_ ABSL_GUARDED_BY(mu_);
  DeltaRounds delta_rounds_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, RoundStream*> streams_ ABSL_GUARDED_BY(mu_);
  Waits waits_ ABSL_GUARDED_BY(mu_);
  // Wait answers given under mu_, run once it is released (Locked).
  std::vector<std::function<void()>> answers_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> stop_requested_{false};  // set first thing by Stop
  // The most digest parts a slice of the last plan built writes (-1: no
  // bound); CheckReportSize reads it without the lock.
  std::atomic<int64_t> max_report_parts_{0};
  KvTable kv_ ABSL_GUARDED_BY(mu_);
  MemberCredentials credentials_ ABSL_GUARDED_BY(mu_);
  Refusals refusals_ ABSL_GUARDED_BY(mu_);

  // The plan and its schedule. plan_dirty_: the membership changed since the
  // current plan; planning_: a PlanInput is queued in plan_job_ or being
  // built by the planner thread.
  bool epoch_announce_pending_ ABSL_GUARDED_BY(mu_) = false;
  // An epoch was announced since the plan became dirty (AnnounceEpoch).
  bool announced_while_dirty_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_change_ ABSL_GUARDED_BY(mu_);  // last membership change
  // The next pass over every member and stream (Tick).
  absl::Time next_sweep_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time dirty_since_ ABSL_GUARDED_BY(mu_);  // first change not planned
  bool plan_dirty_ ABSL_GUARDED_BY(mu_) = false;
  bool planning_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<PlanInput> plan_job_ ABSL_GUARDED_BY(mu_);
  bool plan_incomplete_ ABSL_GUARDED_BY(mu_) = true;
  // The last member that left or expired, and when (cleared by a complete
  // plan): why a membership is incomplete, told to plan waiters and status.
  std::string last_departure_ ABSL_GUARDED_BY(mu_);
  // A member left or expired since the last plan or failed plan waits: if
  // the membership is then incomplete, the plan waits parked now fail.
  bool departure_untold_ ABSL_GUARDED_BY(mu_) = false;
  Waits::Id departed_wait_mark_ ABSL_GUARDED_BY(mu_) = 0;  // last wait parked then
  int64_t plan_epoch_ ABSL_GUARDED_BY(mu_) = -1;  // epoch of the plan below
  absl::Status plan_status_ ABSL_GUARDED_BY(mu_) = absl::UnavailableError("no plan yet");
  std::string plan_fingerprint_ ABSL_GUARDED_BY(mu_);
  PlanCache::Entry current_plan_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, MemberPlan> member_plans_ ABSL_GUARDED_BY(mu_);
  PlanCache plan_cache_ ABSL_GUARDED_BY(mu_);
};

}  // namespace refit

#endif  // REFIT_SERVER_COORDINATOR_H_

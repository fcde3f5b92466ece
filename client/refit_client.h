// RefitClient: the control side of the client library, used the same way by
// trainer ranks and engine workers: connect, register buffers, await the
// plan, then per round wait for / start round N, run the data plane, report,
// await the outcome. Every call has a deadline and returns a Status; a
// background thread sends heartbeats and another reads the round stream.
#ifndef REFIT_CLIENT_REFIT_CLIENT_H_
#define REFIT_CLIENT_REFIT_CLIENT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/member_secret.h"
#include "proto/plan.pb.h"
#include "proto/refit_service.grpc.pb.h"

namespace refit {

class RefitClient {
 public:
  struct Options {
    std::string target;             // "host:port" (or a gRPC "dns:", "unix:" target)
    // Sent as "authorization: Bearer <token>"; surrounding whitespace (a
    // token file's newline) is stripped, as refitd strips its own.
    std::string bearer_token;
    // The job key refitd was given (--job_key_file), sent with Register:
    // such a refitd admits only members that carry it, and a registration
    // that does takes its member's place (this member's restarted process).
    std::string job_key;
    bool use_tls = false;
    std::string root_ca_pem;        // CA that signed refitd's certificate
    std::string client_cert_pem;    // for mutual TLS
    std::string client_key_pem;
    std::string tls_server_name;    // override of the name checked in the cert
    absl::Duration rpc_timeout = absl::Seconds(10);  // per non-waiting call
    absl::Duration heartbeat_interval = absl::Seconds(1);
    // refitd not answering heartbeats (each with this deadline) for this
    // long: round waits fail with UNAVAILABLE "refitd at <target> did not
    // answer heartbeats for ...".
    absl::Duration refitd_timeout = absl::Seconds(10);
    // How long Connect (and CheckReachable) wait for the connection to
    // refitd: a stopped refitd fails calls with UNAVAILABLE after this.
    absl::Duration connect_timeout = absl::Seconds(2);
    // The connection's liveness: an HTTP/2 ping every keepalive_interval;
    // one not answered within keepalive_timeout (a frozen, hung or
    // partitioned refitd) closes the connection, and every call in flight
    // on it (AwaitPlan, KvGet, the round stream, hence WaitForRound and
    // AwaitOutcome) fails UNAVAILABLE then, not at its own deadline.
    absl::Duration keepalive_interval = absl::Seconds(1);
    absl::Duration keepalive_timeout = absl::Seconds(2);
  };

  // Returns a connected client. Fails at once with INVALID_ARGUMENT naming
  // the target when it is not "host:port" (no port, a URL such as
  // "http://host:port") or when the token holds a byte a gRPC header
  // cannot carry (the token itself is never put in a message); with
  // UNAVAILABLE naming the target and why ("connection refused", ...) when
  // the channel is not ready within connect_timeout.
  static absl::StatusOr<std::unique_ptr<RefitClient>> Connect(Options options);

  // Returns a channel to options.target made as Connect makes its own (TLS
  // from use_tls and the PEM fields, message limits, reconnect backoff,
  // keepalive pings), not connected yet: for callers of another service on
  // refitd (`refit health`: grpc.health.v1).
  static std::shared_ptr<grpc::Channel> NewChannel(const Options& options);

  // The checks Connect makes on `options`, and the token it sends
  // (`*token`: the bearer token without surrounding whitespace).
  // INVALID_ARGUMENT as Connect.
  static absl::Status CheckOptions(const Options& options, std::string* token);

  ~RefitClient();  // stops the background threads (bounded)

  // OK when the connection to refitd is up or comes up within
  // min(connect_timeout, `deadline`); UNAVAILABLE naming the target and why
  // ("connection refused", ...) otherwise. Tells an UNAVAILABLE of refitd's
  // own (a plan being built: retry) from a refitd that is gone (rejoin).
  absl::Status CheckReachable(absl::Time deadline);

  // Registers this member (idempotent on retry), opens the round stream and
  // starts heartbeats; returns only once the stream delivered its first
  // event, so no round started afterwards can be missed. While refitd
  // answers UNAVAILABLE (e.g. this member's previous process still holds
  // its identity until refitd expires it) it retries, for up to the longer
  // of rpc_timeout and connect_timeout. Returns the member id; fails with
  // the server's status (INVALID_ARGUMENT naming the field,
  // UNAUTHENTICATED, PERMISSION_DENIED when another live process holds
  // this member's identity or the job key is wrong, UNAVAILABLE ...).
  absl::StatusOr<std::string> Register(const v1::Registration& registration);

  // Tells refitd that the member `registration` names cannot join, and why
  // (RegisterRequest.refusal): the members waiting for a plan then fail at
  // once with FAILED_PRECONDITION naming it and `reason`. Registers nothing
  // and opens no stream. Fails with refitd's status (PERMISSION_DENIED for
  // a wrong job key, FAILED_PRECONDITION when the member is registered, ...).
  absl::Status Refuse(const v1::Registration& registration, const std::string& reason,
                      absl::Time deadline);

  // Registers again, with what the last successful Register sent, once
  // refitd has forgotten this member: it restarted (refitd keeps no state
  // across restarts; the members' registrations rebuild it), or it expired
  // the member after missed heartbeats. Either way WaitForRound /
  // AwaitOutcome return UNAVAILABLE. Stops the old stream and heartbeats,
  // retries while refitd is unreachable or answers UNAVAILABLE, then
  // reopens the round stream. Round bookkeeping starts afresh: rounds
  // announced before are forgotten, PlanChanged() is true, and the next
  // AwaitPlan returns the plan of the new membership. FAILED_PRECONDITION
  // when no Register succeeded before; UNAVAILABLE naming the target and
  // the last error when refitd is not back by `deadline`; refitd's status
  // for anything else (e.g. FAILED_PRECONDITION for another protocol).
  absl::Status Rejoin(absl::Time deadline);

  // Returns this member's plan slice + bootstrap for the newest membership
  // epoch this client has heard of. Fails with the planner's status when the
  // plan is invalid, DEADLINE_EXCEEDED when no plan came by `deadline`.
  absl::StatusOr<v1::AwaitPlanResponse> AwaitPlan(absl::Time deadline);

  // The slice of an AwaitPlan response, parsed. INVALID_ARGUMENT when its
  // bytes are not a PlanProto.
  static absl::StatusOr<v1::PlanProto> Slice(const v1::AwaitPlanResponse& r);

  // True when the membership changed since the last AwaitPlan, or a round
  // started on a newer plan than the one it returned (call AwaitPlan again
  // before the next round).
  bool PlanChanged();

  // The membership epoch of the plan the last AwaitPlan returned (-1: none),
  // and the epoch of the plan round `version` runs (NOT_FOUND when this
  // client has not seen the round start).
  int64_t plan_epoch();
  absl::StatusOr<int64_t> RoundEpoch(int64_t version);

  // How round `version` runs, as its ROUND_STARTED said (docs/delta.md):
  // per engine rank the version a delta may be sent against (-1: dense;
  // empty: every rank dense), and whether members digest the round.
  // Default (both empty/false) for a round not seen to start.
  struct RoundMode {
    std::vector<int64_t> delta_base;
    bool verify = false;
    bool delta_plane = false;  // refitd runs delta or verified rounds
  };
  RoundMode RoundModeOf(int64_t version);

  // The attempt of round `version` this client saw start last: 1 for its
  // first run, k after k-1 aborted runs of the same version; 0 when it has
  // not seen the round start.
  int32_t RoundAttempt(int64_t version);

  // Starts round `version` (trainer members), naming the epoch of the plan
  // the last AwaitPlan returned. OK also when another trainer rank started
  // it already, or when it committed. The last version again after its
  // round aborted runs it again (the next attempt): every member's
  // WaitForRound returns it once more, and its commit makes the engines it
  // tore whole. FAILED_PRECONDITION/INVALID_ARGUMENT from the server (that
  // plan is stale: AwaitPlan and prepare again; round running, version not
  // increasing, no valid plan),
  // UNAVAILABLE (retry) while a new plan is being built or while a
  // participant has no open round stream (it just registered, or it died and
  // has not expired yet).
  absl::Status StartRound(int64_t version, absl::Time deadline);

  // Starts the next version, one above the last round refitd started
  // (StartRoundRequest.next_version), and returns it; fails as StartRound.
  // A run that starts again needs no count of its own this way.
  absl::StatusOr<int64_t> StartNextRound(absl::Time deadline);

  // Returns the version of the next round this member has not yet seen
  // start (a version run again after its abort counts as a new round). DEADLINE_EXCEEDED when none starts by `deadline`, UNAVAILABLE if
  // the stream broke or refitd did not answer heartbeats for
  // options.refitd_timeout.
  absl::StatusOr<int64_t> WaitForRound(absl::Time deadline);

  // The round whose data plane runs now: each heartbeat sends `bytes()`
  // (what it moved so far) with round `version`, attempt `attempt`
  // (HeartbeatRequest.round_bytes) for refitd's status. An empty `bytes`
  // (or version 0): no round runs. `bytes` is called from the heartbeat
  // thread and must stay callable until replaced.
  void SetLiveRound(int64_t version, int32_t attempt, std::function<int64_t()> bytes);

  // A member's figures of one round, as refitd logs and exports them.
  struct RoundFigures {
    int64_t bytes = 0;               // bytes moved (the larger of sent, received)
    double seconds = 0;              // the data plane's time
    int64_t peak_staging_bytes = 0;  // staging and scratch held (RunStats)
    std::vector<v1::DigestPart> digests;  // a verified round's digest parts
    uint32_t digest_scheme = 0;           // their definition (kDigestScheme)
    double digest_seconds = 0;            // of `seconds`, spent digesting
    // A staged engine member: the round is in its staging, its live
    // buffers untouched (it applies after ROUND_STAGED, ReportApplied).
    bool staged = false;
  };

  // Report this member's part of round `version`, attempt `attempt` (0:
  // the newest attempt this client saw start): done with its figures, or
  // failed with a reason (its first 4 KiB are sent). Return refitd's
  // answer (Coordinator::Report: ABORTED when the round already aborted or
  // the attempt is over, FAILED_PRECONDITION when this member is not a
  // participant) or UNAVAILABLE / DEADLINE_EXCEEDED.
  absl::Status ReportDone(int64_t version, const RoundFigures& figures,
                          absl::Time deadline, int32_t attempt = 0);
  absl::Status ReportFailed(int64_t version, const std::string& reason,
                            absl::Time deadline, int32_t attempt = 0);

  // A staged engine member's second report of round `version`: its live
  // buffers hold the round now, written in `pause_seconds`. Returns
  // refitd's answer (FAILED_PRECONDITION when the round is not applying or
  // this member is not staged in it; ABORTED when it aborted) or
  // UNAVAILABLE / DEADLINE_EXCEEDED.
  absl::Status ReportApplied(int64_t version, double pause_seconds, absl::Time deadline,
                             int32_t attempt = 0);
  // Before it writes its live buffers: OK while the round runs (refitd
  // counts the engine torn should it abort from now on), ABORTED once it
  // ended (the live buffers must then stay as they are), as ReportApplied.
  absl::Status ReportApplying(int64_t version, absl::Time deadline, int32_t attempt = 0);

  // Waits until refitd says every engine rank holds round `version`,
  // attempt `attempt` (0: the newest this client saw start) in staging
  // (ROUND_STAGED): OK then; the round's outcome when it ended first
  // (ABORTED with refitd's reason; OK when it committed); otherwise as
  // AwaitOutcome.
  absl::Status AwaitStaged(int64_t version, absl::Time deadline, int32_t attempt = 0,
                           const absl::Notification* stop = nullptr);

  // Waits for the outcome of round `version`, attempt `attempt` (0: the
  // newest attempt this client saw start): OK when committed, ABORTED with
  // refitd's reason when aborted, DEADLINE_EXCEEDED by `deadline`,
  // UNAVAILABLE if the stream broke, CANCELLED once `stop` (if given) is
  // notified and WakeWaiters() called.
  absl::Status AwaitOutcome(int64_t version, absl::Time deadline, int32_t attempt = 0,
                            const absl::Notification* stop = nullptr);

  // Makes every AwaitOutcome in progress check its `stop` again.
  void WakeWaiters();

  // `committed`: the last version committed into engine `engine_id` (0:
  // none). `torn`: non-zero when round `torn` aborted after it had started
  // on the engine, so its buffers may hold part of that round and no single
  // version until a later round commits. Fails with refitd's status.
  struct EngineState {
    int64_t committed = 0;
    int64_t torn = 0;
  };
  absl::StatusOr<EngineState> GetEngineState(const std::string& engine_id,
                                             absl::Time deadline);

  // Leaves the membership (an engine replica going away between rounds, a
  // program closing its member) and stops the background threads; logs no
  // warning. OK at once when it left already (until Rejoin).
  absl::Status Leave(absl::Time deadline);

  absl::StatusOr<v1::StatusResponse> GetStatus(absl::Time deadline);

  // Key-value store (data-plane bootstrap). KvGet waits for the key until
  // `deadline`: DEADLINE_EXCEEDED naming the key when it is not set by then.
  absl::Status KvSet(const std::string& key, const std::string& value,
                     absl::Time deadline);
  absl::StatusOr<std::string> KvGet(const std::string& key, absl::Time deadline);

  const std::string& member_id() const { return member_id_; }
  // The secret this client registers with and sends on every call acting
  // for its member (for callers that use stub() directly).
  const std::string& member_secret() const { return member_secret_; }
  v1::RefitService::Stub* stub() { return stub_.get(); }

  // A context with the token and `deadline` set.
  std::unique_ptr<grpc::ClientContext> MakeContext(absl::Time deadline) const;

 private:
  explicit RefitClient(Options options) : options_(std::move(options)) {}
  void ReadStream(std::unique_ptr<grpc::ClientContext> ctx);
  void HeartbeatLoop();
  void StopThreads();
  // Stops the threads and forgets the session (member id, stream, rounds).
  void ResetSession();
  // Sends `req` (its apply fields set) as this member's report of round
  // `version`, attempt `attempt`.
  absl::Status ReportApply(int64_t version, v1::ReportRequest req, absl::Time deadline,
                           int32_t attempt);
  absl::StatusOr<std::string> RegisterOnce(const v1::Registration& reg,
                                           absl::Time deadline);
  // A call's status as absl::Status, saying what refitd's side of it means:
  // CANCELLED (refitd closed the call: it is shutting down) becomes
  // UNAVAILABLE naming the target, as does a refused connection.
  absl::Status FromRpc(const grpc::Status& status) const;
  // The StartRound call: version `version`, or the next one when `next`;
  // returns the version refitd started.
  absl::StatusOr<int64_t> StartRoundRpc(int64_t version, bool next, absl::Time deadline);
  // Why the channel is not connected, as ": connection refused (...)" or
  // ": <gRPC's last error>"; "" when it does not say.
  std::string WhyNotConnected();

  Options options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::RefitService::Stub> stub_;
  std::string member_id_;
  // Proposed at Register and sent with every call that acts for this
  // member (refitd refuses those calls without it); kept across Rejoin.
  const std::string member_secret_ = NewMemberSecret();
  v1::Registration registration_;  // as last registered successfully

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool leaving_ ABSL_GUARDED_BY(mu_) = false;  // Leave in progress: the end is expected
  bool left_ ABSL_GUARDED_BY(mu_) = false;     // Leave succeeded (until Rejoin)
  bool stream_broken_ ABSL_GUARDED_BY(mu_) = false;
  bool stream_ready_ ABSL_GUARDED_BY(mu_) = false;
  std::string stream_error_ ABSL_GUARDED_BY(mu_);
  int64_t latest_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t plan_epoch_ ABSL_GUARDED_BY(mu_) = -1;
  // The newest round seen to start, and the newest WaitForRound returned:
  // (version, attempt), ordered by version, then attempt.
  int64_t latest_started_ ABSL_GUARDED_BY(mu_) = 0;
  int32_t latest_attempt_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_returned_ ABSL_GUARDED_BY(mu_) = 0;
  int32_t last_returned_attempt_ ABSL_GUARDED_BY(mu_) = 0;
  // By (version, attempt).
  std::map<std::pair<int64_t, int32_t>, absl::Status> outcomes_ ABSL_GUARDED_BY(mu_);
  std::set<std::pair<int64_t, int32_t>> staged_ ABSL_GUARDED_BY(mu_);  // ROUND_STAGED seen
  std::map<int64_t, int64_t> round_epochs_ ABSL_GUARDED_BY(mu_);  // version -> epoch
  std::map<int64_t, int32_t> round_attempts_ ABSL_GUARDED_BY(mu_);  // version -> attempt
  std::map<int64_t, RoundMode> round_modes_ ABSL_GUARDED_BY(mu_);  // version -> mode
  grpc::ClientContext* stream_ctx_ ABSL_GUARDED_BY(mu_) = nullptr;
  // SetLiveRound's round and its byte count.
  int64_t live_version_ ABSL_GUARDED_BY(mu_) = 0;
  int32_t live_attempt_ ABSL_GUARDED_BY(mu_) = 0;
  std::function<int64_t()> live_bytes_ ABSL_GUARDED_BY(mu_);
  std::thread reader_;
  std::thread heartbeater_;
};

}  // namespace refit

#endif  // REFIT_CLIENT_REFIT_CLIENT_H_

// DataPlaneMember: the data-plane half of the client library. After a
// member registered its buffers with refitd (RefitClient::Register), it
// turns the member's plan slice into its data plane over the member's own
// buffers, bootstrapped through refitd's key-value store — one RoundRunner
// (exec/member_runner.h) — and runs each announced round: move the bytes,
// report done (bytes, seconds) or failed (the reason), and wait for
// refitd's commit or abort.
//
//   RefitClient* c = ...;                        // connected, registered
//   auto m = DataPlaneMember::Create(c, {{"model.embed_tokens.weight", p}, ...});
//   REFIT_RETURN_IF_ERROR((*m)->Prepare(absl::Now() + absl::Minutes(5)));
//   // trainer rank 0: c->StartRound(v, deadline);
//   REFIT_ASSIGN_OR_RETURN(int64_t v, c->WaitForRound(deadline));
//   REFIT_ASSIGN_OR_RETURN(RunStats s, (*m)->RunRound(v, deadline));
//
// Buffers are written in place (engines) or only read (trainers): the
// member never allocates or moves them.
#ifndef REFIT_CLIENT_DATA_PLANE_H_
#define REFIT_CLIENT_DATA_PLANE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/grpc_kv_store.h"
#include "client/live_bytes.h"
#include "client/refit_client.h"
#include "client/staged_buffers.h"
#include "client/staged_delta.h"
#include "exec/delta/delta_runner.h"
#include "exec/transport/kv_store.h"
#include "exec/member_runner.h"
#include "exec/program/plan_side.h"
#include "exec/round_runner.h"
#include "exec/run_stats.h"
#include "exec/transport/transport_kind.h"
#include "plan/plan.h"

namespace refit {

// TransportFactory, CopierFactory and PullRunnerFactory: see
// exec/member_runner.h.

// The host transport (Gloo over TCP on `hostname`).
TransportFactory GlooTransportFactory(std::string hostname = "127.0.0.1");

// Staged rounds of an engine member (docs/engines.md, "Serving while
// weights arrive"): each round is received into a staging copy of the
// member's buffers while the engine keeps serving, and written into the
// live buffers only once every engine rank holds the whole round
// (DataPlaneMember::ApplyRound). Trainer members ignore it.
struct StagingOptions {
  bool enabled = false;
  // Staging in fast memory (a GPU member's device memory) up to
  // `budget_bytes` (-1: `budget_share` of the member's buffer bytes), the
  // buffers past it in overflow memory (pinned host), copied during the
  // pause.
  int64_t budget_bytes = -1;
  double budget_share = 1.0;
  // How staging is allocated and copied; empty = host memory
  // (HostStagingMemory).
  std::function<std::unique_ptr<StagingMemory>()> memory;
};

struct DataPlaneOptions {
  TransportFactory transport;  // empty = GlooTransportFactory()
  // The colocated pull path. When set, it moves the member's pairs on its
  // host; `transport` and `copier` (an executor) the pairs across
  // hosts, in the same round, over a transport among only the members
  // refitd lists for it (Bootstrap.network_members).
  PullRunnerFactory pull;
  // Copies and staging of the executor (e.g. a device Copier made for
  // the transport); called once per plan. Empty = host memcpy.
  CopierFactory copier;
  // Per-segment checksums compared by both sides (ExecutorOptions); the
  // digests of verified rounds are refitd's (--verify_every).
  bool segment_checksums = false;
  // The codec steps of delta rounds on the transport's memory
  // (NcclDataPlaneOptions sets the GPU's); empty = host memory.
  DeltaOpsFactory delta_ops;
  // The physical GPU of the buffers, "GPU-<uuid>" (NcclDataPlaneOptions sets
  // it); Member registers it so refitd can refuse two members on one GPU.
  std::string device_uuid;
  // The data plane's kind as Member registers it (kPull = the colocated pull
  // path): refitd refuses a membership whose members disagree.
  TransportKind transport_kind = TransportKind::kGloo;
  StagingOptions staging;  // staged rounds (engine members)
};

class DataPlaneMember {
 public:
  // `client` (connected and registered) must outlive the member. `buffers`
  // maps every registered buffer name to its address. INVALID_ARGUMENT if a
  // buffer is null.
  static absl::StatusOr<std::unique_ptr<DataPlaneMember>> Create(
      RefitClient* client, std::map<std::string, char*> buffers,
      DataPlaneOptions options = {});
  ~DataPlaneMember();

  // Awaits the member's plan (the current membership's) and resolves the
  // slice's buffers. Called again while the plan is unchanged (same
  // membership epoch and plan), it keeps the plan and the data plane's
  // connections, which the other members keep too. Fails with the plan's error as refitd reported it (e.g.
  // the planner's INVALID_ARGUMENT), INVALID_ARGUMENT if the slice names a
  // buffer this member did not give, or DEADLINE_EXCEEDED.
  absl::Status Prepare(absl::Time deadline);

  // True when refitd has a newer plan (membership changed): call Prepare
  // again before the next round.
  bool PlanChanged() { return client_->PlanChanged(); }

  // Runs the announced round `version`: connects the transport if needed
  // (the first round after Prepare, or after an aborted round: every member
  // reconnects then, in the key namespace of that round), executes the
  // slice (failing by `deadline` at the latest), reports done or failed to
  // refitd, and waits for the outcome. Returns the member's stats when
  // refitd committed the round; otherwise the data plane's error, or
  // ABORTED with refitd's reason when it aborted the round. A peer whose
  // connection closed mid-round (it died, or its host was cut off) fails
  // the round with ABORTED naming the peer's rank, so that UNAVAILABLE
  // from here means refitd is unreachable (Rejoin). An abort that
  // comes while this member's data plane still waits (a peer died, even
  // before it connected) cancels the bootstrap store and the transport:
  // the member fails within ~0.5 s of refitd's decision, not at
  // `deadline`. When refitd runs delta or verified rounds, the member runs
  // them (exec/delta/delta_runner.h: host memory, or the GPU with
  // options.delta_ops), reporting its digest parts, and folds what it sent
  // into its snapshot once refitd committed; when refitd planned the
  // colocated pull path the rounds stay dense and report no digests. FAILED_PRECONDITION naming both epochs, reported to refitd
  // (which aborts the round for everyone), when the round runs the plan of
  // a newer membership than this member prepared.
  // A staged member (DataPlaneOptions::staging) runs ReceiveRound, then
  // ApplyRound, and returns the stats with the pause.
  absl::StatusOr<RunStats> RunRound(int64_t version, absl::Time deadline);

  // Staged members, in two steps, so the engine serves between them:
  // ReceiveRound moves the round's bytes into staging (as RunRound, the
  // live buffers untouched), reports them staged and waits until refitd
  // says every engine rank holds the round; returns the data plane's stats
  // then. Its errors are RunRound's; an abort up to here leaves the live
  // buffers as they were (refitd does not count the engine torn).
  // FAILED_PRECONDITION when the member is not staged.
  absl::StatusOr<RunStats> ReceiveRound(int64_t version, absl::Time deadline);
  // Writes the round ReceiveRound returned into the live buffers (the
  // engine pauses around this call), reports it applied and waits for
  // refitd's commit; returns the stats with pause_seconds, the time the
  // live buffers took to write. FAILED_PRECONDITION when `version` is not
  // the round ReceiveRound returned last; ABORTED when the round aborted
  // (its live bytes are then the round's: refitd counts the engine torn).
  absl::StatusOr<RunStats> ApplyRound(int64_t version, absl::Time deadline);
  // True for a staged member.
  bool staged() const { return options_.staging.enabled && side_ == Side::kEngine; }
  // Its staging (null before Prepare, or when not staged).
  const StagedBuffers* staged_buffers() const { return staged_.get(); }

  const Plan& plan() const { return plan_; }
  const std::string& fingerprint() const { return fingerprint_; }
  int32_t global_rank() const { return global_rank_; }
  int32_t global_world() const { return global_world_; }

 private:
  DataPlaneMember() = default;
  // Creates the runner unless connected, bootstrapping under keys of
  // round `version`, attempt `attempt`.
  absl::Status Connect(int64_t version, int32_t attempt, absl::Time deadline);
  void Disconnect();
  // RunRound's first half: the data plane of round `version` and the done
  // report (marked staged when `staged`); sets *attempt. On failure it has
  // reported it and disconnected.
  absl::StatusOr<RunStats> MoveAndReport(int64_t version, absl::Time deadline, bool staged,
                                         int32_t* attempt);
  // Its second half once reported: `outcome` (refitd's), the delta
  // snapshot committed or dropped, disconnected after an abort.
  absl::StatusOr<RunStats> Finish(int64_t version, absl::Status outcome, const RunStats& stats);
  // Staging of a staged member, made by Prepare.
  absl::Status MakeStaging(const SideLayout& layout, absl::Time deadline);

  RefitClient* client_ = nullptr;
  std::map<std::string, char*> buffers_;
  DataPlaneOptions options_;
  Plan plan_;
  std::string fingerprint_;
  bool prepared_ = false;  // the last Prepare succeeded
  int32_t global_rank_ = 0;
  int32_t global_world_ = 0;
  std::string kv_prefix_;
  int32_t num_lanes_ = 1;
  // refitd's per-pair choice (Bootstrap): hosts by global rank (empty: no
  // pull path) and the network transport's members.
  std::vector<int32_t> host_of_member_;
  std::vector<int32_t> network_members_;
  // Per global rank, its member's name (exec/transport/peer_names.h).
  std::vector<std::string> peer_names_;
  Side side_ = Side::kTrainer;
  int32_t rank_ = 0;
  std::vector<char*> ptrs_;  // per buffer of this side of the slice
  // store_ and runner_ are created and destroyed under cancel_mu_, so
  // that RunRound's watcher thread can cancel them.
  absl::Mutex cancel_mu_;
  absl::Status cancelled_ ABSL_GUARDED_BY(cancel_mu_);
  RoundRunner* cancel_runner_ ABSL_GUARDED_BY(cancel_mu_) = nullptr;
  std::unique_ptr<GrpcKvStore> store_;
  // The bytes the transport moved of the round in flight (each heartbeat
  // sends them to refitd).
  std::shared_ptr<LiveBytes> live_bytes_ = std::make_shared<LiveBytes>();
  // The member's data plane: every round Begin, Run, Finish
  // (exec/round_runner.h), whatever runner refitd's plan makes it.
  std::unique_ptr<RoundRunner> runner_;
  // A trainer's snapshot for delta rounds (refitd --delta): it outlives the
  // runner, rebuilt after an aborted round.
  DeltaSnapshot delta_snapshot_;
  // Staged members: the staging the data plane writes; whether it is ahead
  // of the live buffers (a round aborted before its apply); the round
  // ReceiveRound returned (version, attempt) and its stats.
  std::unique_ptr<StagedBuffers> staged_;
  // A staged host member's delta rounds: what changed, so that the apply
  // writes only that (client/staged_delta.h).
  StagedDeltaLog staged_log_;
  // A staged device member's delta round: staging listed its changed words
  // (StagedBuffers::FindChanged) for the apply.
  bool changed_listed_ = false;
  bool staging_ahead_ = false;
  int64_t received_version_ = 0;
  int32_t received_attempt_ = 0;
  RunStats received_stats_;
};

}  // namespace refit

#endif  // REFIT_CLIENT_DATA_PLANE_H_

// DataPlaneMember (see data_plane.h).
#include "client/data_plane.h"

#include <algorithm>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "exec/convert/copier.h"
#include "exec/delta/digest_term.h"
#include "exec/delta/wave_ops.h"
#include "exec/transport/gloo_transport.h"
#include "exec/transport/peer_names.h"
#include "plan/plan_codec.h"

namespace refit {

TransportFactory GlooTransportFactory(std::string hostname) {
  return [hostname](KvStore* store, int32_t rank, int32_t world,
                    int32_t lanes) -> absl::StatusOr<std::unique_ptr<Transport>> {
    GlooTransportOptions o;
    o.num_lanes = lanes;
    o.hostname = hostname;
    o.key_prefix = "gloo";
    REFIT_ASSIGN_OR_RETURN(std::unique_ptr<GlooTransport> t,
                           GlooTransport::Create(store, rank, world, o));
    return std::unique_ptr<Transport>(std::move(t));
  };
}

absl::StatusOr<std::unique_ptr<DataPlaneMember>> DataPlaneMember::Create(
    RefitClient* client, std::map<std::string, char*> buffers,
    DataPlaneOptions options) {
  if (client == nullptr) return absl::InvalidArgumentError("client is null");
  for (const auto& [name, p] : buffers) {
    if (p == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("buffer ", name, ": address is null"));
    }
  }
  if (!options.transport) options.transport = GlooTransportFactory();
  std::unique_ptr<DataPlaneMember> m(new DataPlaneMember());
  m->client_ = client;
  m->buffers_ = std::move(buffers);
  m->options_ = std::move(options);
  return m;
}

DataPlaneMember::~DataPlaneMember() { Disconnect(); }

absl::Status DataPlaneMember::Prepare(absl::Time deadline) {
  const int64_t held_epoch = prepared_ ? client_->plan_epoch() : -1;
  REFIT_ASSIGN_OR_RETURN(v1::AwaitPlanResponse resp, client_->AwaitPlan(deadline));
  // The plan this member holds (same membership epoch, same plan): keep it
  // and its connections. The other members keep theirs (they see no new
  // epoch), so rebuilding ours alone would break the next round.
  if (held_epoch >= 0 && resp.epoch() == held_epoch && resp.fingerprint() == fingerprint_ &&
      resp.bootstrap().kv_prefix() == kv_prefix_ &&
      resp.bootstrap().global_rank() == global_rank_) {
    return absl::OkStatus();
  }
  Disconnect();
  prepared_ = false;
  fingerprint_.clear();
  REFIT_ASSIGN_OR_RETURN(v1::PlanProto slice, RefitClient::Slice(resp));
  REFIT_ASSIGN_OR_RETURN(
      plan_, AnnotateStatus(FromProto(slice), "plan slice from refitd"));
  fingerprint_ = resp.fingerprint();
  const v1::Bootstrap& boot = resp.bootstrap();
  global_rank_ = boot.global_rank();
  global_world_ = boot.global_world();
  if (global_world_ != plan_.src.world_size + plan_.dst.world_size ||
      global_rank_ < 0 || global_rank_ >= global_world_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bootstrap rank ", global_rank_, " of ", global_world_,
        " does not fit the plan (", plan_.src.world_size, " trainer + ",
        plan_.dst.world_size, " engine ranks)"));
  }
  const bool source = global_rank_ < plan_.src.world_size;
  const Side side = source ? Side::kTrainer : Side::kEngine;
  const int32_t rank =
      source ? global_rank_ : global_rank_ - plan_.src.world_size;
  const SideLayout& layout = source ? plan_.src : plan_.dst;
  std::vector<char*> ptrs(layout.buffers.size(), nullptr);
  for (size_t b = 0; b < layout.buffers.size(); ++b) {
    // Scratch buffers (converted values) are the executor's own.
    if (layout.buffers[b].rank != rank || layout.buffers[b].scratch) continue;
    auto it = buffers_.find(layout.buffers[b].name);
    if (it == buffers_.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the plan needs buffer ", layout.buffers[b].name, " of ",
          SideName(side), " rank ", rank,
          ", which this member did not give"));
    }
    ptrs[b] = it->second;
  }
  host_of_member_.assign(boot.host_of_member().begin(), boot.host_of_member().end());
  network_members_.assign(boot.network_members().begin(), boot.network_members().end());
  peer_names_ = MemberNames(
      global_world_, std::vector<std::string>(boot.engine_ids().begin(), boot.engine_ids().end()),
      std::vector<int32_t>(boot.engine_first_ranks().begin(), boot.engine_first_ranks().end()),
      std::vector<int32_t>(boot.engine_rank_counts().begin(), boot.engine_rank_counts().end()));
  if (!host_of_member_.empty() &&
      static_cast<int32_t>(host_of_member_.size()) != global_world_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bootstrap host_of_member has ", host_of_member_.size(), " entries for ",
        global_world_, " members"));
  }
  if (!host_of_member_.empty() && !options_.pull) {
    return absl::FailedPreconditionError(
        "refitd planned the colocated pull path, but this member's data plane has none");
  }
  kv_prefix_ = boot.kv_prefix();
  num_lanes_ = std::max<int32_t>(1, boot.num_lanes());
  side_ = side;
  rank_ = rank;
  ptrs_ = std::move(ptrs);
  staged_.reset();
  if (staged()) REFIT_RETURN_IF_ERROR(MakeStaging(layout, deadline));
  prepared_ = true;
  return absl::OkStatus();
}

absl::Status DataPlaneMember::MakeStaging(const SideLayout& layout, absl::Time deadline) {
  std::vector<int64_t> bytes(ptrs_.size(), 0);
  int64_t total = 0;
  for (size_t b = 0; b < ptrs_.size(); ++b) {
    if (ptrs_[b] == nullptr) continue;
    bytes[b] = layout.buffers[b].byte_size;
    total += bytes[b];
  }
  const StagingOptions& o = options_.staging;
  if (options_.copier && !o.memory) {
    return absl::FailedPreconditionError(absl::StrCat(
        "engine rank ", rank_, ": staged rounds of a device member need device staging "
        "(StagingOptions::memory; NcclDataPlaneOptions sets it)"));
  }
  const int64_t budget = StagingBudget(o.budget_bytes, o.budget_share, total);
  REFIT_ASSIGN_OR_RETURN(
      staged_, AnnotateStatus(StagedBuffers::Create(ptrs_, std::move(bytes),
                                                    o.memory ? o.memory() : HostStagingMemory(),
                                                    budget, deadline),
                              absl::StrCat("engine rank ", rank_, ": staging")));
  staging_ahead_ = false;
  received_version_ = 0;
  return absl::OkStatus();
}

absl::StatusOr<RunStats> DataPlaneMember::RunRound(int64_t version,
                                                   absl::Time deadline) {
  if (staged()) {
    REFIT_RETURN_IF_ERROR(ReceiveRound(version, deadline).status());
    return ApplyRound(version, deadline);
  }
  int32_t attempt = 0;
  REFIT_ASSIGN_OR_RETURN(RunStats stats, MoveAndReport(version, deadline, false, &attempt));
  return Finish(version, client_->AwaitOutcome(version, deadline, attempt), stats);
}

absl::StatusOr<RunStats> DataPlaneMember::ReceiveRound(int64_t version, absl::Time deadline) {
  if (!staged()) {
    return absl::FailedPreconditionError(
        "ReceiveRound: this member does not stage rounds (DataPlaneOptions::staging)");
  }
  if (staged_ == nullptr) return absl::FailedPreconditionError("no plan: call Prepare() first");
  received_version_ = 0;
  if (staging_ahead_) {  // the live bytes are read only: the engine keeps serving
    REFIT_RETURN_IF_ERROR(staged_->Reset(deadline));
    staging_ahead_ = false;
  }
  int32_t attempt = 0;
  staged_log_.Clear();
  absl::StatusOr<RunStats> stats = MoveAndReport(version, deadline, true, &attempt);
  staging_ahead_ = true;  // until applied
  if (!stats.ok()) return stats;
  // A delta round (against the version this rank holds; over the pull
  // path it arrives dense) changed few words: where staging can list them
  // (device memory), list them now, while refitd hears from the other ranks and
  // the engine serves, so that the pause writes only those.
  changed_listed_ = false;
  const std::vector<int64_t> bases = client_->RoundModeOf(version).delta_base;
  if (static_cast<size_t>(rank_) < bases.size() && bases[rank_] >= 0) {
    absl::StatusOr<bool> listed = staged_->FindChanged(deadline);
    if (!listed.ok()) {
      absl::Status f = AnnotateStatus(listed.status(),
                                      absl::StrCat("engine rank ", rank_, ": changed words"));
      (void)client_->ReportFailed(version, std::string(f.message()),
                                  std::min(std::max(deadline, absl::Now() + absl::Seconds(2)),
                                           absl::Now() + absl::Seconds(10)),
                                  attempt);
      return Finish(version, f, *stats);
    }
    changed_listed_ = *listed;
  }
  absl::Status s = client_->AwaitStaged(version, deadline, attempt);
  if (!s.ok()) return Finish(version, s, *stats);
  received_version_ = version;
  received_attempt_ = attempt;
  received_stats_ = *stats;
  return stats;
}

absl::StatusOr<RunStats> DataPlaneMember::ApplyRound(int64_t version, absl::Time deadline) {
  if (!staged() || received_version_ != version || version == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ApplyRound(", version, "): the round ReceiveRound holds is ",
        received_version_ == 0 ? std::string("none") : absl::StrCat(received_version_)));
  }
  received_version_ = 0;
  RunStats stats = received_stats_;
  const absl::Time start = absl::Now();
  // refitd hears first that the live buffers are about to change: an abort
  // from now on counts the engine torn, and one before it leaves them be.
  absl::Status s = client_->ReportApplying(version, deadline, received_attempt_);
  if (!s.ok()) return Finish(version, s, stats);
  // A delta round writes only the changed words: those staging listed
  // (device members), or those a host member logged when the round came
  // wholly as changed words; any other round copies every staged byte.
  if (changed_listed_) {
    changed_listed_ = false;
    s = staged_->ApplyChanged(deadline).status();
  } else if (options_.copier == nullptr && stats.delta_messages > 0 &&
             stats.dense_messages == 0 && staged_log_.messages() > 0) {
    s = staged_log_.ApplyToLive(staged_->staging(), staged_->live(), staged_->bytes()).status();
  } else {
    s = staged_->Apply(deadline).status();
  }
  if (s.ok()) {
    staging_ahead_ = false;
    stats.pause_seconds = absl::ToDoubleSeconds(absl::Now() - start);
    s = client_->ReportApplied(version, stats.pause_seconds, deadline, received_attempt_);
  } else {
    (void)client_->ReportFailed(version, std::string(s.message()),
                                std::min(std::max(deadline, absl::Now() + absl::Seconds(2)),
                                         absl::Now() + absl::Seconds(10)),
                                received_attempt_);
    s = AnnotateStatus(s, absl::StrCat("round ", version, " apply"));
  }
  if (s.ok()) s = client_->AwaitOutcome(version, deadline, received_attempt_);
  return Finish(version, s, stats);
}

absl::StatusOr<RunStats> DataPlaneMember::MoveAndReport(int64_t version, absl::Time deadline,
                                                        bool staged, int32_t* attempt_out) {
  if (ptrs_.empty() && plan_.messages.empty() && fingerprint_.empty()) {
    return absl::FailedPreconditionError("no plan: call Prepare() first");
  }
  // The run of `version` this member takes part in: reports and outcomes
  // are of this attempt, even once a later one has started.
  const int32_t attempt = std::max(1, client_->RoundAttempt(version));
  *attempt_out = attempt;
  // A member still on the plan of an older membership would move the wrong
  // bytes or wait for messages nobody sends: refuse, and tell refitd so the
  // round aborts for everyone now instead of at their deadlines.
  if (absl::StatusOr<int64_t> epoch = client_->RoundEpoch(version);
      epoch.ok() && *epoch != client_->plan_epoch()) {
    absl::Status s = absl::FailedPreconditionError(absl::StrCat(
        "round ", version, " runs the plan of membership epoch ", *epoch,
        ", this member holds the plan of epoch ", client_->plan_epoch(),
        ": call Prepare() when PlanChanged() is true, before the round"));
    (void)client_->ReportFailed(version, std::string(s.message()),
                                std::min(deadline, absl::Now() + absl::Seconds(10)), attempt);
    return s;
  }
  // While the data plane runs, a watcher listens for refitd aborting the
  // round (a peer died, perhaps before it even connected) and cancels the
  // store and transport: the others fail now, not at their deadline.
  absl::Notification done;
  std::thread watcher([this, version, attempt, deadline, &done] {
    while (!done.HasBeenNotified() && absl::Now() < deadline) {
      // Ends at once when the data plane is done (WakeWaiters below).
      absl::Status s = client_->AwaitOutcome(version, deadline, attempt, &done);
      if (!absl::IsAborted(s)) {
        if (s.ok() || absl::IsCancelled(s)) return;  // committed, or no longer needed
        // The stream broke (the deadline rules then), which AwaitOutcome
        // reports at once: do not spin on it.
        (void)done.WaitForNotificationWithTimeout(absl::Milliseconds(100));
        continue;
      }
      absl::MutexLock l(&cancel_mu_);
      cancelled_ = s;
      if (store_ != nullptr) store_->Cancel(s);
      if (cancel_runner_ != nullptr) cancel_runner_->Cancel(s);
      return;
    }
  });
  absl::StatusOr<RunStats> stats = RunStats{};
  if (absl::Status c = Connect(version, attempt, deadline); !c.ok()) stats = c;
  if (stats.ok()) {
    absl::MutexLock l(&cancel_mu_);
    if (!cancelled_.ok()) stats = cancelled_;
    cancel_runner_ = runner_.get();  // connected now or rounds ago
  }
  if (stats.ok()) {
    // The round's announcement: per engine rank dense or delta against a
    // base version, and whether both sides digest it.
    const RefitClient::RoundMode mode = client_->RoundModeOf(version);
    runner_->Begin({version, mode.delta_base, mode.verify});
    live_bytes_->Reset();
    client_->SetLiveRound(version, attempt, [live = live_bytes_] { return live->moved(); });
    stats = runner_->Run(deadline);
    client_->SetLiveRound(0, 0, nullptr);
    if (!stats.ok()) stats = RoundFailureOfPeer(stats.status());
  }
  done.Notify();
  client_->WakeWaiters();
  watcher.join();
  {
    absl::MutexLock l(&cancel_mu_);
    cancel_runner_ = nullptr;
    // The data plane's error is then only the consequence: say the cause.
    if (!stats.ok() && !cancelled_.ok()) stats = cancelled_;
    cancelled_ = absl::OkStatus();
  }
  if (!stats.ok()) {
    stats = NamePeers(stats.status(), peer_names_);  // the transport names ranks
    Disconnect();  // a failed runner must not run again
    // Tell refitd (best effort: it may be the reason) and let it abort the
    // round for everyone. The report gets 2 s even when the round's deadline
    // is what failed: else refitd never hears of it and the round stays
    // open until its round timeout.
    absl::Status r = client_->ReportFailed(
        version, std::string(stats.status().message()),
        std::min(std::max(deadline, absl::Now() + absl::Seconds(2)),
                 absl::Now() + absl::Seconds(10)),
        attempt);
    (void)r;
    return AnnotateStatus(stats.status(),
                          absl::StrCat("round ", version, " data plane"));
  }
  RefitClient::RoundFigures figures;
  figures.bytes = std::max(stats->bytes_sent, stats->bytes_received);
  figures.seconds = stats->seconds;
  figures.peak_staging_bytes = stats->peak_staging_bytes;
  figures.digest_seconds = stats->digest_seconds;
  if (!stats->digests.empty()) {
    figures.digest_scheme = kDigestScheme;
    for (const auto& [key, sum] : stats->digests) {
      v1::DigestPart& p = figures.digests.emplace_back();
      p.set_engine_rank(key.first);
      p.set_tensor(key.second);
      p.set_sum(sum);
      if (side_ == Side::kEngine && key.second >= 0 &&
          static_cast<size_t>(key.second) < plan_.dst.tensors.size()) {
        p.set_tensor_name(plan_.dst.tensors[key.second].name);
      }
    }
  }
  figures.staged = staged;
  absl::Status s = client_->ReportDone(version, figures, deadline, attempt);
  if (!s.ok()) return Finish(version, s, *stats);
  return *stats;
}

absl::StatusOr<RunStats> DataPlaneMember::Finish(int64_t version, absl::Status outcome,
                                                 const RunStats& stats) {
  // A delta runner's snapshot holds only committed bytes.
  if (runner_ != nullptr) {
    runner_->Finish(outcome.ok() ? RoundOutcome::kCommitted : RoundOutcome::kAborted);
  }
  if (!outcome.ok()) {
    // An aborted round may have left any peer's transport broken: every
    // member reconnects for the next round.
    Disconnect();
    return outcome;
  }
  return stats;
}

absl::Status DataPlaneMember::Connect(int64_t version, int32_t attempt, absl::Time deadline) {
  if (runner_ != nullptr) return absl::OkStatus();
  // A fresh key namespace per connection: every member connects at the same
  // round (the first after Prepare or after an aborted round), and a version
  // run again after its abort does not read the aborted attempt's keys.
  {
    absl::MutexLock l(&cancel_mu_);
    store_ = std::make_unique<GrpcKvStore>(
        client_, absl::StrCat(kv_prefix_, "/v", version,
                              attempt > 1 ? absl::StrCat(".", attempt) : ""));
    if (!cancelled_.ok()) return cancelled_;
  }
  MemberSlice member;
  member.plan = &plan_;
  member.side = side_;
  member.rank = rank_;
  member.buffers = staged_ != nullptr ? staged_->staging() : ptrs_;
  member.global_rank = global_rank_;
  member.global_world = global_world_;
  member.num_lanes = num_lanes_;
  member.host_of_member = host_of_member_;
  member.network_members = network_members_;
  DataPlaneParts parts;
  if (options_.transport) parts.transport = CountingTransports(options_.transport, live_bytes_);
  parts.copier = options_.copier;
  parts.pull = options_.pull;
  parts.segment_checksums = options_.segment_checksums;
  parts.delta_ops = options_.delta_ops;
  // Delta and verified rounds, unless refitd planned the colocated pull
  // path: pull rounds stay dense (one device copy is cheaper than reading
  // two versions) and report no digests.
  parts.delta = client_->RoundModeOf(version).delta_plane && host_of_member_.empty();
  parts.delta_options.snapshot = &delta_snapshot_;
  if (parts.delta && staged_ != nullptr && !options_.copier) {
    // The log sees the host runner's applies and unpacks.
    parts.delta_ops = [this](Transport*) -> absl::StatusOr<std::unique_ptr<DeltaWaveOps>> {
      return staged_log_.WrapOps(MakeHostWaveOps());
    };
    parts.copier = [this](Transport*) { return staged_log_.WrapCopier(MakeHostCopier()); };
  }
  REFIT_ASSIGN_OR_RETURN(runner_, MakeMemberRunner(member, parts, store_.get(), deadline));
  return absl::OkStatus();
}

void DataPlaneMember::Disconnect() {
  {
    absl::MutexLock l(&cancel_mu_);
    cancel_runner_ = nullptr;
  }
  runner_.reset();
  absl::MutexLock l(&cancel_mu_);
  store_.reset();
}

}  // namespace refit

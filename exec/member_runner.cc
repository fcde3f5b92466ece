// MakeMemberRunner (see member_runner.h).
#include "exec/member_runner.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "exec/composite_runner.h"
#include "exec/executor.h"
#include "exec/transport/pair_routes.h"
#include "exec/transport/subset_transport.h"

namespace refit {
namespace {

// An executor over `transport` (owned by the runner with its copier);
// with `subset` (the network members), over a SubsetTransport among them,
// leaving out the peers `exclude_peer` names. The copier is made for
// `transport` itself (a device copier runs on its streams).
absl::StatusOr<std::unique_ptr<RoundRunner>> ExecutorOver(
    const MemberSlice& member, const DataPlaneParts& parts, std::unique_ptr<Transport> transport,
    const std::vector<int32_t>* subset, std::function<bool(int32_t)> exclude_peer) {
  ExecutorOptions eo;
  eo.segment_checksums = parts.segment_checksums;
  eo.exclude_peer = std::move(exclude_peer);
  std::unique_ptr<Copier> copier;
  if (parts.copier) {
    copier = parts.copier(transport.get());
    eo.copier = copier.get();
  }
  if (subset != nullptr) {
    REFIT_ASSIGN_OR_RETURN(
        std::unique_ptr<SubsetTransport> t,
        SubsetTransport::Create(std::move(transport), *subset, member.global_world));
    transport = std::move(t);
  }
  REFIT_ASSIGN_OR_RETURN(std::unique_ptr<Executor> executor,
                         Executor::Create(*member.plan, member.side, member.rank,
                                          member.buffers, transport.get(), eo));
  REFIT_ASSIGN_OR_RETURN(
      std::unique_ptr<ExecutorRunner> r,
      ExecutorRunner::Create(std::move(transport), std::move(copier), std::move(executor)));
  return std::unique_ptr<RoundRunner>(std::move(r));
}

// The pull path moves trainer-to-engine pairs: fails with
// FAILED_PRECONDITION, naming the two engine ranks, when a relay message of
// the member's slice (an engine rank forwarding) falls on a pair it would
// pull (`pull_peer` empty: every pair). refitd plans memberships that pull
// without relays.
absl::Status CheckNoPulledRelays(const MemberSlice& member,
                                 const std::function<bool(int32_t)>& pull_peer) {
  const int32_t src_world = member.plan->src.world_size;
  for (const Message& m : member.plan->messages) {
    if (!m.relay) continue;
    const int32_t from = src_world + m.src_rank, to = src_world + m.dst_rank;
    if (pull_peer && !pull_peer(from == member.global_rank ? to : from)) continue;
    return absl::FailedPreconditionError(absl::StrCat(
        "engine rank ", m.src_rank, " relays to engine rank ", m.dst_rank,
        " on the pull path, which moves trainer-to-engine pairs only: plan this "
        "membership with relays off (--relay=off)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<RoundRunner>> MakeMemberRunner(const MemberSlice& member,
                                                              const DataPlaneParts& parts,
                                                              KvStore* store,
                                                              absl::Time deadline) {
  if (member.plan == nullptr) return absl::InvalidArgumentError("member slice has no plan");
  if (!parts.pull) {
    if (!parts.transport) return absl::InvalidArgumentError("no transport factory");
    if (parts.delta) {
      REFIT_ASSIGN_OR_RETURN(std::unique_ptr<DeltaRunner> r,
                             MakeDeltaMemberRunner(member, parts, store));
      return std::unique_ptr<RoundRunner>(std::move(r));
    }
    REFIT_ASSIGN_OR_RETURN(
        std::unique_ptr<Transport> transport,
        AnnotateStatus(parts.transport(store, member.global_rank, member.global_world,
                                       member.num_lanes),
                       "data-plane transport"));
    return ExecutorOver(member, parts, std::move(transport), nullptr, nullptr);
  }
  std::function<bool(int32_t)> pull_peer;
  if (!member.host_of_member.empty()) {
    pull_peer = [hosts = member.host_of_member, me = member.global_rank](int32_t g) {
      return PullsBetween(hosts, me, g);
    };
  }
  REFIT_RETURN_IF_ERROR(CheckNoPulledRelays(member, pull_peer));
  REFIT_ASSIGN_OR_RETURN(
      std::unique_ptr<RoundRunner> pull,
      AnnotateStatus(parts.pull(*member.plan, member.side, member.rank, member.buffers, store,
                                pull_peer, deadline),
                     "pull data plane"));
  const std::vector<int32_t>& net = member.network_members;
  auto it = std::lower_bound(net.begin(), net.end(), member.global_rank);
  if (member.host_of_member.empty() || it == net.end() || *it != member.global_rank) {
    return pull;
  }
  // Pairs across hosts: a transport among the network members only.
  if (!parts.transport) return absl::InvalidArgumentError("no transport factory");
  const int32_t local = static_cast<int32_t>(it - net.begin());
  REFIT_ASSIGN_OR_RETURN(
      std::unique_ptr<Transport> inner,
      AnnotateStatus(parts.transport(store, local, static_cast<int32_t>(net.size()),
                                     member.num_lanes),
                     "network data plane transport"));
  REFIT_ASSIGN_OR_RETURN(std::unique_ptr<RoundRunner> network,
                         ExecutorOver(member, parts, std::move(inner), &net, pull_peer));
  // The network part first: it runs on the calling thread, whose current
  // CUDA device its transport set (its streams' kernels launch from there);
  // the pull runner sets its device on its own thread.
  std::vector<std::unique_ptr<RoundRunner>> both;
  both.push_back(std::move(network));
  both.push_back(std::move(pull));
  REFIT_ASSIGN_OR_RETURN(std::unique_ptr<CompositeRunner> c,
                         CompositeRunner::Create(std::move(both)));
  return std::unique_ptr<RoundRunner>(std::move(c));
}

absl::StatusOr<std::unique_ptr<DeltaRunner>> MakeDeltaMemberRunner(const MemberSlice& member,
                                                                   const DataPlaneParts& parts,
                                                                   KvStore* store) {
  if (member.plan == nullptr) return absl::InvalidArgumentError("member slice has no plan");
  if (!parts.transport) return absl::InvalidArgumentError("no transport factory");
  if (parts.copier && !parts.delta_ops) {
    return absl::FailedPreconditionError(
        "delta rounds on device memory need the codec's device steps (delta_ops)");
  }
  REFIT_ASSIGN_OR_RETURN(
      std::unique_ptr<Transport> transport,
      AnnotateStatus(parts.transport(store, member.global_rank, member.global_world,
                                     member.num_lanes),
                     "data-plane transport"));
  DeltaRunnerOptions options = parts.delta_options;
  std::unique_ptr<Copier> copier;
  if (parts.copier) copier = parts.copier(transport.get());
  std::unique_ptr<DeltaWaveOps> ops;
  if (parts.delta_ops) {
    REFIT_ASSIGN_OR_RETURN(ops, AnnotateStatus(parts.delta_ops(transport.get()), "delta codec"));
  }
  options.copier = copier.get();
  options.ops = ops.get();
  REFIT_ASSIGN_OR_RETURN(std::unique_ptr<DeltaRunner> r,
                         DeltaRunner::Create(*member.plan, member.side, member.rank,
                                             member.buffers, transport.get(), options));
  r->Adopt(std::move(transport), std::move(copier), std::move(ops));
  return r;
}

}  // namespace refit

// RunPlanFunction and AssembleMemberPlans (see plan_assembly.h).
#include "server/plan_assembly.h"

#include <algorithm>
#include <exception>
#include <map>
#include <new>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "exec/transport/pair_routes.h"
#include "server/registration.h"

namespace refit {
namespace {

// Fills built's per-pair data planes for `input` (see RunPlanFunction).
absl::Status RoutePairsOf(const PlanInput& input, BuiltPlan* built) {
  std::vector<const v1::MemberIdentity*> ids;
  for (const auto* side : {&input.trainer, &input.engine}) {
    for (const v1::Registration& r : *side) ids.push_back(&r.identity());
  }
  const int32_t num_trainer = static_cast<int32_t>(input.trainer.size());
  const int32_t world = static_cast<int32_t>(ids.size());
  std::vector<std::pair<int32_t, int32_t>> pairs = built->pairs;
  if (pairs.empty()) {
    for (int32_t t = 0; t < num_trainer; ++t) {
      for (int32_t e = num_trainer; e < world; ++e) pairs.emplace_back(t, e);
    }
  }
  const bool pull = std::any_of(ids.begin(), ids.end(), [](const v1::MemberIdentity* id) {
    return id->transport() == v1::TRANSPORT_PULL;
  });
  std::vector<int32_t> host_of_member;
  if (pull) {
    std::map<std::string, int32_t> host_index;
    for (const v1::MemberIdentity* id : ids) {
      host_of_member.push_back(
          host_index.emplace(id->host_id(), static_cast<int32_t>(host_index.size()))
              .first->second);
    }
  }
  for (const auto& [a, b] : pairs) {
    if (a < 0 || b < 0 || a >= world || b >= world) {
      return absl::InternalError(absl::StrCat("plan function names pair (", a, ", ", b,
                                              ") outside the ", world, " members"));
    }
  }
  PairRoutes routes = RoutePairs(pairs, host_of_member);
  if (pull) {
    std::map<std::string, int32_t> by_gpu;
    for (int32_t g : routes.network_members) {
      const v1::MemberIdentity& id = *ids[g];
      if (id.device_uuid().empty()) continue;
      auto [it, fresh] = by_gpu.emplace(id.device_uuid(), g);
      if (fresh) continue;
      const v1::MemberIdentity& other = *ids[it->second];
      return absl::InvalidArgumentError(absl::StrCat(
          DescribeMember(other), " and ", DescribeMember(id), " share GPU ", id.device_uuid(),
          " on host ", id.host_id(), " and both exchange bytes with members on other hosts, "
          "which go over NCCL: NCCL connects one rank per GPU; place the job so that "
          "members sharing a GPU only exchange bytes with members of their own host"));
    }
  }
  built->host_of_member = std::move(host_of_member);
  built->network_members = std::move(routes.network_members);
  built->pull_pairs = routes.pull_pairs;
  built->network_pairs = routes.network_pairs;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<BuiltPlan> RunPlanFunction(const PlanFunction& plan,
                                          const PlanInput& input) {
  if (absl::Status s = CheckDataPlane(input.trainer, input.engine); !s.ok()) return s;
  absl::StatusOr<BuiltPlan> built = absl::InternalError("plan function: not run");
  // A plan function that throws (std::bad_alloc on a plan too large for
  // this host) fails this plan only, never refitd.
  try {
    built = plan(input.trainer, input.engine);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        "the plan function ran out of memory (std::bad_alloc): the plan is too "
        "large for this host");
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("the plan function threw: ", e.what()));
  } catch (...) {
    return absl::InternalError("the plan function threw a non-standard exception");
  }
  if (built.ok() && (built->trainer_slices.size() != input.trainer.size() ||
                     built->engine_slices.size() != input.engine.size())) {
    return absl::InternalError("plan function returned the wrong number of slices");
  }
  if (built.ok() &&
      ((!built->trainer_bounds.empty() &&
        built->trainer_bounds.size() != input.trainer.size()) ||
       (!built->engine_bounds.empty() && built->engine_bounds.size() != input.engine.size()))) {
    return absl::InternalError("plan function returned the wrong number of slice bounds");
  }
  if (built.ok()) {
    if (absl::Status s = RoutePairsOf(input, &*built); !s.ok()) return s;
  }
  return built;
}

namespace {

// One engine's global ranks: [first, first + count).
struct EngineSpan {
  const std::string* id;
  int32_t first;
  int32_t count;
};

// The engines of `input` in input order (an engine's ranks are adjacent),
// each with its global ranks (trainer ranks come first).
std::vector<EngineSpan> EngineSpans(const PlanInput& input) {
  std::vector<EngineSpan> out;
  const int32_t num_trainer = static_cast<int32_t>(input.trainer.size());
  for (size_t j = 0; j < input.engine.size(); ++j) {
    const std::string& id = input.engine[j].identity().engine_id();
    if (!out.empty() && *out.back().id == id) {
      ++out.back().count;
    } else {
      out.push_back({&id, num_trainer + static_cast<int32_t>(j), 1});
    }
  }
  return out;
}

// Each global rank's data-plane peers in `pairs` (both directions).
std::vector<std::vector<int32_t>> PeersOf(size_t world,
                                          const std::vector<std::pair<int32_t, int32_t>>& pairs) {
  std::vector<std::vector<int32_t>> peers(world);
  for (const auto& [a, b] : pairs) {
    if (a < 0 || b < 0 || static_cast<size_t>(a) >= world || static_cast<size_t>(b) >= world) {
      continue;
    }
    peers[a].push_back(b);
    peers[b].push_back(a);
  }
  return peers;
}

// Adds to `b` the engines holding global rank `self` and its `peers`
// (null: the plan does not say; its own engine only), each once, in input
// order, with their ranks.
void AddPeerEngines(const std::vector<EngineSpan>& engines, const std::vector<int32_t>* peers,
                    int32_t self, v1::Bootstrap* b) {
  std::vector<size_t> picked;
  auto engine_of = [&](int32_t g) {
    auto it = std::upper_bound(engines.begin(), engines.end(), g,
                               [](int32_t r, const EngineSpan& s) { return r < s.first; });
    if (it == engines.begin()) return;  // a trainer rank
    --it;
    if (g < it->first + it->count) picked.push_back(static_cast<size_t>(it - engines.begin()));
  };
  engine_of(self);
  if (peers != nullptr) {
    for (int32_t g : *peers) engine_of(g);
  }
  std::sort(picked.begin(), picked.end());
  picked.erase(std::unique(picked.begin(), picked.end()), picked.end());
  for (size_t e : picked) {
    b->add_engine_ids(*engines[e].id);
    b->add_engine_first_ranks(engines[e].first);
    b->add_engine_rank_counts(engines[e].count);
  }
}

}  // namespace

std::map<std::string, MemberPlan> AssembleMemberPlans(
    const PlanInput& input, const BuiltPlan& built,
    const std::string& plan_fingerprint, const std::string& kv_prefix) {
  std::map<std::string, int> engine_index;
  for (const v1::Registration& r : input.engine) {
    engine_index.emplace(r.identity().engine_id(), 0);
  }
  int k = 0;
  for (auto& [e, i] : engine_index) i = k++;
  const size_t num_trainer = input.trainer.size();
  const std::vector<EngineSpan> engines = EngineSpans(input);
  const std::vector<std::vector<int32_t>> peers = PeersOf(input.ids.size(), built.pairs);
  std::map<std::string, MemberPlan> out;
  for (size_t i = 0; i < input.ids.size(); ++i) {
    const bool is_trainer = i < num_trainer;
    MemberPlan mp;
    mp.head.set_epoch(input.epoch);
    mp.head.set_fingerprint(plan_fingerprint);
    v1::Bootstrap* b = mp.head.mutable_bootstrap();
    b->set_global_rank(static_cast<int>(i));
    b->set_global_world(static_cast<int>(input.ids.size()));
    b->set_num_lanes(built.num_lanes);
    b->set_kv_prefix(absl::StrCat(kv_prefix, "/", plan_fingerprint, "/"));
    b->set_engine_index(
        is_trainer ? -1
                   : engine_index[input.engine[i - num_trainer].identity().engine_id()]);
    AddPeerEngines(engines, built.pairs.empty() ? nullptr : &peers[i], static_cast<int32_t>(i),
                   b);
    if (!built.host_of_member.empty()) {
      for (int32_t h : built.host_of_member) b->add_host_of_member(h);
      for (int32_t g : built.network_members) b->add_network_members(g);
    }
    mp.trainer = is_trainer;
    mp.index = is_trainer ? i : i - num_trainer;
    const std::vector<SliceBounds>& bounds =
        is_trainer ? built.trainer_bounds : built.engine_bounds;
    if (mp.index < bounds.size()) mp.bounds = &bounds[mp.index];
    if (!is_trainer) {
      mp.engine_rank = mp.bounds != nullptr ? mp.bounds->engine_rank
                                            : static_cast<int32_t>(mp.index);
    }
    out[input.ids[i]] = std::move(mp);
  }
  return out;
}

namespace {

// One build's result, shared by the build's thread and its waiter.
struct PlanBuild {
  absl::Mutex mu;
  std::optional<absl::StatusOr<BuiltPlan>> result ABSL_GUARDED_BY(mu);
};

}  // namespace

std::optional<absl::StatusOr<BuiltPlan>> RunPlanFunctionOnItsOwnThread(
    const PlanFunction& plan, std::shared_ptr<const PlanInput> input,
    const std::atomic<bool>& stop) {
  auto build = std::make_shared<PlanBuild>();
  std::thread([build, plan, input] {
    absl::StatusOr<BuiltPlan> built = RunPlanFunction(plan, *input);
    absl::MutexLock b(&build->mu);
    build->result.emplace(std::move(built));
  }).detach();
  absl::MutexLock b(&build->mu);
  absl::Time stop_seen = absl::InfiniteFuture();
  auto has_result = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(build->mu) {
    return build->result.has_value();
  };
  while (!has_result()) {
    build->mu.AwaitWithTimeout(absl::Condition(&has_result), absl::Milliseconds(50));
    if (stop.load() && stop_seen == absl::InfiniteFuture()) stop_seen = absl::Now();
    if (absl::Now() - stop_seen > kPlanBuildGrace) return std::nullopt;
  }
  return std::move(build->result);
}

}  // namespace refit

// RunPlanFunction's per-pair data-plane choice and what AssembleMemberPlans
// hands each member of it.
#include "server/plan_assembly.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace refit {
namespace {

v1::Registration Member(v1::Side side, int rank, const std::string& host,
                        const std::string& gpu, v1::Transport transport) {
  v1::Registration r;
  v1::MemberIdentity* id = r.mutable_identity();
  id->set_job("job");
  id->set_side(side);
  id->set_engine_id(side == v1::SIDE_ENGINE ? "A" : "");
  id->set_rank(rank);
  id->set_world_size(2);
  id->set_host_id(host);
  id->set_device_uuid(gpu);
  id->set_transport(transport);
  return r;
}

// Two hosts, colocated: trainer r and engine r share GPU r of host r.
PlanInput TwoHosts(v1::Transport transport) {
  PlanInput in;
  in.epoch = 3;
  for (int r = 0; r < 2; ++r) {
    const std::string host = "host" + std::to_string(r);
    const std::string gpu = "GPU-" + std::to_string(r);
    in.trainer.push_back(Member(v1::SIDE_TRAINER, r, host, gpu, transport));
    in.engine.push_back(Member(v1::SIDE_ENGINE, r, host, gpu, transport));
  }
  in.ids = {"t0", "t1", "e0", "e1"};
  return in;
}

// A plan function whose slices are empty and whose pairs are `pairs`.
PlanFunction WithPairs(std::vector<std::pair<int32_t, int32_t>> pairs) {
  return [pairs](const std::vector<v1::Registration>& t,
                 const std::vector<v1::Registration>& e) -> absl::StatusOr<BuiltPlan> {
    BuiltPlan b;
    b.trainer_slices.resize(t.size());
    b.engine_slices.resize(e.size());
    b.pairs = pairs;
    return b;
  };
}

TEST(PlanAssemblyTest, SameHostPairsPullAndPairsAcrossHostsUseTheNetwork) {
  // Trainer 0 (global 0) feeds engines 0 and 1 (globals 2, 3); trainer 1
  // feeds engine 1. Hosts: {0, 2} on host0, {1, 3} on host1.
  const PlanInput in = TwoHosts(v1::TRANSPORT_PULL);
  absl::StatusOr<BuiltPlan> b = RunPlanFunction(WithPairs({{0, 2}, {0, 3}, {1, 3}}), in);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->pull_pairs, 2);
  EXPECT_EQ(b->network_pairs, 1);
  EXPECT_EQ(b->host_of_member, (std::vector<int32_t>{0, 1, 0, 1}));
  EXPECT_EQ(b->network_members, (std::vector<int32_t>{0, 3}));
  const auto plans = AssembleMemberPlans(in, *b, "fp", "kv");
  const v1::Bootstrap& e1 = plans.at("e1").head.bootstrap();
  EXPECT_EQ(e1.global_rank(), 3);
  EXPECT_EQ(std::vector<int32_t>(e1.host_of_member().begin(), e1.host_of_member().end()),
            (std::vector<int32_t>{0, 1, 0, 1}));
  EXPECT_EQ(std::vector<int32_t>(e1.network_members().begin(), e1.network_members().end()),
            (std::vector<int32_t>{0, 3}));
  // Engine A's ranks start at global rank 2 (after the two trainer ranks):
  // errors name global rank 3 "engine A rank 1".
  EXPECT_EQ(std::vector<std::string>(e1.engine_ids().begin(), e1.engine_ids().end()),
            (std::vector<std::string>{"A"}));
  EXPECT_EQ(std::vector<int32_t>(e1.engine_first_ranks().begin(), e1.engine_first_ranks().end()),
            (std::vector<int32_t>{2}));
  EXPECT_EQ(std::vector<int32_t>(e1.engine_rank_counts().begin(), e1.engine_rank_counts().end()),
            (std::vector<int32_t>{2}));
}

TEST(PlanAssemblyTest, ABootstrapNamesOnlyThePeersEnginesHoweverLargeTheFleet) {
  // One trainer rank feeds 1,000 one-rank engines; engine i (global 1 + i)
  // also relays to engine i + 1. A member's bootstrap names its own engine
  // and its peers', so it does not grow with the fleet (5,000 members once
  // made every bootstrap carry 5,000 names: 2.8 GiB in refitd).
  PlanInput in;
  in.trainer.push_back(Member(v1::SIDE_TRAINER, 0, "h", "GPU-t", v1::TRANSPORT_NCCL));
  in.ids.push_back("t0");
  std::vector<std::pair<int32_t, int32_t>> pairs;
  for (int i = 0; i < 1000; ++i) {
    v1::Registration r =
        Member(v1::SIDE_ENGINE, 0, "h", "GPU-" + std::to_string(i), v1::TRANSPORT_NCCL);
    r.mutable_identity()->set_engine_id("e" + std::to_string(1000 + i));
    r.mutable_identity()->set_world_size(1);
    in.engine.push_back(r);
    in.ids.push_back("e" + std::to_string(i));
    pairs.push_back({0, 1 + i});
    if (i + 1 < 1000) pairs.push_back({1 + i, 2 + i});
  }
  absl::StatusOr<BuiltPlan> b = RunPlanFunction(WithPairs(pairs), in);
  ASSERT_TRUE(b.ok()) << b.status();
  const auto plans = AssembleMemberPlans(in, *b, "fp", "kv");
  const v1::Bootstrap& mid = plans.at("e500").head.bootstrap();
  EXPECT_EQ(std::vector<std::string>(mid.engine_ids().begin(), mid.engine_ids().end()),
            (std::vector<std::string>{"e1499", "e1500", "e1501"}));
  EXPECT_EQ(std::vector<int32_t>(mid.engine_first_ranks().begin(), mid.engine_first_ranks().end()),
            (std::vector<int32_t>{500, 501, 502}));
  EXPECT_EQ(std::vector<int32_t>(mid.engine_rank_counts().begin(), mid.engine_rank_counts().end()),
            (std::vector<int32_t>{1, 1, 1}));
  // The trainer rank exchanges with every engine: it names them all.
  EXPECT_EQ(plans.at("t0").head.bootstrap().engine_ids_size(), 1000);
  // A plan function that does not say which pairs exchange: each member
  // names its own engine only.
  absl::StatusOr<BuiltPlan> unsaid = RunPlanFunction(WithPairs({}), in);
  ASSERT_TRUE(unsaid.ok()) << unsaid.status();
  const auto bare = AssembleMemberPlans(in, *unsaid, "fp", "kv");
  const v1::Bootstrap& own = bare.at("e500").head.bootstrap();
  EXPECT_EQ(std::vector<std::string>(own.engine_ids().begin(), own.engine_ids().end()),
            (std::vector<std::string>{"e1500"}));
  EXPECT_EQ(bare.at("t0").head.bootstrap().engine_ids_size(), 0);
}

TEST(PlanAssemblyTest, OneHostNeedsNoNetworkAndNcclNeedsNoHosts) {
  PlanInput in = TwoHosts(v1::TRANSPORT_PULL);
  for (auto* side : {&in.trainer, &in.engine}) {
    for (v1::Registration& r : *side) r.mutable_identity()->set_host_id("host0");
  }
  absl::StatusOr<BuiltPlan> b = RunPlanFunction(WithPairs({{0, 2}, {1, 3}}), in);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->pull_pairs, 2);
  EXPECT_EQ(b->network_pairs, 0);
  EXPECT_TRUE(b->network_members.empty());

  // NCCL with one GPU per member: every pair on the network, no hosts sent.
  PlanInput nccl = TwoHosts(v1::TRANSPORT_NCCL);
  nccl.engine[0].mutable_identity()->set_device_uuid("GPU-2");
  nccl.engine[1].mutable_identity()->set_device_uuid("GPU-3");
  b = RunPlanFunction(WithPairs({}), nccl);  // no pairs given: every pair
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->pull_pairs, 0);
  EXPECT_EQ(b->network_pairs, 4);
  EXPECT_TRUE(b->host_of_member.empty());
  const auto plans = AssembleMemberPlans(nccl, *b, "fp", "kv");
  EXPECT_EQ(plans.at("t0").head.bootstrap().network_members_size(), 0);
}

TEST(PlanAssemblyTest, MembersSharingAGpuCannotBothUseTheNetwork) {
  // Trainer 1 and engine 1 share GPU-1 and both have a pair across hosts.
  absl::StatusOr<BuiltPlan> b =
      RunPlanFunction(WithPairs({{0, 3}, {1, 2}}), TwoHosts(v1::TRANSPORT_PULL));
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(b.status().message().find("share GPU GPU-0"), std::string::npos)
      << b.status();
  EXPECT_NE(b.status().message().find("NCCL connects one rank per GPU"), std::string::npos);
}

}  // namespace
}  // namespace refit

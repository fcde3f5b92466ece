// Tests of refitd's default plan function: registrations in, per-member
// slices out, and errors that name the member and the parameter.
#include "server/default_plan.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "mapping/layout_builder.h"
#include "mapping/mapping.h"
#include "mapping/model_config.h"
#include "mapping/parallel_spec.h"
#include "plan/plan_codec.h"

namespace refit {
namespace {

constexpr char kModel[] = "tiny-qwen3";

// The registration a member of `convention` at `rank` sends: exactly the
// buffers the mapping expects of it.
v1::Registration Member(bool trainer, const std::string& convention, int rank,
                        const std::string& engine_id = "") {
  absl::StatusOr<ModelConfig> model = LoadModelConfig(kModel);
  EXPECT_TRUE(model.ok()) << model.status();
  absl::StatusOr<MappedSide> side;
  int world = 0;
  if (trainer) {
    auto ts = ParseTrainerSpec(convention);
    EXPECT_TRUE(ts.ok());
    world = ts->world_size();
    side = BuildTrainerLayout(*model, *ts);
  } else {
    auto es = ParseEngineSpec(convention);
    EXPECT_TRUE(es.ok());
    world = es->world_size();
    side = BuildEngineLayout(*model, *es);
  }
  EXPECT_TRUE(side.ok()) << side.status();
  v1::Registration r;
  v1::MemberIdentity* id = r.mutable_identity();
  id->set_job("job");
  id->set_side(trainer ? v1::SIDE_TRAINER : v1::SIDE_ENGINE);
  id->set_engine_id(engine_id);
  id->set_rank(rank);
  id->set_world_size(world);
  id->set_host_id(absl::StrCat("host", rank));
  r.set_model_config(kModel);
  r.set_convention(convention);
  for (const LocalBuffer& lb : RankBuffers(*side, rank)) {
    v1::LocalBuffer* b = r.add_buffers();
    b->set_name(lb.name);
    for (int64_t d : lb.shape) b->add_shape(d);
    b->set_dtype(static_cast<int32_t>(lb.dtype));
    b->set_byte_size(lb.byte_size);
  }
  return r;
}

struct Membership {
  std::vector<v1::Registration> trainer, engine;
};

// Megatron TP2 -> engine "a" (vLLM TP2) and engine "b" (vLLM TP1 x DP2).
Membership TwoEngines() {
  Membership m;
  for (int r = 0; r < 2; ++r) m.trainer.push_back(Member(true, "megatron:tp=2", r));
  for (int r = 0; r < 2; ++r) m.engine.push_back(Member(false, "vllm:tp=2", r, "a"));
  for (int r = 0; r < 2; ++r) m.engine.push_back(Member(false, "vllm:tp=1,dp=2", r, "b"));
  return m;
}

TEST(DefaultPlanTest, AMemberWithoutAHostLeavesThePlacementUnknown) {
  Membership m = TwoEngines();
  absl::StatusOr<BuiltPlan> placed = DefaultPlanFunction()(m.trainer, m.engine);
  ASSERT_TRUE(placed.ok()) << placed.status();
  m.engine[1].mutable_identity()->clear_host_id();
  absl::StatusOr<BuiltPlan> partial = DefaultPlanFunction()(m.trainer, m.engine);
  ASSERT_TRUE(partial.ok()) << partial.status();
  for (auto* side : {&m.trainer, &m.engine}) {
    for (v1::Registration& r : *side) r.mutable_identity()->clear_host_id();
  }
  absl::StatusOr<BuiltPlan> unknown = DefaultPlanFunction()(m.trainer, m.engine);
  ASSERT_TRUE(unknown.ok()) << unknown.status();
  EXPECT_EQ(partial->fingerprint, unknown->fingerprint);
  EXPECT_NE(placed->fingerprint, unknown->fingerprint);
}

TEST(DefaultPlanTest, EveryMemberGetsItsSliceAndEveryEngineByteASource) {
  Membership m = TwoEngines();
  DefaultPlanOptions o;
  o.planner.num_lanes = 3;
  absl::StatusOr<BuiltPlan> built = DefaultPlanFunction(o)(m.trainer, m.engine);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(built->num_lanes, 3);
  ASSERT_EQ(built->trainer_slices.size(), 2u);
  ASSERT_EQ(built->engine_slices.size(), 4u);
  // Engines are one destination side: a's ranks 0-1, then b's 2-3. Each
  // engine member receives exactly the bytes of its registered buffers
  // (no padding in tiny-qwen3 at these sizes would be unsourced otherwise).
  int64_t sent = 0, received = 0;
  // The pairs (trainer rank, engine global rank) are the slices' messages'.
  std::vector<std::pair<int32_t, int32_t>> pairs;
  for (const std::string& bytes : built->trainer_slices) {
    v1::PlanProto p;
    ASSERT_TRUE(p.ParseFromString(bytes));
    absl::StatusOr<Plan> s = FromProto(p);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->src.world_size, 2);
    EXPECT_EQ(s->dst.world_size, 4);
    for (const Message& msg : s->messages) {
      sent += msg.bytes;
      pairs.emplace_back(msg.src_rank, 2 + msg.dst_rank);
    }
  }
  std::sort(pairs.begin(), pairs.end());
  pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
  EXPECT_EQ(built->pairs, pairs);
  EXPECT_FALSE(pairs.empty());
  for (size_t i = 0; i < m.engine.size(); ++i) {
    v1::PlanProto p;
    ASSERT_TRUE(p.ParseFromString(built->engine_slices[i]));
    absl::StatusOr<Plan> s = FromProto(p);
    ASSERT_TRUE(s.ok()) << s.status();
    int64_t mine = 0, registered = 0;
    for (const Message& msg : s->messages) {
      EXPECT_EQ(msg.dst_rank, static_cast<int>(i)) << "engine member " << i;
      mine += msg.bytes;
    }
    for (const v1::LocalBuffer& b : m.engine[i].buffers()) registered += b.byte_size();
    EXPECT_LE(mine, registered);
    EXPECT_GT(mine, registered / 2) << "engine member " << i;
    received += mine;
  }
  EXPECT_EQ(sent, received);
  // The figures refitd logs: the plan's bytes and its predicted time.
  EXPECT_EQ(built->bytes, sent);
  EXPECT_GT(built->predicted_seconds, 0);
  // The plan's own fingerprint, carried by every slice; other planner
  // options give another plan and another fingerprint.
  EXPECT_EQ(built->fingerprint.size(), 32u);
  for (const std::string& bytes : built->trainer_slices) {
    v1::PlanProto p;
    ASSERT_TRUE(p.ParseFromString(bytes));
    EXPECT_EQ(p.fingerprint(), built->fingerprint);
  }
  o.planner.staging_budget_bytes = 1 << 20;
  absl::StatusOr<BuiltPlan> other = DefaultPlanFunction(o)(m.trainer, m.engine);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_NE(other->fingerprint, built->fingerprint);
}

// Members on host memory (no device_uuid): at Gloo's speeds the host delta
// codec loses to the links and delta rounds run dense, saying why; on a
// slow link they run delta. Members with GPUs get no note.
TEST(DefaultPlanTest, HostMembersRunDeltaDenseOnFastLinksAndDeltaOnSlowOnes) {
  Membership m = TwoEngines();
  DefaultPlanOptions o;
  absl::StatusOr<BuiltPlan> fast = DefaultPlanFunction(o)(m.trainer, m.engine);
  ASSERT_TRUE(fast.ok()) << fast.status();
  EXPECT_TRUE(fast->host_delta_dense);
  EXPECT_TRUE(absl::StartsWith(fast->host_delta_note, "delta rounds run dense: the host delta "
                                                      "codec (0.20 GB/s a member)"))
      << fast->host_delta_note;
  o.host_delta.links.same_gpu_gbps = o.host_delta.links.intra_host_gbps =
      o.host_delta.links.inter_host_gbps = 0.01;
  absl::StatusOr<BuiltPlan> slow = DefaultPlanFunction(o)(m.trainer, m.engine);
  ASSERT_TRUE(slow.ok()) << slow.status();
  EXPECT_FALSE(slow->host_delta_dense);
  EXPECT_TRUE(absl::StartsWith(slow->host_delta_note, "delta rounds run: ")) << slow->host_delta_note;
  // The prediction is the same model's, at those links.
  EXPECT_GT(slow->predicted_seconds, 100 * fast->predicted_seconds);
  for (auto* side : {&m.trainer, &m.engine}) {
    for (v1::Registration& r : *side) {
      r.mutable_identity()->set_device_uuid(absl::StrCat("GPU-", r.identity().rank()));
    }
  }
  absl::StatusOr<BuiltPlan> gpus = DefaultPlanFunction(o)(m.trainer, m.engine);
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  EXPECT_FALSE(gpus->host_delta_dense);
  EXPECT_TRUE(gpus->host_delta_note.empty());
}

TEST(DefaultPlanTest, BufferDisagreeingWithTheMappingNamesMemberAndParameter) {
  Membership m = TwoEngines();
  v1::LocalBuffer* b = m.trainer[1].mutable_buffers(0);
  const std::string name = b->name();
  b->set_shape(0, b->shape(0) + 1);
  absl::StatusOr<BuiltPlan> built = DefaultPlanFunction()(m.trainer, m.engine);
  ASSERT_FALSE(built.ok());
  EXPECT_EQ(built.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(built.status().message().find("trainer rank 1"), std::string::npos)
      << built.status();
  EXPECT_NE(built.status().message().find(name), std::string::npos) << built.status();
}

TEST(DefaultPlanTest, UnknownParameterOnAnEngineIsNamed) {
  Membership m = TwoEngines();
  m.engine[3].mutable_buffers(0)->set_name("model.layers.0.not_a_weight");
  absl::StatusOr<BuiltPlan> built = DefaultPlanFunction()(m.trainer, m.engine);
  ASSERT_FALSE(built.ok());
  EXPECT_NE(built.status().message().find("engine 'b' rank 1"), std::string::npos)
      << built.status();
  EXPECT_NE(built.status().message().find("model.layers.0.not_a_weight"),
            std::string::npos)
      << built.status();
}

TEST(DefaultPlanTest, DisagreementsAndImpossibleLayoutsAreRefused) {
  {
    Membership m = TwoEngines();
    m.engine[0].set_model_config("tiny-llama");
    auto built = DefaultPlanFunction()(m.trainer, m.engine);
    ASSERT_FALSE(built.ok());
    EXPECT_NE(built.status().message().find("model_config"), std::string::npos)
        << built.status();
  }
  {
    Membership m = TwoEngines();
    m.engine[1].set_convention("vllm:tp=1");  // engine a: tp=2 vs tp=1
    auto built = DefaultPlanFunction()(m.trainer, m.engine);
    ASSERT_FALSE(built.ok());
    EXPECT_NE(built.status().message().find("convention"), std::string::npos)
        << built.status();
  }
  {
    Membership m = TwoEngines();
    m.trainer.pop_back();  // megatron:tp=2 needs 2 ranks
    auto built = DefaultPlanFunction()(m.trainer, m.engine);
    ASSERT_FALSE(built.ok());
    EXPECT_NE(built.status().message().find("2 ranks but 1 registered"),
              std::string::npos)
        << built.status();
  }
  {
    // tiny-qwen3 has 4 heads: TP 3 cannot split them.
    Membership m = TwoEngines();
    for (auto& e : m.engine) e.set_convention("vllm:tp=3");
    auto built = DefaultPlanFunction()(m.trainer, m.engine);
    ASSERT_FALSE(built.ok());
    EXPECT_NE(built.status().message().find("engine 'a'"), std::string::npos)
        << built.status();
  }
  {
    Membership m = TwoEngines();
    for (auto* side : {&m.trainer, &m.engine}) {
      for (auto& r : *side) r.set_model_config("/etc/passwd");
    }
    auto built = DefaultPlanFunction()(m.trainer, m.engine);
    ASSERT_FALSE(built.ok());  // a peer cannot make refitd read a file
    EXPECT_NE(built.status().message().find("model_config"), std::string::npos)
        << built.status();
  }
}

TEST(DefaultPlanTest, HugeConventionWorldIsRefusedBeforeAnyLayout) {
  // One trainer rank whose convention claims 2^20 ranks: refused against
  // the members registered, without sizing anything by that world.
  Membership m;
  m.trainer.push_back(Member(true, "megatron:tp=1", 0));
  m.trainer[0].set_convention("megatron:dp=1048576");
  m.engine.push_back(Member(false, "vllm:tp=1", 0, "a"));
  const absl::Time start = absl::Now();
  absl::StatusOr<BuiltPlan> built = DefaultPlanFunction()(m.trainer, m.engine);
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  ASSERT_EQ(built.status().code(), absl::StatusCode::kInvalidArgument) << built.status();
  EXPECT_NE(built.status().message().find("has 1048576 ranks but 1 registered"),
            std::string::npos)
      << built.status();

  m.trainer[0].set_convention("megatron:tp=1");
  m.engine[0].set_convention("vllm:tp=1,dp=1048576");
  built = DefaultPlanFunction()(m.trainer, m.engine);
  ASSERT_EQ(built.status().code(), absl::StatusCode::kInvalidArgument) << built.status();
  EXPECT_NE(built.status().message().find("engine 'a' rank 0"), std::string::npos)
      << built.status();
}

TEST(DefaultPlanTest, PlanOverTheMemoryBudgetIsRefusedNamingIt) {
  Membership m = TwoEngines();
  DefaultPlanOptions o;
  o.max_plan_bytes = 64 << 10;
  o.budget_name = "--max_plan_mib";
  absl::StatusOr<BuiltPlan> built = DefaultPlanFunction(o)(m.trainer, m.engine);
  ASSERT_EQ(built.status().code(), absl::StatusCode::kResourceExhausted) << built.status();
  EXPECT_NE(built.status().message().find("--max_plan_mib"), std::string::npos)
      << built.status();
}

}  // namespace
}  // namespace refit

// Fuzzing what members send refitd: the registrations of a real membership
// (Megatron TP2 trainer, a vLLM TP2 engine, tiny Qwen3-MoE) with one of them
// mutated — identity, convention, model, buffer names, shapes, dtypes and
// byte sizes.
//
// The property links peer input to memory: refitd's checks
// (ValidateRegistration, then the plan function) refuse the mutant, or the
// plan they accept gives each member a slice whose own buffers are exactly
// the ones it registered (same names, same byte sizes) and whose copies
// stay inside them. A slice that disagreed with a member's registered size
// would make it write past its own buffer.
#include <map>
#include <random>
#include <string>
#include <vector>

#include "google/protobuf/stubs/logging.h"
#include "gtest/gtest.h"
#include "mapping/layout_builder.h"
#include "mapping/mapping.h"
#include "mapping/model_config.h"
#include "mapping/parallel_spec.h"
#include "plan/plan_codec.h"
#include "server/default_plan.h"
#include "server/registration.h"
#include "tests/fuzz/fuzz_util.h"

namespace refit {
namespace {

constexpr int kMutants = 4000;

std::vector<v1::Registration> Side(const ModelConfig& m, bool trainer,
                                   const std::string& convention) {
  MappedSide side = trainer ? *BuildTrainerLayout(m, *ParseTrainerSpec(convention))
                            : *BuildEngineLayout(m, *ParseEngineSpec(convention));
  std::vector<v1::Registration> out;
  for (int32_t r = 0; r < side.layout.world_size; ++r) {
    v1::Registration reg;
    auto* id = reg.mutable_identity();
    id->set_job("fuzz");
    id->set_side(trainer ? v1::SIDE_TRAINER : v1::SIDE_ENGINE);
    if (!trainer) id->set_engine_id("e0");
    id->set_rank(r);
    id->set_world_size(side.layout.world_size);
    id->set_host_id("h");
    id->set_device("cpu");
    reg.set_model_config("tiny-qwen3-moe");
    reg.set_convention(convention);
    for (const LocalBuffer& lb : RankBuffers(side, r)) {
      v1::LocalBuffer* b = reg.add_buffers();
      b->set_name(lb.name);
      for (int64_t d : lb.shape) b->add_shape(d);
      b->set_dtype(static_cast<int32_t>(lb.dtype));
      b->set_byte_size(lb.byte_size);
    }
    out.push_back(std::move(reg));
  }
  return out;
}

// "" if the slice's own side holds exactly `reg`'s buffers.
std::string SameBuffers(const Plan& slice, bool trainer, int32_t rank,
                        const v1::Registration& reg) {
  const SideLayout& own = trainer ? slice.src : slice.dst;
  std::map<std::string, int64_t> registered;
  for (const v1::LocalBuffer& b : reg.buffers()) registered[b.name()] = b.byte_size();
  for (const BufferSpec& b : own.buffers) {
    if (b.rank != rank) continue;
    auto it = registered.find(b.name);
    if (it == registered.end()) return "the slice names an unregistered buffer " + b.name;
    if (it->second != b.byte_size) {
      return absl::StrCat("buffer ", b.name, ": slice ", b.byte_size, " bytes, registered ",
                          it->second);
    }
  }
  return "";
}

TEST(RegistrationFuzz, AcceptedMembershipsPlanWithinTheRegisteredBuffers) {
  google::protobuf::SetLogHandler(nullptr);
  const ModelConfig model = *LoadModelConfig("tiny-qwen3-moe");
  const std::vector<v1::Registration> trainer = Side(model, true, "megatron:tp=2");
  const std::vector<v1::Registration> engine = Side(model, false, "vllm:tp=2");
  const PlanFunction plan_function = DefaultPlanFunction();
  ASSERT_TRUE(plan_function(trainer, engine).ok());
  std::mt19937_64 rng(20261123);
  int refused_by_checks = 0, refused_by_plan = 0, planned = 0;
  for (int i = 0; i < kMutants; ++i) {
    std::vector<v1::Registration> t = trainer, e = engine;
    const bool mutate_trainer = rng() % 2;
    auto& side = mutate_trainer ? t : e;
    fuzz::MutateInPlace(rng, &side[rng() % side.size()]);
    bool valid = true;
    for (const auto* v : {&t, &e}) {
      for (const v1::Registration& r : *v) valid &= ValidateRegistration(r, 1 << 20, 64 << 20).ok();
    }
    if (!valid) {
      ++refused_by_checks;
      continue;
    }
    absl::StatusOr<BuiltPlan> built = plan_function(t, e);
    if (!built.ok()) {
      ++refused_by_plan;
      EXPECT_TRUE(absl::IsInvalidArgument(built.status())) << built.status();
      continue;
    }
    ++planned;
    ASSERT_EQ(built->trainer_slices.size(), t.size());
    ASSERT_EQ(built->engine_slices.size(), e.size());
    for (int side_index = 0; side_index < 2; ++side_index) {
      const bool is_trainer = side_index == 0;
      const auto& regs = is_trainer ? t : e;
      const auto& slices = is_trainer ? built->trainer_slices : built->engine_slices;
      for (size_t k = 0; k < regs.size(); ++k) {
        v1::PlanProto proto;
        ASSERT_TRUE(proto.ParseFromString(slices[k]));
        absl::StatusOr<Plan> slice = FromProto(proto);
        ASSERT_TRUE(slice.ok()) << slice.status();
        const std::string same = SameBuffers(*slice, is_trainer,
                                             regs[k].identity().rank(), regs[k]);
        ASSERT_EQ(same, "") << "mutant " << i << ", " << (is_trainer ? "trainer" : "engine")
                            << " rank " << regs[k].identity().rank();
        ASSERT_EQ(fuzz::CheckPlanInBounds(*slice), "") << "mutant " << i;
      }
    }
  }
  std::printf("registrations: %d memberships planned (checked), %d refused by refitd's "
              "checks, %d by the plan function\n",
              planned, refused_by_checks, refused_by_plan);
  EXPECT_GT(planned, 100);
  EXPECT_GT(refused_by_checks + refused_by_plan, 500);
}

}  // namespace
}  // namespace refit

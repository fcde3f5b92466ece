// Fuzzing the one piece of peer input that decides where a member writes:
// its plan slice from refitd. Real slices (Megatron TP2 x EP2 -> vLLM TP2
// of a tiny Qwen3-MoE: fused qkv / w13, experts, interleaved dims) are
// mutated — fields set to edge values through reflection, repeated
// elements dropped or duplicated, bytes flipped or cut — and decoded.
//
// The property: FromProto never crashes, and for every slice it accepts,
// every copy the executor would run (PackProgram / UnpackProgram, and the
// zero-copy ranges) stays inside the buffers and the message's stream.
// A slice that passed FromProto but pointed outside a buffer would make an
// engine write over its own memory.
#include <random>
#include <string>
#include <vector>

#include "google/protobuf/stubs/logging.h"
#include "gtest/gtest.h"
#include "mapping/mapping.h"
#include "mapping/model_config.h"
#include "mapping/parallel_spec.h"
#include "plan/plan_codec.h"
#include "plan/planner.h"
#include "tests/fuzz/fuzz_util.h"

namespace refit {
namespace {

constexpr int kMutantsPerSlice = 1500;

Plan RealPlan() {
  ModelConfig model = *LoadModelConfig("tiny-qwen3-moe");
  MappedSide src =
      *BuildTrainerLayout(model, *ParseTrainerSpec("megatron:tp=2,ep=2,etp=1"));
  MappedSide dst = *BuildEngineLayout(model, *ParseEngineSpec("vllm:tp=2"));
  PlannerOptions o;
  o.staging_budget_bytes = 4096;  // many messages, some contiguous
  o.direct_min_bytes = 256;
  absl::StatusOr<Plan> p = BuildPlan(src.layout, dst.layout, o);
  EXPECT_TRUE(p.ok()) << p.status();
  return *p;
}

// One mutant of `base`: structural edits, or (1 in 8) a byte-level one.
std::string Mutate(std::mt19937_64& rng, const v1::PlanProto& base) {
  if (rng() % 8 == 0) return fuzz::MutateBytes(rng, base.SerializeAsString());
  v1::PlanProto p = base;
  fuzz::MutateInPlace(rng, &p);
  return p.SerializeAsString();
}

TEST(PlanSliceFuzz, AcceptedSlicesNeverPointOutsideTheBuffers) {
  google::protobuf::SetLogHandler(nullptr);  // bytes flipped in strings: noise
  const Plan plan = RealPlan();
  // Every rank's slice on both sides.
  std::vector<v1::PlanProto> seeds;
  for (int r = 0; r < plan.src.world_size; ++r) {
    seeds.push_back(ToProto(ExtractSlice(plan, Side::kTrainer, r)));
  }
  for (int r = 0; r < plan.dst.world_size; ++r) {
    seeds.push_back(ToProto(ExtractSlice(plan, Side::kEngine, r)));
  }
  std::mt19937_64 rng(20261123);
  int accepted = 0, rejected = 0, unparsable = 0;
  for (size_t s = 0; s < seeds.size(); ++s) {
    ASSERT_GT(seeds[s].messages_size(), 0) << "seed " << s;
    for (int i = 0; i < kMutantsPerSlice; ++i) {
      const std::string bytes = Mutate(rng, seeds[s]);
      v1::PlanProto proto;
      if (!proto.ParseFromString(bytes)) {
        ++unparsable;
        continue;
      }
      absl::StatusOr<Plan> p = FromProto(proto);
      if (!p.ok()) {
        ++rejected;
        EXPECT_TRUE(absl::IsInvalidArgument(p.status())) << p.status();
        continue;
      }
      ++accepted;
      const std::string err = fuzz::CheckPlanInBounds(*p);
      ASSERT_EQ(err, "") << "seed " << s << " mutant " << i
                         << ": FromProto accepted a slice that " << err << "\n"
                         << proto.ShortDebugString().substr(0, 2000);
    }
  }
  std::printf("slices: %d mutants accepted (checked), %d rejected, %d unparsable\n",
              accepted, rejected, unparsable);
  // The property is only worth something if both outcomes occur often.
  EXPECT_GT(accepted, 200);
  EXPECT_GT(rejected, 1000);
}

}  // namespace
}  // namespace refit

// Fuzzing the planner's validation with layouts it is given: real trainer
// and engine layouts (Megatron TP2 x EP2 -> vLLM TP2 of a tiny Qwen3-MoE;
// FSDP -> SGLang of a tiny DeepSeek-V3 in FP8) with records, buffers and
// tensors mutated — boxes, offsets, strides, buffer indices and steps,
// sizes, ranks.
//
// The property: BuildPlan never crashes, and for every pair of layouts it
// accepts, every copy of the plan stays inside the buffers (as for slices),
// the reference copy runs, and — when the mutated source is still
// self-consistent (its pattern reads back) — every destination byte of
// every record holds its source's value: "every engine byte has exactly
// one source" is a claim about memory, checked here on memory. Mutants go
// through FromProto first (as a peer's layout would), which refuses most;
// the rest reach BuildPlan. A buffer may be accepted at any size: only
// mutants whose buffers total at most 64 MiB are copied.
#include <algorithm>
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
#include "testing/reference_copy.h"
#include "tests/fuzz/fuzz_util.h"

namespace refit {
namespace {

constexpr int kMutantsPerCase = 1500;
constexpr int64_t kMaxBytesToCopy = int64_t{64} << 20;

// The two sides of a real case as a PlanProto with only the layouts.
v1::PlanProto Sides(const char* model, const char* trainer, const char* engine) {
  ModelConfig m = *LoadModelConfig(model);
  MappedSide s = *BuildTrainerLayout(m, *ParseTrainerSpec(trainer));
  MappedSide d = *BuildEngineLayout(m, *ParseEngineSpec(engine));
  v1::PlanProto proto = ToProto(*BuildPlan(s.layout, d.layout, PlannerOptions{}));
  proto.clear_messages();
  proto.clear_segments();
  proto.clear_waves();
  return proto;
}

TEST(PlannerFuzz, AcceptedLayoutsPlanInBoundsAndCorrectly) {
  google::protobuf::SetLogHandler(nullptr);
  std::mt19937_64 rng(20261123);
  int undecodable = 0, rejected = 0, planned = 0, copied = 0, checked = 0;
  const std::vector<v1::PlanProto> cases = {
      Sides("tiny-qwen3-moe", "megatron:tp=2,ep=2,etp=1", "vllm:tp=2"),
      Sides("tiny-deepseek-v3-fp8", "fsdp:dp=2", "sglang:tp=2")};
  for (size_t c = 0; c < cases.size(); ++c) {
    // The unmutated case plans: the property below is not vacuous.
    absl::StatusOr<Plan> sides = FromProto(cases[c]);
    ASSERT_TRUE(sides.ok()) << sides.status();
    absl::Status plans = BuildPlan(sides->src, sides->dst, PlannerOptions{}).status();
    ASSERT_TRUE(plans.ok()) << "case " << c << ": " << plans;
    for (int i = 0; i < kMutantsPerCase; ++i) {
      v1::PlanProto m = cases[c];
      // Mutate one side only, so that the other stays a real layout.
      fuzz::MutateInPlace(rng, rng() % 2 ? m.mutable_src() : m.mutable_dst());
      absl::StatusOr<Plan> layouts = FromProto(m);
      if (!layouts.ok()) {
        ++undecodable;
        continue;
      }
      PlannerOptions o;
      o.staging_budget_bytes = 4096;
      o.direct_min_bytes = 256;
      absl::StatusOr<Plan> plan = BuildPlan(layouts->src, layouts->dst, o);
      if (!plan.ok()) {
        ++rejected;
        EXPECT_TRUE(absl::IsInvalidArgument(plan.status())) << plan.status();
        continue;
      }
      ++planned;
      const std::string err = fuzz::CheckPlanInBounds(*plan);
      ASSERT_EQ(err, "") << "case " << c << " mutant " << i << ": " << err;
      int64_t bytes = 0;  // (a buffer may be huge: no sum past the cap)
      for (const auto* side : {&plan->src, &plan->dst}) {
        for (const BufferSpec& b : side->buffers) {
          bytes = b.byte_size > kMaxBytesToCopy ? kMaxBytesToCopy + 1
                                                : std::min(bytes + b.byte_size, kMaxBytesToCopy + 1);
        }
      }
      if (bytes > kMaxBytesToCopy) continue;
      OwnedBuffers s = AllocateBuffers(plan->src);
      OwnedBuffers d = AllocateBuffers(plan->dst);
      FillPattern(plan->src, s.ptrs, {-1, 5});
      absl::Status copy = ReferenceCopy(*plan, s.ptrs, d.ptrs);
      ASSERT_TRUE(copy.ok()) << "case " << c << " mutant " << i << ": " << copy;
      ++copied;
      // A source whose records overlap cannot hold every tensor's pattern;
      // what arrives is then not comparable.
      if (!CheckPattern(plan->src, s.ptrs, {-1, 5}).ok()) continue;
      absl::Status got = CheckPattern(plan->dst, d.ptrs, {-1, 5});
      ASSERT_TRUE(got.ok()) << "case " << c << " mutant " << i
                            << ": the planner accepted layouts and moved wrong bytes: "
                            << got << "\n" << m.ShortDebugString().substr(0, 3000);
      ++checked;
    }
  }
  std::printf("layouts: %d planned (%d copied, %d checked byte for byte), %d rejected "
              "by the planner, %d by the decoder\n",
              planned, copied, checked, rejected, undecodable);
  EXPECT_GT(checked, 100);
  EXPECT_GT(rejected + undecodable, 1000);
}

}  // namespace
}  // namespace refit

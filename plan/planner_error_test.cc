// Tests of BuildPlan's validation: every error names tensor, box, buffer
// and rank as planner.h says.
#include <atomic>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "layout/dtype.h"
#include "layout/mesh.h"
#include "layout/sharding.h"
#include "plan/planner.h"

namespace refit {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// ---- validation errors ----

struct TwoSides {
  SideLayout src, dst;
};

TwoSides Simple(TensorSpec ts, TensorSpec td) {
  TwoSides s;
  s.src.world_size = 2;
  s.dst.world_size = 2;
  EXPECT_TRUE(AddTensor(s.src, ts).ok());
  EXPECT_TRUE(AddTensor(s.dst, td).ok());
  EXPECT_TRUE(AddDenseShards(s.src, 0, *Mesh::Make({"tp"}, {2}), {Placement::Shard(0)}).ok());
  EXPECT_TRUE(AddDenseShards(s.dst, 0, *Mesh::Make({"tp"}, {2}), {Placement::Shard(1)}).ok());
  return s;
}

// An FP8 engine tensor from a BF16 trainer needs its block scales; f32 to
// bf16 is no conversion refit makes.
TEST(PlannerErrorTest, ACancelledBuildStopsAfterItsPhase) {
  TwoSides s = Simple({"w", {4, 4}, DType::kBF16}, {"w", {4, 4}, DType::kBF16});
  std::atomic<bool> cancel{false};
  PlannerOptions o;
  o.cancel = &cancel;
  EXPECT_TRUE(BuildPlan(s.src, s.dst, o).ok());
  cancel.store(true);
  absl::StatusOr<Plan> p = BuildPlan(s.src, s.dst, o);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(p.status().message(), HasSubstr("after phase validate"));
}

TEST(PlannerErrorTest, DtypeMismatchWithoutConversion) {
  TwoSides s = Simple({"w", {4, 4}, DType::kBF16}, {"w", {4, 4}, DType::kF8E4M3});
  absl::StatusOr<Plan> p = BuildPlan(s.src, s.dst, PlannerOptions());
  ASSERT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(),
              HasSubstr("tensor w (rank 0, parameter w): the engine holds f8e4m3 and the "
                        "trainer bf16"));
  EXPECT_THAT(p.status().message(), HasSubstr("this tensor declares none"));
  TwoSides t = Simple({"w", {4, 4}, DType::kF32}, {"w", {4, 4}, DType::kBF16});
  p = BuildPlan(t.src, t.dst, PlannerOptions());
  EXPECT_THAT(p.status().message(),
              HasSubstr("tensor w (rank 0, parameter w): the engine holds bf16"));
}

// A tensor's format must agree with its dtype: NVFP4 codes are u8, so an
// engine layout saying nvfp4 of a bf16 tensor is refused before planning,
// naming the side, the tensor, the rank and the parameter holding it.
TEST(PlannerErrorTest, AFormatThatDisagreesWithTheDtypeIsRefused) {
  TwoSides s = Simple({"w", {4, 4}, DType::kBF16}, {"w", {4, 4}, DType::kBF16});
  s.dst.tensors[0].format = QuantFormat::kNvfp4;
  s.dst.tensors[0].quant_role = QuantRole::kCodes;
  absl::StatusOr<Plan> p = BuildPlan(s.src, s.dst, PlannerOptions());
  ASSERT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(),
              HasSubstr("engine: tensor w: format nvfp4 holds its codes as u8, not bf16 "
                        "(rank 0, parameter w)"));
  // A format on the trainer side that the engine's tensor does not have.
  TwoSides t = Simple({"w", {4, 4}, DType::kF8E4M3}, {"w", {4, 4}, DType::kF8E4M3});
  t.src.tensors[0].format = QuantFormat::kMxfp8;
  t.src.tensors[0].quant_role = QuantRole::kCodes;
  p = BuildPlan(t.src, t.dst, PlannerOptions());
  ASSERT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(),
              HasSubstr("tensor w (rank 0, parameter w): the trainer holds it as format "
                        "mxfp8 codes and the engine as f8e4m3"));
}

TEST(PlannerErrorTest, ShapeAndStackedMismatch) {
  TwoSides s = Simple({"w", {4, 4}, DType::kBF16}, {"w", {4, 6}, DType::kBF16});
  absl::StatusOr<Plan> p = BuildPlan(s.src, s.dst, PlannerOptions());
  EXPECT_THAT(p.status().message(), HasSubstr("tensor w differs"));
  TensorSpec a{"e.{}.w", {4, 4}, DType::kBF16, true};
  TensorSpec b{"e.{}.w", {4, 4}, DType::kBF16, false};
  TwoSides s2 = Simple(a, b);
  p = BuildPlan(s2.src, s2.dst, PlannerOptions());
  EXPECT_THAT(p.status().message(), HasSubstr("(stacked)"));
}

TEST(PlannerErrorTest, MissingTensorNamed) {
  TwoSides s = Simple({"w", {4, 4}, DType::kBF16}, {"v", {4, 4}, DType::kBF16});
  absl::StatusOr<Plan> p = BuildPlan(s.src, s.dst, PlannerOptions());
  EXPECT_THAT(p.status().message(), HasSubstr("engine tensor v bf16[4, 4] has no trainer tensor"));
}

TEST(PlannerErrorTest, NoSourceNamesStackedPartAndRank) {
  TensorSpec t{"e.{}.w", {4, 4}, DType::kBF16, true};
  TwoSides s = Simple(t, t);
  s.src.records.pop_back();  // experts 2..3 have no source
  absl::StatusOr<Plan> p = BuildPlan(s.src, s.dst, PlannerOptions());
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(),
              HasSubstr("no source for 4 of 8 elements of e.{0..3}.w [0:2] on engine rank 0"));
  EXPECT_THAT(p.status().message(), HasSubstr("on engine rank 1"));
}

TEST(PlannerErrorTest, OverlapUnsourcedAndOutsideBuffer) {
  TensorSpec t{"w", {4, 4}, DType::kBF16};
  TwoSides s = Simple(t, t);
  // Rank 0's buffer grows by 8 unsourced bytes, 2 of them declared padding.
  s.dst.buffers[0].byte_size += 8;
  s.dst.buffers[0].padding.push_back(ByteRange{16, 2});
  // Rank 1 gets a second record of the same box at offset 8: overlap.
  Record dup = s.dst.records[1];
  dup.byte_offset = 8;
  s.dst.buffers[1].byte_size += 8;
  s.dst.records.push_back(dup);
  absl::StatusOr<Plan> p = BuildPlan(s.src, s.dst, PlannerOptions());
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(),
              HasSubstr("unsourced bytes [18, 24) of buffer w on engine rank 0"));
  EXPECT_THAT(p.status().message(),
              HasSubstr("records w [0:4, 2:4] and w [0:4, 2:4] overlap at byte 8 of "
                        "buffer w on engine rank 1"));
  // A record outside its buffer.
  TwoSides o = Simple(t, t);
  o.dst.records[0].byte_offset = 4;
  p = BuildPlan(o.src, o.dst, PlannerOptions());
  EXPECT_THAT(p.status().message(), HasSubstr("tensor w box [0:4, 0:2] on rank 0"));
  EXPECT_THAT(p.status().message(), HasSubstr("but the buffer has 16"));
}

TEST(PlannerErrorTest, ManyErrorsAreCapped) {
  SideLayout src, dst;
  src.world_size = 1;
  dst.world_size = 1;
  for (int i = 0; i < 60; ++i) {
    ASSERT_TRUE(AddTensor(dst, {absl::StrCat("w", i), {2}, DType::kBF16}).ok());
  }
  absl::StatusOr<Plan> p = BuildPlan(src, dst, PlannerOptions());
  EXPECT_THAT(p.status().message(), HasSubstr("engine tensor w49 bf16[2]"));
  EXPECT_THAT(p.status().message(), Not(HasSubstr("w50")));
  EXPECT_THAT(p.status().message(), HasSubstr("... and 10 more"));
}

// An indexed record whose buffers run past the side's buffers, or belong
// to another rank, is rejected naming the tensor and buffer.
TEST(PlannerErrorTest, IndexedRecordBuffersChecked) {
  TensorSpec t{"experts.{}.w", {4, 2}, DType::kF32, true};
  SideLayout side;
  side.world_size = 2;
  ASSERT_TRUE(AddTensor(side, t).ok());
  ASSERT_TRUE(AddBuffer(side, 0, "w0", 8).ok());
  ASSERT_TRUE(AddBuffer(side, 0, "w1", 8).ok());
  ASSERT_TRUE(AddBuffer(side, 1, "w2", 8).ok());
  Record r;
  r.tensor = 0;
  r.rank = 0;
  r.buffer = 0;
  r.buffer_step = 1;
  r.box = Box::Unchecked({0, 0}, {3, 2});
  r.dims = RowMajorDims({3, 2});
  r.dims[0].splits[0].stride = 0;
  absl::Status s = ValidateRecord(side, r);
  EXPECT_THAT(s.message(), HasSubstr("w2 belongs to rank 1"));
  r.box = Box::Unchecked({0, 0}, {4, 2});
  r.dims = RowMajorDims({4, 2});
  r.dims[0].splits[0].stride = 0;
  s = ValidateRecord(side, r);
  EXPECT_THAT(s.message(), HasSubstr("run past the 3 buffers"));
  EXPECT_THAT(s.message(), HasSubstr("experts.{}.w"));
  r.box = Box::Unchecked({0, 0}, {2, 2});
  r.dims = RowMajorDims({2, 2});
  r.dims[0].splits[0].stride = 0;
  EXPECT_TRUE(ValidateRecord(side, r).ok()) << ValidateRecord(side, r);
}

// Only the engine side may transform; a trainer tensor with a transform is
// rejected naming it. On the engine side the planner matches it by name,
// shape and dtype as usual.
TEST(PlannerErrorTest, TrainerSideTransformIsRejected) {
  TensorSpec t{"layers.0.mixer.A_log", {4}, DType::kF32};
  TensorSpec tx = t;
  tx.transform = Transform::kNegExp;
  for (bool on_src : {true, false}) {
    SideLayout src, dst;
    src.world_size = dst.world_size = 1;
    ASSERT_TRUE(AddTensor(src, on_src ? tx : t).ok());
    ASSERT_TRUE(AddTensor(dst, on_src ? t : tx).ok());
    Mesh m = *Mesh::Make({"tp"}, {1});
    ASSERT_TRUE(AddDenseShards(src, 0, m, {Placement::Replicate()}).ok());
    ASSERT_TRUE(AddDenseShards(dst, 0, m, {Placement::Replicate()}).ok());
    absl::StatusOr<Plan> plan = BuildPlan(src, dst, PlannerOptions{});
    if (on_src) {
      ASSERT_FALSE(plan.ok());
      EXPECT_THAT(plan.status().message(),
                  HasSubstr("trainer tensor layers.0.mixer.A_log has transform "
                            "neg_exp"));
    } else {
      ASSERT_TRUE(plan.ok()) << plan.status();
      EXPECT_EQ(plan->dst.tensors[0].transform, Transform::kNegExp);
    }
  }
}

}  // namespace
}  // namespace refit

// Tests of the plan codec: round trip, rejection of bad peer input, slices.
#include "reshard/plan_codec.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reshard/mesh.h"
#include "reshard/planner.h"
#include "reshard/sharding.h"

namespace refit {
namespace {

Plan MakePlan() {
  TensorSpec t{"e.{}.w", {4, 6}, DType::kBF16, true};
  SideLayout src, dst;
  src.world_size = 2;
  dst.world_size = 3;
  EXPECT_TRUE(AddTensor(src, t).ok());
  EXPECT_TRUE(AddTensor(dst, t).ok());
  EXPECT_TRUE(AddDenseShards(src, 0, *Mesh::Make({"ep"}, {2}), {Placement::Shard(0)}).ok());
  EXPECT_TRUE(AddDenseShards(dst, 0, *Mesh::Make({"tp"}, {3}), {Placement::Shard(1)}).ok());
  PlannerOptions o;
  o.staging_budget_bytes = 32;
  return *BuildPlan(src, dst, o);
}

TEST(PlanCodecTest, RoundTripKeepsFingerprint) {
  Plan p = MakePlan();
  absl::StatusOr<Plan> q = FromProto(ToProto(p));
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(PlanFingerprint(*q), p.fingerprint);
  EXPECT_EQ(q->stats.bytes_sent, p.stats.bytes_sent);
  EXPECT_EQ(q->stats.staging_dst, p.stats.staging_dst);
  EXPECT_TRUE(q->src.tensors[0].stacked);
}

TEST(PlanCodecTest, BadPeerInputIsInvalidArgument) {
  Plan p = MakePlan();
  refit::v1::PlanProto a = ToProto(p);
  a.mutable_segments(0)->set_src_record(99);
  EXPECT_EQ(FromProto(a).status().code(), absl::StatusCode::kInvalidArgument);
  refit::v1::PlanProto b = ToProto(p);
  b.mutable_messages(0)->set_num_segments(1000);
  EXPECT_EQ(FromProto(b).status().code(), absl::StatusCode::kInvalidArgument);
  refit::v1::PlanProto c = ToProto(p);
  c.mutable_rounds(0)->set_lane(7);
  EXPECT_EQ(FromProto(c).status().code(), absl::StatusCode::kInvalidArgument);
  refit::v1::PlanProto d = ToProto(p);
  d.mutable_dst()->mutable_records(0)->set_byte_offset(1 << 20);
  EXPECT_EQ(FromProto(d).status().code(), absl::StatusCode::kInvalidArgument);
  refit::v1::PlanProto e = ToProto(p);
  e.mutable_messages(0)->set_bytes(1);
  EXPECT_EQ(FromProto(e).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PlanCodecTest, SliceHasOnlyTheRanksWork) {
  Plan p = MakePlan();
  for (int r = 0; r < 3; ++r) {
    Plan s = ExtractSlice(p, Side::kDst, r);
    int64_t n = 0;
    for (const Message& m : p.messages) n += m.dst_rank == r;
    ASSERT_EQ(static_cast<int64_t>(s.messages.size()), n);
    for (const Message& m : s.messages) EXPECT_EQ(m.dst_rank, r);
    for (const BufferSpec& b : s.dst.buffers) EXPECT_EQ(b.rank, r);
    EXPECT_EQ(s.stats.bytes_received[r], p.stats.bytes_received[r]);
    // The slice is itself a valid plan.
    absl::StatusOr<Plan> q = FromProto(ToProto(s));
    EXPECT_TRUE(q.ok()) << q.status();
    for (const Round& rd : s.rounds) EXPECT_GT(rd.num_messages, 0);
  }
}

}  // namespace
}  // namespace refit

// Tests of the plan codec: wave trip, rejection of bad peer input, slices.
#include "plan/plan_codec.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "layout/mesh.h"
#include "layout/sharding.h"
#include "plan/fingerprint.h"
#include "plan/planner.h"

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

TEST(PlanCodecTest, WaveTripKeepsFingerprint) {
  Plan p = MakePlan();
  absl::StatusOr<Plan> q = FromProto(ToProto(p));
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(PlanFingerprint(*q), p.fingerprint);
  EXPECT_EQ(q->stats.bytes_sent, p.stats.bytes_sent);
  EXPECT_EQ(q->stats.staging_dst, p.stats.staging_dst);
  EXPECT_TRUE(q->src.tensors[0].stacked);
}

TEST(PlanCodecTest, WaveTripKeepsTheGpusAndTheirFingerprint) {
  TensorSpec t{"w", {4, 6}, DType::kBF16};
  SideLayout src, dst;
  src.world_size = 2;
  dst.world_size = 2;
  ASSERT_TRUE(AddTensor(src, t).ok());
  ASSERT_TRUE(AddTensor(dst, t).ok());
  ASSERT_TRUE(AddDenseShards(src, 0, *Mesh::Make({"dp"}, {2}), {Placement::Replicate()}).ok());
  ASSERT_TRUE(AddDenseShards(dst, 0, *Mesh::Make({"tp"}, {2}), {Placement::Shard(0)}).ok());
  src.host_of_rank = dst.host_of_rank = {0, 0};
  src.gpu_of_rank = {0, 1};
  dst.gpu_of_rank = {1, -1};
  absl::StatusOr<Plan> p = BuildPlan(src, dst, PlannerOptions{});
  ASSERT_TRUE(p.ok()) << p.status();
  absl::StatusOr<Plan> q = FromProto(ToProto(*p));
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->dst.gpu_of_rank, (std::vector<int32_t>{1, -1}));
  EXPECT_EQ(PlanFingerprint(*q), p->fingerprint);
  EXPECT_EQ(ExtractSlice(*p, Side::kEngine, 0).src.gpu_of_rank, src.gpu_of_rank);
  // The GPUs are fingerprinted: without them the plan's fingerprint differs.
  q->dst.gpu_of_rank.clear();
  q->src.gpu_of_rank.clear();
  EXPECT_NE(PlanFingerprint(*q), p->fingerprint);
  refit::v1::PlanProto bad = ToProto(*p);
  bad.mutable_dst()->add_gpu_of_rank(0);
  EXPECT_EQ(FromProto(bad).status().code(), absl::StatusCode::kInvalidArgument);
}

// A BF16 trainer whose two shards cut an FP8 tile into an FP8 engine: the
// conversions, scratch buffers and cut tiles survive the wire, and each
// trainer rank's slice carries its own conversion and the shared tiles.
TEST(PlanCodecTest, WaveTripKeepsConversionsAndCutTiles) {
  SideLayout src, dst;
  src.world_size = 2;
  dst.world_size = 1;
  ASSERT_TRUE(AddTensor(src, TensorSpec{"w", {200, 100}, DType::kBF16}).ok());
  ASSERT_TRUE(AddTensor(dst, WithFormat({"w", {200, 100}, DType::kF8E4M3},
                                         QuantFormat::kFp8Block, QuantRole::kCodes))
                  .ok());
  ASSERT_TRUE(AddTensor(dst, WithFormat({"w_scale_inv", {2, 1}, DType::kF32},
                                         QuantFormat::kFp8Block, QuantRole::kScales))
                  .ok());
  ASSERT_TRUE(AddDenseShards(src, 0, *Mesh::Make({"tp"}, {2}), {Placement::Shard(0)}).ok());
  for (int32_t t : {0, 1}) {
    ASSERT_TRUE(AddDenseShards(dst, t, *Mesh::Make({"tp"}, {1}), {Placement::Replicate()}).ok());
  }
  absl::StatusOr<Plan> p = BuildPlan(src, dst, PlannerOptions{});
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->conversions.size(), 2u);
  ASSERT_EQ(p->cut_tiles.size(), 1u);
  // FP8 on the wire: one byte per weight element, plus the scales.
  EXPECT_EQ(p->stats.bytes_received[0], 200 * 100 + 2 * 4);
  absl::StatusOr<Plan> q = FromProto(ToProto(*p));
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(PlanFingerprint(*q), p->fingerprint);
  ASSERT_EQ(q->conversions.size(), 2u);
  EXPECT_EQ(q->conversions[1].from.box.ToString(), p->conversions[1].from.box.ToString());
  EXPECT_EQ(q->cut_tiles[0].ranks, p->cut_tiles[0].ranks);
  EXPECT_EQ(q->conversions[1].kind, ConversionKind::kQuantize);
  EXPECT_EQ(q->conversions[1].format, QuantFormat::kFp8Block);
  EXPECT_EQ(q->conversions[1].swizzle, ScaleSwizzle::kRowMajor);
  for (int rank : {0, 1}) {
    Plan s = ExtractSlice(*p, Side::kTrainer, rank);
    ASSERT_EQ(s.conversions.size(), 1u);
    EXPECT_EQ(s.conversions[0].from.rank, rank);
    EXPECT_TRUE(s.src.buffers[s.conversions[0].to_buffer].scratch);
    EXPECT_EQ(s.cut_tiles.size(), 1u);
    absl::StatusOr<Plan> back = FromProto(ToProto(s));
    ASSERT_TRUE(back.ok()) << back.status();
  }
  // A conversion writing into a registered buffer is refused.
  refit::v1::PlanProto bad = ToProto(*p);
  bad.mutable_conversions(0)->set_to_buffer(0);
  EXPECT_THAT(FromProto(bad).status().message(), ::testing::HasSubstr("bad scratch buffer"));
  // A format and scale layout the format table has no row for is refused.
  refit::v1::PlanProto unknown = ToProto(*p);
  unknown.mutable_conversions(0)->set_swizzle(static_cast<int32_t>(ScaleSwizzle::kTiles128x4));
  EXPECT_THAT(FromProto(unknown).status().message(), ::testing::HasSubstr("bad kind, format"));
  // The tensors' formats survive the wire (both sides: the converted
  // source takes the engine's), and one that disagrees with its tensor's
  // dtype is refused naming the side and the tensor.
  EXPECT_EQ(q->dst.tensors[0].format, QuantFormat::kFp8Block);
  EXPECT_EQ(q->dst.tensors[1].quant_role, QuantRole::kScales);
  EXPECT_EQ(q->src.tensors[0].format, QuantFormat::kFp8Block);
  EXPECT_EQ(q->src.tensors[0].quant_role, QuantRole::kCodes);
  refit::v1::PlanProto nvfp4 = ToProto(*p);
  nvfp4.mutable_dst()->mutable_tensors(0)->set_format(static_cast<int32_t>(QuantFormat::kNvfp4));
  EXPECT_THAT(FromProto(nvfp4).status().message(),
              ::testing::HasSubstr("tensor w: format nvfp4 holds its codes as u8, not f8e4m3"));
}

TEST(PlanCodecTest, WaveTripKeepsTheDestinationTransform) {
  // NemotronH's A_log: the engine declares it with neg_exp (A = -exp(A_log)).
  TensorSpec t{"layers.0.mixer.A_log", {8}, DType::kF32};
  TensorSpec e = t;
  e.transform = Transform::kNegExp;
  SideLayout src, dst;
  src.world_size = 1;
  dst.world_size = 2;
  ASSERT_TRUE(AddTensor(src, t).ok());
  ASSERT_TRUE(AddTensor(dst, e).ok());
  ASSERT_TRUE(AddDenseShards(src, 0, *Mesh::Make({"dp"}, {1}), {Placement::Replicate()}).ok());
  ASSERT_TRUE(AddDenseShards(dst, 0, *Mesh::Make({"tp"}, {2}), {Placement::Shard(0)}).ok());
  absl::StatusOr<Plan> p = BuildPlan(src, dst, PlannerOptions{});
  ASSERT_TRUE(p.ok()) << p.status();
  const refit::v1::PlanProto wire = ToProto(*p);
  EXPECT_EQ(wire.dst().tensors(0).transform(),
            static_cast<int32_t>(Transform::kNegExp));
  absl::StatusOr<Plan> q = FromProto(wire);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->dst.tensors[0].transform, Transform::kNegExp);
  EXPECT_EQ(q->src.tensors[0].transform, Transform::kNone);
  EXPECT_EQ(PlanFingerprint(*q), p->fingerprint);
  // The transform is part of the fingerprint: dropping it changes the plan.
  refit::v1::PlanProto plain = wire;
  plain.mutable_dst()->mutable_tensors(0)->set_transform(0);
  absl::StatusOr<Plan> r = FromProto(plain);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NE(PlanFingerprint(*r), p->fingerprint);
  // A slice for an engine rank keeps it too.
  EXPECT_EQ(ExtractSlice(*p, Side::kEngine, 1).dst.tensors[0].transform,
            Transform::kNegExp);
  // An unknown transform from a peer is rejected naming the tensor.
  refit::v1::PlanProto bad = wire;
  bad.mutable_dst()->mutable_tensors(0)->set_transform(77);
  absl::Status s = FromProto(bad).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("layers.0.mixer.A_log"));
  // So is a transform on the trainer side.
  refit::v1::PlanProto src_side = wire;
  src_side.mutable_src()->mutable_tensors(0)->set_transform(
      static_cast<int32_t>(Transform::kNegExp));
  s = FromProto(src_side).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("trainer tensor layers.0.mixer.A_log"));
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
  c.mutable_waves(0)->set_lane(7);
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
    Plan s = ExtractSlice(p, Side::kEngine, r);
    int64_t n = 0;
    for (const Message& m : p.messages) n += m.dst_rank == r;
    ASSERT_EQ(static_cast<int64_t>(s.messages.size()), n);
    for (const Message& m : s.messages) EXPECT_EQ(m.dst_rank, r);
    for (const BufferSpec& b : s.dst.buffers) {
      EXPECT_EQ(b.rank, r);
      EXPECT_FALSE(b.name.empty());  // its own: resolved by name
    }
    // The peers' buffers carry rank and size, not names.
    ASSERT_FALSE(s.src.buffers.empty());
    for (const BufferSpec& b : s.src.buffers) {
      EXPECT_TRUE(b.name.empty()) << b.name;
      EXPECT_GT(b.byte_size, 0);
    }
    EXPECT_EQ(s.stats.bytes_received[r], p.stats.bytes_received[r]);
    // The slice is itself a valid plan.
    absl::StatusOr<Plan> q = FromProto(ToProto(s));
    EXPECT_TRUE(q.ok()) << q.status();
    for (const Wave& rd : s.waves) EXPECT_GT(rd.num_messages, 0);
  }
}

// What refitd serves, built on several threads: each rank's slice, in the
// order asked, byte for byte what one thread makes.
TEST(PlanCodecTest, SerializedSlicesAreEachRanksSliceInOrder) {
  Plan p = MakePlan();
  const std::vector<int32_t> ranks = {2, 0, 1, 0, 7};  // 7: outside, empty
  for (int threads : {1, 3, 16}) {
    std::vector<std::string> got = SerializedSlices(p, Side::kEngine, ranks, threads);
    ASSERT_EQ(got.size(), ranks.size());
    for (size_t i = 0; i < ranks.size(); ++i) {
      EXPECT_EQ(got[i], ToProto(ExtractSlice(p, Side::kEngine, ranks[i])).SerializeAsString())
          << "threads " << threads << " rank " << ranks[i];
    }
  }
  EXPECT_TRUE(SerializedSlices(p, Side::kTrainer, {}, 4).empty());
}

}  // namespace
}  // namespace refit

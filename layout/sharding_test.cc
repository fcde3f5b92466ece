// Tests of the sharding helpers: records and buffers for DTensor layouts.
#include "layout/sharding.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace refit {
namespace {

using ::testing::HasSubstr;

TEST(ShardingTest, DenseShardsUnevenAndReplicated) {
  SideLayout side;
  side.world_size = 4;
  int32_t t = *AddTensor(side, {"w", {5, 3}, DType::kBF16});
  Mesh mesh = *Mesh::Make({"dp", "tp"}, {2, 2}, {3, 2, 1, 0});
  absl::StatusOr<int> n = AddDenseShards(
      side, t, mesh, {Placement::Replicate(), Placement::Shard(0)});
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 4);
  ASSERT_EQ(side.records.size(), 4u);
  // coordinate (0,0) is rank 3: rows 0..2
  EXPECT_EQ(side.records[0].rank, 3);
  EXPECT_EQ(side.records[0].box, Box::Unchecked({0, 0}, {3, 3}));
  EXPECT_EQ(side.buffers[side.records[0].buffer].byte_size, 18);
  EXPECT_EQ(side.records[1].box, Box::Unchecked({3, 0}, {2, 3}));
  EXPECT_EQ(side.buffers[side.records[1].buffer].byte_size, 12);
  EXPECT_EQ(side.records[3].box, side.records[1].box);  // replica
}

TEST(ShardingTest, EmptyShardsGetNothing) {
  SideLayout side;
  side.world_size = 4;
  int32_t t = *AddTensor(side, {"b", {2}, DType::kF32});
  Mesh mesh = *Mesh::Make({"tp"}, {4});
  EXPECT_EQ(*AddDenseShards(side, t, mesh, {Placement::Shard(0)}), 2);
  EXPECT_EQ(side.buffers.size(), 2u);
}

TEST(ShardingTest, FusedShardsAtOffset) {
  SideLayout side;
  side.world_size = 2;
  int32_t q = *AddTensor(side, {"q", {4, 2}, DType::kBF16});
  int32_t k = *AddTensor(side, {"k", {2, 2}, DType::kBF16});
  std::vector<int32_t> buf = {*AddBuffer(side, 0, "qkv", 12),
                              *AddBuffer(side, 1, "qkv", 12)};
  Mesh mesh = *Mesh::Make({"tp"}, {2});
  auto of = [&](int32_t r) { return buf[r]; };
  ASSERT_TRUE(AddFusedShards(side, q, mesh, {Placement::Shard(0)}, of, 0).ok());
  ASSERT_TRUE(AddFusedShards(side, k, mesh, {Placement::Shard(0)}, of, 8).ok());
  EXPECT_EQ(side.records.size(), 4u);
  EXPECT_EQ(side.records[3].byte_offset, 8);
  // Too small a buffer is reported, naming the tensor.
  absl::StatusOr<int> bad = AddFusedShards(side, k, mesh, {Placement::Shard(0)}, of, 10);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("tensor k"));
  EXPECT_EQ(*MaxShardBytes({5, 3}, 2, *Mesh::Make({"tp"}, {2}), {Placement::Shard(0)}), 18);
}

TEST(ShardingTest, BadPlacementNamesTensor) {
  SideLayout side;
  side.world_size = 2;
  int32_t t = *AddTensor(side, {"w", {4}, DType::kBF16});
  absl::StatusOr<int> n =
      AddDenseShards(side, t, *Mesh::Make({"tp"}, {2}), {Placement::Shard(3)});
  ASSERT_FALSE(n.ok());
  EXPECT_THAT(n.status().message(), HasSubstr("w"));
  EXPECT_FALSE(AddTensor(side, {"w", {1}, DType::kBF16}).ok());
}

}  // namespace
}  // namespace refit

#include "layout/mesh.h"

#include "gtest/gtest.h"

namespace refit {
namespace {

std::vector<int64_t> Sizes(int64_t extent, int64_t n) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(ChunkOf(extent, n, i).size);
  return out;
}

TEST(ChunkTest, FollowsTorchChunk) {
  EXPECT_EQ(Sizes(10, 4), (std::vector<int64_t>{3, 3, 3, 1}));
  EXPECT_EQ(Sizes(5, 4), (std::vector<int64_t>{2, 2, 1, 0}));
  EXPECT_EQ(Sizes(2, 4), (std::vector<int64_t>{1, 1, 0, 0}));
  EXPECT_EQ(Sizes(0, 3), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(Sizes(8, 4), (std::vector<int64_t>{2, 2, 2, 2}));
  // Pieces tile the extent in order.
  for (int64_t extent = 0; extent < 40; ++extent) {
    for (int64_t n = 1; n < 9; ++n) {
      int64_t next = 0;
      for (int64_t i = 0; i < n; ++i) {
        ChunkRange c = ChunkOf(extent, n, i);
        if (c.size > 0) {
          EXPECT_EQ(c.begin, next);
          next += c.size;
        }
      }
      EXPECT_EQ(next, extent);
    }
  }
}

TEST(MeshTest, MakeValidates) {
  EXPECT_TRUE(Mesh::Make({"dp", "tp"}, {2, 4}).ok());
  EXPECT_FALSE(Mesh::Make({"dp"}, {2, 4}).ok());
  EXPECT_FALSE(Mesh::Make({"dp", "dp"}, {2, 4}).ok());
  EXPECT_FALSE(Mesh::Make({"dp"}, {0}).ok());
  EXPECT_FALSE(Mesh::Make({"dp"}, {2}, {0, 0}).ok());
  EXPECT_FALSE(Mesh::Make({"dp"}, {2}, {0}).ok());
  Mesh m = Mesh::Make({"dp", "tp"}, {2, 3}, {5, 4, 3, 2, 1, 0}).value();
  EXPECT_EQ(m.RankAt({1, 0}), 2);
  EXPECT_EQ(m.CoordOf(4), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(m.AxisIndex("tp"), 1);
  EXPECT_EQ(m.AxisIndex("pp"), -1);
}

TEST(MeshTest, ShardBoxNestsAxesOnOneDim) {
  // 2x2 mesh, both axes shard dim 0 of a [10, 6] tensor: axis 0 splits into
  // 5+5, axis 1 splits each 5 into 3+2.
  std::vector<Placement> p = {Placement::Shard(0), Placement::Shard(0)};
  EXPECT_EQ(ShardBox({10, 6}, {2, 2}, p, {1, 1}).value(),
            Box::Make({8, 0}, {2, 6}).value());
  std::vector<Placement> q = {Placement::Replicate(), Placement::Shard(1)};
  EXPECT_EQ(ShardBox({10, 6}, {2, 4}, q, {1, 3}).value(),
            Box::Make({0, 6}, {10, 0}).value());
  EXPECT_FALSE(ShardBox({10}, {2}, {Placement::Shard(1)}, {0}).ok());
  EXPECT_FALSE(ShardBox({10}, {2}, {Placement::Shard(0)}, {2}).ok());
}

}  // namespace
}  // namespace refit

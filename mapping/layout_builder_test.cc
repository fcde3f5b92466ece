#include "mapping/layout_builder.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace refit {
namespace {

using ::testing::HasSubstr;

ModelTensors Two(bool fp8) {
  ModelTensors m;
  m.tensors.push_back({"a.weight", {256, 256}, fp8 ? DType::kF8E4M3 : DType::kBF16, false});
  m.tensors.push_back({"b.weight", {4}, DType::kBF16, false});
  m.scale_of = {-1, -1};
  m.is_scale = {false, false};
  if (fp8) {
    m.tensors.push_back({"a.weight_scale_inv", {2, 2}, DType::kF32, false});
    m.scale_of = {2, -1, -1};
    m.is_scale = {false, false, true};
    m.fp8_block = 128;
  }
  return m;
}

TEST(LayoutBuilderTest, UnplacedTensorIsNamed) {
  ModelTensors m = Two(false);
  LayoutBuilder b(m, 1, "engine test", true);
  auto buf = b.Buffer(0, "a", {256, 256}, 0);
  ASSERT_TRUE(buf.ok());
  ASSERT_TRUE(b.PlaceAt(0, *buf, MakeBox({0, 0}, {256, 256}), {0, 0}).ok());
  auto side = std::move(b).Finish();
  ASSERT_EQ(side.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(side.status().message(), HasSubstr("b.weight (0 of 4 elements placed)"));
}

TEST(LayoutBuilderTest, PartlyPlacedTensorIsNamed) {
  ModelTensors m = Two(false);
  LayoutBuilder b(m, 1, "engine test", true);
  auto a = b.Buffer(0, "a", {128, 256}, 0);
  auto bb = b.Buffer(0, "b", {4}, 1);
  ASSERT_TRUE(b.PlaceAt(0, *a, MakeBox({0, 0}, {128, 256}), {0, 0}).ok());
  ASSERT_TRUE(b.PlaceAt(1, *bb, MakeBox({0}, {4}), {0}).ok());
  auto side = std::move(b).Finish();
  ASSERT_FALSE(side.ok());
  EXPECT_THAT(side.status().message(), HasSubstr("a.weight (32768 of 65536"));
}

TEST(LayoutBuilderTest, Fp8ScaleFollowsWeightAndSplitIsAnError) {
  ModelTensors m = Two(true);
  LayoutBuilder b(m, 2, "engine test", true);
  auto a0 = b.Buffer(0, "a", {128, 256}, 0);
  ASSERT_TRUE(a0.ok());
  ASSERT_TRUE(b.PlaceAt(0, *a0, MakeBox({128, 0}, {128, 256}), {0, 0}).ok());
  auto b0 = b.Buffer(0, "b", {4}, 1);
  ASSERT_TRUE(b.PlaceAt(1, *b0, MakeBox({0}, {4}), {0}).ok());
  // A 64-row shard splits a block.
  auto a1 = b.Buffer(1, "a", {64, 256}, 0);
  absl::Status s = b.PlaceAt(0, *a1, MakeBox({64, 0}, {64, 256}), {0, 0});
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("split a 128x128"));
  EXPECT_THAT(s.message(), HasSubstr("rank 1"));
}

TEST(LayoutBuilderTest, DtypeMismatchIsAnError) {
  ModelTensors m = Two(false);
  LayoutBuilder b(m, 1, "engine test", true);
  auto a = b.Buffer(0, "a", {256, 256}, 0);  // bf16
  absl::Status s = b.PlaceAt(1, *a, MakeBox({0}, {4}), {0});
  EXPECT_FALSE(s.ok());
}

TEST(LayoutBuilderTest, RankBuffersListsEachRanksBuffers) {
  ModelTensors m = Two(true);
  LayoutBuilder b(m, 2, "engine test", true);
  for (int r = 0; r < 2; ++r) {
    auto a = b.Buffer(r, "a", {128, 256}, 0);
    ASSERT_TRUE(b.PlaceAt(0, *a, MakeBox({128 * r, 0}, {128, 256}), {0, 0}).ok());
    auto bb = b.Buffer(r, "b", {4}, 1);
    ASSERT_TRUE(b.PlaceAt(1, *bb, MakeBox({0}, {4}), {0}).ok());
  }
  auto side = std::move(b).Finish();
  ASSERT_TRUE(side.ok()) << side.status();
  auto r1 = RankBuffers(*side, 1);
  ASSERT_EQ(r1.size(), 3u);
  EXPECT_EQ(r1[0].name, "a");
  EXPECT_EQ(r1[0].dtype, DType::kF8E4M3);
  EXPECT_EQ(r1[1].name, "a_scale_inv");
  EXPECT_EQ(r1[1].shape, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(r1[1].byte_size, 8);
  EXPECT_TRUE(RankBuffers(*side, 2).empty());
}

}  // namespace
}  // namespace refit

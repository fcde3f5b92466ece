#include "mapping/layout_builder.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace refit {
namespace {

using ::testing::HasSubstr;

ModelTensors Two(bool fp8) {
  ModelTensors m;
  m.tensors.push_back({"a.weight", {256, 256}, fp8 ? DType::kF8E4M3 : DType::kBF16, false});
  if (fp8) m.tensors[0] = WithFormat(m.tensors[0], QuantFormat::kFp8Block, QuantRole::kCodes);
  m.tensors.push_back({"b.weight", {4}, DType::kBF16, false});
  m.scale_of = {-1, -1};
  m.is_scale = {false, false};
  if (fp8) {
    m.tensors.push_back(WithFormat({"a.weight_scale_inv", {2, 2}, DType::kF32, false},
                                   QuantFormat::kFp8Block, QuantRole::kScales));
    m.scale_of = {2, -1, -1};
    m.is_scale = {false, false, true};
    m.quant = QuantFormat::kFp8Block;
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

// Two ranks, each with half of "a" (rows 128 * rank on) and all of "b".
absl::StatusOr<MappedSide> TwoRanks(const ModelTensors& m) {
  LayoutBuilder b(m, 2, "engine test", true);
  for (int r = 0; r < 2; ++r) {
    REFIT_ASSIGN_OR_RETURN(int32_t a, b.Buffer(r, "a", {128, 256}, 0));
    REFIT_RETURN_IF_ERROR(b.PlaceAt(0, a, MakeBox({128 * r, 0}, {128, 256}), {0, 0}));
    REFIT_ASSIGN_OR_RETURN(int32_t bb, b.Buffer(r, "b", {4}, 1));
    REFIT_RETURN_IF_ERROR(b.PlaceAt(1, bb, MakeBox({0}, {4}), {0}));
  }
  return std::move(b).Finish();
}

TEST(LayoutBuilderTest, RankBuffersListsEachRanksBuffers) {
  ModelTensors m = Two(true);
  auto side = TwoRanks(m);
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

TEST(LayoutBuilderTest, RankOnlyKeepsOneRanksBuffersAndRecords) {
  ModelTensors m = Two(false);
  auto side = TwoRanks(m);
  ASSERT_TRUE(side.ok()) << side.status();
  MappedSide one = RankOnly(*side, 1);
  EXPECT_EQ(one.layout.world_size, 2);
  EXPECT_EQ(one.layout.tensors.size(), side->layout.tensors.size());
  ASSERT_EQ(one.layout.buffers.size(), 2u);
  EXPECT_EQ(one.rank_begin, (std::vector<int32_t>{0, 0, 2}));
  EXPECT_TRUE(RankBuffers(one, 0).empty());
  const std::vector<LocalBuffer> want = RankBuffers(*side, 1);
  const std::vector<LocalBuffer> got = RankBuffers(one, 1);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].name, want[i].name);
    EXPECT_EQ(got[i].shape, want[i].shape);
    EXPECT_EQ(got[i].byte_size, want[i].byte_size);
  }
  ASSERT_EQ(one.layout.records.size(), 2u);
  for (const Record& r : one.layout.records) {
    EXPECT_EQ(r.rank, 1);
    EXPECT_EQ(one.layout.buffers[r.buffer].rank, 1);
    EXPECT_EQ(one.layout.buffers[r.buffer].name, r.tensor == 0 ? "a" : "b");
  }
  EXPECT_EQ(one.layout.records[0].box.origin(0), 128);
  MappedSide none = RankOnly(*side, 2);
  EXPECT_TRUE(none.layout.buffers.empty());
  EXPECT_TRUE(none.layout.records.empty());
  EXPECT_EQ(none.rank_begin, (std::vector<int32_t>{0, 0, 0}));
}

// Two local experts of a stacked [4, 8, 8] tensor in indexed buffers
// "w0", "w1", plus a replicated dense tensor, on `rank`.
void PlaceExpertRank(LayoutBuilder& b, int32_t rank, int64_t first_expert) {
  for (int64_t j = 0; j < 2; ++j) {
    auto w = b.Buffer(rank, absl::StrCat("w", j), {8, 8}, 0);
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_TRUE(b.PlaceAt(0, *w, MakeBox({first_expert + j, 0, 0}, {1, 8, 8}),
                          {0, 0, 0})
                    .ok());
  }
  auto d = b.Buffer(rank, "d", {4}, 1);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_TRUE(b.PlaceAt(1, *d, MakeBox({0}, {4}), {0}).ok());
}

TEST(LayoutBuilderTest, CloneRankWithExpertShiftEqualsBuildingTheRank) {
  ModelTensors m;
  m.tensors.push_back({"e.{}.w", {4, 8, 8}, DType::kBF16, true});
  m.tensors.push_back({"d.weight", {4}, DType::kBF16, false});
  m.scale_of = {-1, -1};
  m.is_scale = {false, false};
  LayoutBuilder built(m, 3, "trainer test", true);
  PlaceExpertRank(built, 0, 0);
  PlaceExpertRank(built, 1, 2);
  PlaceExpertRank(built, 2, 0);
  LayoutBuilder cloned(m, 3, "trainer test", true);
  PlaceExpertRank(cloned, 0, 0);
  ASSERT_TRUE(cloned.CloneRank(0, 1, /*expert_shift=*/2).ok());
  ASSERT_TRUE(cloned.CloneRank(0, 2).ok());
  EXPECT_FALSE(cloned.CloneRank(0, 2).ok());  // rank 2 exists already
  auto a = std::move(built).Finish();
  auto c = std::move(cloned).Finish();
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(a->layout.buffers.size(), c->layout.buffers.size());
  for (size_t i = 0; i < a->layout.buffers.size(); ++i) {
    EXPECT_EQ(a->layout.buffers[i].rank, c->layout.buffers[i].rank);
    EXPECT_EQ(a->layout.buffers[i].name, c->layout.buffers[i].name);
    EXPECT_EQ(a->layout.buffers[i].byte_size, c->layout.buffers[i].byte_size);
    EXPECT_EQ(a->buffer_info[i].shape, c->buffer_info[i].shape);
  }
  ASSERT_EQ(a->layout.records.size(), c->layout.records.size());
  for (size_t i = 0; i < a->layout.records.size(); ++i) {
    const Record& x = a->layout.records[i];
    const Record& y = c->layout.records[i];
    EXPECT_EQ(x.tensor, y.tensor);
    EXPECT_EQ(x.rank, y.rank);
    EXPECT_EQ(x.buffer, y.buffer);
    EXPECT_EQ(x.box, y.box) << i;
    EXPECT_EQ(x.byte_offset, y.byte_offset);
    EXPECT_EQ(x.dims, y.dims);
  }
  EXPECT_EQ(a->rank_begin, c->rank_begin);
}

TEST(LayoutBuilderTest, ClonedRanksDoNotCountAsCoverage) {
  ModelTensors m = Two(false);
  LayoutBuilder b(m, 2, "engine test", true);
  auto a = b.Buffer(0, "a", {128, 256}, 0);
  ASSERT_TRUE(b.PlaceAt(0, *a, MakeBox({0, 0}, {128, 256}), {0, 0}).ok());
  auto bb = b.Buffer(0, "b", {4}, 1);
  ASSERT_TRUE(b.PlaceAt(1, *bb, MakeBox({0}, {4}), {0}).ok());
  ASSERT_TRUE(b.CloneRank(0, 1).ok());
  auto side = std::move(b).Finish();
  ASSERT_FALSE(side.ok());
  EXPECT_THAT(side.status().message(), HasSubstr("a.weight (32768 of 65536"));
}

}  // namespace
}  // namespace refit

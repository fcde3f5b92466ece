#include "plan/conversion.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "layout/mesh.h"
#include "layout/sharding.h"

namespace refit {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A trainer holding `name` [rows, cols] in `dtype`, Shard(0) over `ranks`.
SideLayout Trainer(const std::string& name, std::vector<int64_t> shape,
                   DType dtype, int ranks) {
  SideLayout s;
  s.world_size = ranks;
  int32_t t = *AddTensor(s, TensorSpec{name, shape, dtype});
  Mesh mesh = *Mesh::Make({"tp"}, {ranks});
  EXPECT_TRUE(AddDenseShards(s, t, mesh, {Placement::Shard(0)}).ok());
  return s;
}

// A tensor spec, of format `f` in role `role` when f is set.
TensorSpec Spec(const std::string& name, std::vector<int64_t> shape, DType dtype,
                std::optional<QuantFormat> f = std::nullopt,
                QuantRole role = QuantRole::kCodes) {
  TensorSpec t{name, std::move(shape), dtype};
  return f ? WithFormat(std::move(t), *f, role) : t;
}

// An engine holding `name` in `dtype` (transform t) on one rank, and its
// block scales (f32, format `scale_f`) when `scale_shape` is not empty. An
// f8e4m3 weight is of format `scale_f` too.
SideLayout Engine(const std::string& name, std::vector<int64_t> shape,
                  DType dtype, Transform t, std::vector<int64_t> scale_shape,
                  QuantFormat scale_f = QuantFormat::kFp8Block) {
  SideLayout s;
  s.world_size = 1;
  TensorSpec w = Spec(name, shape, dtype,
                      dtype == DType::kF8E4M3 ? std::optional<QuantFormat>(scale_f)
                                              : std::nullopt);
  w.transform = t;
  int32_t wi = *AddTensor(s, w);
  Mesh mesh = *Mesh::Make({"tp"}, {1});
  EXPECT_TRUE(AddDenseShards(s, wi, mesh, {Placement::Replicate()}).ok());
  if (!scale_shape.empty()) {
    TensorSpec sc = Spec(ScaleTensorName(name), scale_shape, DType::kF32, scale_f,
                         QuantRole::kScales);
    int32_t si = *AddTensor(s, sc);
    EXPECT_TRUE(AddDenseShards(s, si, mesh, {Placement::Replicate()}).ok());
  }
  return s;
}

TEST(ConvertSourceTest, SameDtypesLeaveTheSourceAlone) {
  SideLayout src = Trainer("w", {4, 4}, DType::kBF16, 2);
  SideLayout dst = Engine("w", {4, 4}, DType::kBF16, Transform::kNone, {});
  absl::StatusOr<ConvertedSource> c = ConvertSource(src, dst, 128);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->conversions.empty());
  EXPECT_EQ(c->layout.buffers.size(), src.buffers.size());
}

TEST(ConvertSourceTest, AlignedShardsQuantizeWholeTiles) {
  SideLayout src = Trainer("w", {256, 384}, DType::kBF16, 2);
  SideLayout dst = Engine("w", {256, 384}, DType::kF8E4M3, Transform::kNone, {2, 3});
  absl::StatusOr<ConvertedSource> c = ConvertSource(src, dst, 128);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->conversions.size(), 2u);
  EXPECT_TRUE(c->cut_tiles.empty());
  const SideLayout& l = c->layout;
  ASSERT_EQ(l.tensors.size(), 2u);
  EXPECT_EQ(l.tensors[0].dtype, DType::kF8E4M3);
  EXPECT_EQ(l.tensors[1].name, "w_scale_inv");
  for (const Conversion& v : c->conversions) {
    EXPECT_EQ(ConversionFormatName(v), "fp8_block");
    EXPECT_EQ(v.from_dtype, DType::kBF16);
    EXPECT_THAT(v.tile, ElementsAre(128, 128));
    ASSERT_GE(v.to_buffer, 0);
    EXPECT_TRUE(l.buffers[v.to_buffer].scratch);
    EXPECT_EQ(l.buffers[v.to_buffer].byte_size, 128 * 384);  // 1 byte each
    ASSERT_GE(v.scale_buffer, 0);
    EXPECT_EQ(l.buffers[v.scale_buffer].byte_size, 3 * 4);
    EXPECT_EQ(l.buffers[v.scale_buffer].rank, v.from.rank);
  }
  // The scale records partition the tile grid.
  int scale_records = 0;
  for (const Record& r : l.records) {
    if (r.tensor == 1) {
      ++scale_records;
      EXPECT_EQ(r.box.shape(0), 1);
      EXPECT_EQ(r.box.origin(0), r.rank);
    } else {
      EXPECT_TRUE(l.buffers[r.buffer].scratch);
    }
  }
  EXPECT_EQ(scale_records, 2);
}

TEST(ConvertSourceTest, ShardsCuttingATileExchangeItsAmax) {
  // 100 rows per rank: tile row 0 spans both ranks, tile row 1 is rank 1's.
  SideLayout src = Trainer("w", {200, 100}, DType::kBF16, 2);
  SideLayout dst = Engine("w", {200, 100}, DType::kF8E4M3, Transform::kNone, {2, 1});
  absl::StatusOr<ConvertedSource> c = ConvertSource(src, dst, 128);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->cut_tiles.size(), 1u);
  EXPECT_EQ(c->cut_tiles[0].tiles.ToString(), "[0:1, 0:1]");
  EXPECT_THAT(c->cut_tiles[0].ranks, ElementsAre(0, 1));
  // Tile 0 is owned by rank 0 (its first element), tile 1 by rank 1.
  for (const Conversion& v : c->conversions) {
    EXPECT_EQ(OwnedTiles(v.from.box, v.tile).ToString(),
              v.from.rank == 0 ? "[0:1, 0:1]" : "[1:2, 0:1]");
  }
}

TEST(ConvertSourceTest, NegExpToF32) {
  SideLayout src = Trainer("A_log", {8}, DType::kBF16, 2);
  SideLayout dst = Engine("A_log", {8}, DType::kF32, Transform::kNegExp, {});
  absl::StatusOr<ConvertedSource> c = ConvertSource(src, dst, 128);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->conversions.size(), 2u);
  EXPECT_EQ(c->conversions[0].kind, ConversionKind::kNegExpF32);
  EXPECT_EQ(c->layout.tensors[0].dtype, DType::kF32);
  EXPECT_EQ(c->layout.buffers[c->conversions[0].to_buffer].byte_size, 4 * 4);
}

TEST(ConvertSourceTest, Ue8m0FromTheFormat) {
  SideLayout src = Trainer("w", {128, 128}, DType::kBF16, 1);
  SideLayout dst = Engine("w", {128, 128}, DType::kF8E4M3, Transform::kNone,
                          {1, 1}, QuantFormat::kFp8BlockUe8m0);
  absl::StatusOr<ConvertedSource> c = ConvertSource(src, dst, 128);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->conversions.size(), 1u);
  EXPECT_EQ(ConversionFormatName(c->conversions[0]), "fp8_block_ue8m0");
  EXPECT_EQ(c->layout.tensors[1].transform, Transform::kNone);
}

// kernel=deepgemm: the engine's format is the requantizing one.
TEST(ConvertSourceTest, RequantUe8m0FromTheFormat) {
  SideLayout src = Trainer("w", {128, 128}, DType::kBF16, 1);
  SideLayout dst = Engine("w", {128, 128}, DType::kF8E4M3, Transform::kNone,
                          {1, 1}, QuantFormat::kFp8BlockRequantUe8m0);
  absl::StatusOr<ConvertedSource> c = ConvertSource(src, dst, 128);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->conversions.size(), 1u);
  EXPECT_TRUE(IsBlockQuantized(c->conversions[0].kind));
  EXPECT_EQ(c->conversions[0].format, QuantFormat::kFp8BlockRequantUe8m0);
  EXPECT_EQ(c->conversions[0].swizzle, ScaleSwizzle::kRowMajor);
  EXPECT_EQ(ConversionFormatName(c->conversions[0]), "fp8_block_requant_ue8m0");
}

TEST(ConvertSourceTest, RefusesWhatTheTableLacks) {
  SideLayout f32 = Trainer("w", {4, 4}, DType::kF32, 1);
  absl::StatusOr<ConvertedSource> c = ConvertSource(
      f32, Engine("w", {4, 4}, DType::kBF16, Transform::kNone, {}), 128);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("tensor w"));

  SideLayout bf16 = Trainer("w", {4, 4}, DType::kBF16, 1);
  c = ConvertSource(bf16, Engine("w", {4, 4}, DType::kF8E4M3, Transform::kNone, {}), 128);
  EXPECT_THAT(c.status().message(), HasSubstr("without its scales (w_scale_inv"));

  c = ConvertSource(bf16, Engine("w", {4, 4}, DType::kF8E4M3, Transform::kNone, {2, 2}),
                    128);
  EXPECT_THAT(c.status().message(), HasSubstr("is not the 128x128 tile grid [1, 1]"));

  SideLayout i8 = Trainer("w", {4, 4}, DType::kI8, 1);
  c = ConvertSource(i8, Engine("w", {4, 4}, DType::kF32, Transform::kNone, {}), 128);
  EXPECT_THAT(c.status().message(), HasSubstr("from bf16, f16 or f32 only"));
}

TEST(TilesTest, IntersectingAndOwned) {
  Box b = Box::Unchecked({100, 0}, {100, 300});
  std::vector<int64_t> tile = {128, 128};
  EXPECT_EQ(IntersectingTiles(b, tile).ToString(), "[0:2, 0:3]");
  EXPECT_EQ(OwnedTiles(b, tile).ToString(), "[1:2, 0:3]");
}

// An e4m3 engine weight with a u8 "<w>_scale" [N, K/32] is MXFP8: tiles of
// 1 x 32, one scale byte per block; a trainer cut along K at 48 shares
// block [32, 64) of every row (a cut-tile group), and K not a multiple of
// 32 is refused naming the tensor.
TEST(ConvertSourceTest, Mxfp8TilesAreOneByThirtyTwoWithByteScales) {
  SideLayout src;
  src.world_size = 2;
  const int32_t t = *AddTensor(src, TensorSpec{"w", {4, 96}, DType::kBF16});
  Mesh mesh = *Mesh::Make({"tp"}, {2});
  ASSERT_TRUE(AddDenseShards(src, t, mesh, {Placement::Shard(1)}).ok());
  SideLayout dst =
      Engine("w", {4, 96}, DType::kF8E4M3, Transform::kNone, {}, QuantFormat::kMxfp8);
  Mesh one = *Mesh::Make({"tp"}, {1});
  const int32_t si = *AddTensor(
      dst, Spec(MxScaleTensorName("w"), {4, 3}, DType::kU8, QuantFormat::kMxfp8,
                QuantRole::kScales));
  ASSERT_TRUE(AddDenseShards(dst, si, one, {Placement::Replicate()}).ok());
  absl::StatusOr<ConvertedSource> c = ConvertSource(src, dst, 128);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->conversions.size(), 2u);
  for (const Conversion& v : c->conversions) {
    EXPECT_EQ(ConversionFormatName(v), "mxfp8");
    EXPECT_THAT(v.tile, ElementsAre(1, 32));
    ASSERT_GE(v.scale_buffer, 0);
    // Rank 0 owns blocks 0 and 1 (block 1 starts at 32 < 48); rank 1
    // block 2.
    EXPECT_EQ(c->layout.buffers[v.scale_buffer].byte_size, v.from.rank == 0 ? 4 * 2 : 4 * 1);
  }
  ASSERT_EQ(c->cut_tiles.size(), 1u);
  EXPECT_EQ(c->cut_tiles[0].tiles, Box::Unchecked({0, 1}, {4, 1}));
  EXPECT_THAT(c->cut_tiles[0].ranks, ElementsAre(0, 1));

  SideLayout odd = Trainer("w", {4, 40}, DType::kBF16, 1);
  SideLayout odd_dst =
      Engine("w", {4, 40}, DType::kF8E4M3, Transform::kNone, {}, QuantFormat::kMxfp8);
  ASSERT_TRUE(AddDenseShards(odd_dst,
                             *AddTensor(odd_dst, Spec("w_scale", {4, 2}, DType::kU8,
                                                      QuantFormat::kMxfp8, QuantRole::kScales)),
                             one, {Placement::Replicate()})
                  .ok());
  absl::StatusOr<ConvertedSource> bad = ConvertSource(odd, odd_dst, 128);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("tensor w: MXFP8 needs"));
}

// The engine's tensors say their format; the planner reads it: an f8e4m3
// engine tensor without one is refused (no format guessed from dtypes),
// and so is a weight whose scales are another format, naming the engine's
// rank and parameter.
TEST(ConvertSourceTest, TheFormatComesFromTheEngineTensor) {
  SideLayout src = Trainer("w", {128, 128}, DType::kBF16, 1);
  SideLayout dst = Engine("w", {128, 128}, DType::kF8E4M3, Transform::kNone, {1, 1});
  dst.tensors[0].format.reset();
  dst.tensors[0].quant_role = QuantRole::kNone;
  absl::StatusOr<ConvertedSource> c = ConvertSource(src, dst, 128);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("tensor w (rank 0, parameter w)"));
  EXPECT_THAT(c.status().message(), HasSubstr("declares none"));

  dst = Engine("w", {128, 128}, DType::kF8E4M3, Transform::kNone, {1, 1});
  dst.tensors[1].format = QuantFormat::kFp8BlockUe8m0;  // the weight says kFp8Block
  c = ConvertSource(src, dst, 128);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(),
              HasSubstr("tensor w_scale_inv: the scales of w (rank 0, parameter w) are format "
                        "fp8_block_ue8m0 and the weight fp8_block"));
}

// A trainer already holding MXFP8 (TE's tensors) into an NVFP4 engine: the
// formats differ, refused naming the trainer's rank and parameter.
TEST(ConvertSourceTest, AQuantizedTrainerNeedsTheEnginesFormat) {
  SideLayout src;
  src.world_size = 1;
  Mesh one = *Mesh::Make({"tp"}, {1});
  ASSERT_TRUE(AddDenseShards(src,
                             *AddTensor(src, Spec("w", {4, 64}, DType::kF8E4M3,
                                                  QuantFormat::kMxfp8)),
                             one, {Placement::Replicate()})
                  .ok());
  SideLayout dst;
  dst.world_size = 1;
  ASSERT_TRUE(AddDenseShards(dst,
                             *AddTensor(dst, Spec("w", {4, 32}, DType::kU8,
                                                  QuantFormat::kNvfp4)),
                             one, {Placement::Replicate()})
                  .ok());
  absl::StatusOr<ConvertedSource> c = ConvertSource(src, dst, 128);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(),
              HasSubstr("tensor w (rank 0, parameter w): the trainer holds it as format "
                        "mxfp8 codes and the engine as format nvfp4 codes"));
}

}  // namespace
}  // namespace refit

#include "layout/layout.h"

#include <random>
#include <set>

#include "gtest/gtest.h"

namespace refit {
namespace {

// Brute force: the offsets of DecomposeRange's pieces, enumerated in order,
// equal DimOffset of each index.
TEST(LayoutTest, DecomposeRangeMatchesDimOffset) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    DimMap m;
    int levels = 1 + rng() % 3;
    int64_t extent = 1;
    for (int k = 0; k < levels; ++k) {
      int64_t size = 1 + rng() % 5;
      m.splits.push_back({size, static_cast<int64_t>(rng() % 40)});
      extent *= size;
    }
    int64_t begin = rng() % extent;
    int64_t count = 1 + rng() % (extent - begin);
    std::vector<DimPiece> pieces = DecomposeRange(m, begin, count);
    int64_t i = 0;
    for (const DimPiece& p : pieces) {
      ASSERT_EQ(p.index_begin, i);
      int64_t prod = 1;
      for (const DimSplit& s : p.splits) prod *= s.size;
      ASSERT_EQ(prod, p.count);
      DimMap pm{p.splits};
      for (int64_t j = 0; j < p.count; ++j, ++i) {
        ASSERT_EQ(p.offset + DimOffset(pm, j), DimOffset(m, begin + i))
            << "trial " << trial;
      }
    }
    ASSERT_EQ(i, count);
  }
}

TEST(LayoutTest, InterleavedGroupsAreOnePieceWhenAligned) {
  // Megatron-style QKV: 4 groups of 6 rows (q 4, k 1, v 1), q rows of group
  // g at rows 6g..6g+3 of a [24, 8] buffer: q as (4 groups x 4 rows).
  DimMap q{{{4, 6 * 8}, {4, 8}}};
  EXPECT_EQ(DecomposeRange(q, 0, 16).size(), 1u);
  EXPECT_EQ(DecomposeRange(q, 2, 8).size(), 3u);  // head, 1 full, tail
}

TEST(LayoutTest, ContiguousByteRangeOfRowsAndColumns) {
  SideLayout side;
  side.world_size = 1;
  side.tensors.push_back({"w", {8, 4}, DType::kBF16});
  side.buffers.push_back({0, "w", 64, {}});
  Record r{0, 0, 0, Box::FromShape({8, 4}).value(), 0, RowMajorDims({8, 4})};
  ASSERT_TRUE(ValidateRecord(side, r).ok());
  auto rows = ContiguousByteRange(r, 2, Box::Make({2, 0}, {3, 4}).value());
  ASSERT_TRUE(rows.has_value());
  EXPECT_EQ(*rows, (ByteRange{16, 24}));
  EXPECT_FALSE(
      ContiguousByteRange(r, 2, Box::Make({2, 0}, {3, 2}).value()).has_value());
  auto cols = ByteRuns(r, 2, Box::Make({2, 0}, {3, 2}).value(), 100);
  EXPECT_EQ(cols.size(), 3u);
  EXPECT_EQ(cols[1], (ByteRange{24, 4}));
}

TEST(LayoutTest, ValidateRecordNamesTensorAndBuffer) {
  SideLayout side;
  side.world_size = 2;
  side.tensors.push_back({"model.w", {8, 4}, DType::kF32});
  side.buffers.push_back({1, "fused", 100, {}});
  Record r{0, 1, 0, Box::FromShape({8, 4}).value(), 0, RowMajorDims({8, 4})};
  absl::Status s = ValidateRecord(side, r);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("model.w"), std::string::npos);
  EXPECT_NE(s.message().find("fused"), std::string::npos);
  EXPECT_NE(s.message().find("128"), std::string::npos);
  side.buffers[0].byte_size = 128;
  EXPECT_TRUE(ValidateRecord(side, r).ok());
  r.rank = 0;
  EXPECT_FALSE(ValidateRecord(side, r).ok());  // buffer is rank 1's
}

TEST(LayoutTest, ByteRunsOfInterleavedRecordBruteForce) {
  // q rows of a Megatron QKV buffer, per-row width 8 bf16.
  Record r;
  r.tensor = 0;
  r.box = Box::FromShape({16, 8}).value();
  r.byte_offset = 0;
  r.dims = {DimMap{{{4, 6 * 8}, {4, 8}}}, DimMap{{{8, 1}}}};
  std::vector<ByteRange> runs = ByteRuns(r, 2, r.box, 1000);
  ASSERT_EQ(runs.size(), 4u);
  for (int g = 0; g < 4; ++g) EXPECT_EQ(runs[g], (ByteRange{g * 96, 64}));
}

}  // namespace
}  // namespace refit

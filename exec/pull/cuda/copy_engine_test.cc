// JoinContiguous and SplitForCopyEngine (host logic; no device needed).
#include "exec/pull/cuda/copy_engine.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace refit {
namespace {

char* At(int64_t off) { return reinterpret_cast<char*>(0x100000) + off; }

ResolvedCopy Row(int64_t src, int64_t dst, int64_t bytes) {
  return {At(src), At(dst), 1, bytes, bytes, bytes};
}

int64_t Bytes(const std::vector<ResolvedCopy>& v) {
  int64_t n = 0;
  for (const ResolvedCopy& c : v) n += c.rows * c.row_bytes;
  return n;
}

TEST(JoinContiguousTest, JoinsRowsThatContinueOnBothSides) {
  const std::vector<ResolvedCopy> in = {Row(0, 1000, 64), Row(64, 1064, 64), Row(128, 1128, 32)};
  const std::vector<ResolvedCopy> out = JoinContiguous(in);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].src, At(0));
  EXPECT_EQ(out[0].dst, At(1000));
  EXPECT_EQ(out[0].row_bytes, 160);
}

TEST(JoinContiguousTest, KeepsRowsThatContinueOnOneSideOnly) {
  const std::vector<ResolvedCopy> in = {Row(0, 1000, 64), Row(64, 2000, 64), Row(500, 2064, 64)};
  EXPECT_EQ(JoinContiguous(in).size(), 3u);
}

TEST(JoinContiguousTest, MakesDenseStridedCopiesOneRowAndDropsEmptyOnes) {
  std::vector<ResolvedCopy> in = {{At(0), At(4096), 8, 128, 128, 128}, Row(9, 9, 0)};
  const std::vector<ResolvedCopy> out = JoinContiguous(in);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].rows, 1);
  EXPECT_EQ(out[0].row_bytes, 1024);
}

TEST(JoinContiguousTest, NeverJoinsAcrossAllocations) {
  // Adjacent in addresses on both sides, but two allocations (a copy
  // engine refuses a range that spans two).
  const std::vector<ResolvedCopy> in = {Row(0, 1000, 64), Row(64, 1064, 64), Row(128, 1128, 64)};
  const std::vector<ResolvedCopy> out = JoinContiguous(in, {7, 7, 8});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].row_bytes, 128);
  EXPECT_EQ(out[1].src, At(128));
}

TEST(JoinStridedTest, MakesEvenlySpacedPiecesOneStridedCopy) {
  // A fused qkv's q pieces of 4 groups: 64 bytes every 96 in the source,
  // every 64 in the destination; the k pieces (16 bytes) likewise.
  std::vector<ResolvedCopy> in;
  for (int g = 0; g < 4; ++g) {
    in.push_back(Row(g * 96, 5000 + g * 64, 64));
    in.push_back(Row(g * 96 + 64, 9000 + g * 16, 16));
  }
  const std::vector<ResolvedCopy> out = JoinStrided(in);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(Bytes(out), Bytes(in));
  for (const ResolvedCopy& c : out) {
    EXPECT_EQ(c.rows, 4);
    EXPECT_EQ(c.src_row_stride, 96);
    EXPECT_EQ(c.dst_row_stride, c.row_bytes == 64 ? 64 : 16);
  }
}

TEST(JoinStridedTest, KeepsUnevenPiecesAndOtherAllocationsApart) {
  const std::vector<ResolvedCopy> in = {Row(0, 0, 8), Row(100, 50, 8), Row(150, 60, 8),
                                        Row(200, 100, 8)};
  // Distances 100/50, 50/10, 50/40: the first two pieces make one strided
  // copy, the last two another; never the middle pair across them.
  const std::vector<ResolvedCopy> out = JoinStrided(in);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].src, At(0));
  EXPECT_EQ(out[0].src_row_stride, 100);
  EXPECT_EQ(out[0].dst_row_stride, 50);
  EXPECT_EQ(out[1].src, At(150));
  EXPECT_EQ(out[1].dst_row_stride, 40);
  EXPECT_EQ(Bytes(out), Bytes(in));
  const std::vector<ResolvedCopy> even = {Row(0, 0, 8), Row(10, 10, 8), Row(20, 20, 8)};
  EXPECT_EQ(JoinStrided(even).size(), 1u);
  EXPECT_EQ(JoinStrided(even, {1, 1, 2}).size(), 2u);
}

TEST(JoinForCopyEngineTest, JoinsWithinAnAllocationPairOnly) {
  // Three evenly spaced pieces, the last in another allocation pair.
  const std::vector<ResolvedCopy> in = {Row(0, 0, 8), Row(10, 10, 8), Row(20, 20, 8)};
  const std::vector<ResolvedCopy> out = JoinForCopyEngine(in, {3, 3, 4});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].rows, 2);
  EXPECT_EQ(out[1].src, At(20));
  EXPECT_EQ(Bytes(out), Bytes(in));
}

TEST(SpreadCopiesTest, BalancesBytesAndKeepsEveryCopy) {
  const std::vector<ResolvedCopy> in = {Row(0, 0, 400), Row(0, 0, 100), Row(0, 0, 100),
                                        Row(0, 0, 100), Row(0, 0, 100),
                                        {At(0), At(0), 10, 20, 40, 20}};
  const std::vector<std::vector<ResolvedCopy>> lists = SpreadCopies(in, 2);
  ASSERT_EQ(lists.size(), 2u);
  EXPECT_EQ(Bytes(lists[0]), 600);  // 400, then the 200 when both hold 400
  EXPECT_EQ(Bytes(lists[1]), 400);
  EXPECT_EQ(lists[0].size() + lists[1].size(), in.size());
  EXPECT_EQ(SpreadCopies(in, 0).size(), 1u);
}

}  // namespace
}  // namespace refit

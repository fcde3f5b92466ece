// JoinContiguous and SplitForCopyEngine (host logic; no device needed).
#include "exec/cuda/copy_engine.h"

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

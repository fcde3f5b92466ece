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

TEST(SplitForCopyEngineTest, ShortStridedRowsStayWithTheKernel) {
  const std::vector<ResolvedCopy> in = {
      Row(0, 0, 1 << 20),                          // contiguous: engine
      {At(0), At(0), 100, 8192, 16384, 8192},      // strided, 8 KiB rows: kernel
      {At(0), At(0), 100, 32768, 65536, 32768}};   // strided, 32 KiB rows: engine
  std::vector<ResolvedCopy> engine, kernel;
  SplitForCopyEngine(in, 16 << 10, &engine, &kernel);
  ASSERT_EQ(engine.size(), 2u);
  ASSERT_EQ(kernel.size(), 1u);
  EXPECT_EQ(kernel[0].row_bytes, 8192);
  EXPECT_EQ(Bytes(engine) + Bytes(kernel), Bytes(in));
}

}  // namespace
}  // namespace refit

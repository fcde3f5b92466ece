#include "mapping/scatter.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace refit {
namespace {

using ::testing::HasSubstr;

// One stacked tensor [3, 2, 4] (bf16); rank 0 holds experts 1..2, rows 0..1,
// cols 2..3, as a grouped buffer [2, 2, 2].
SideLayout Side() {
  SideLayout s;
  s.world_size = 1;
  s.tensors.push_back({"w.{}.x", {3, 2, 4}, DType::kBF16, true});
  s.buffers.push_back({0, "buf", 2 * 2 * 2 * 2, {}});
  Record r;
  r.box = Box::Unchecked({1, 0, 2}, {2, 2, 2});
  r.dims = SubArrayDims({2, 2, 2}, {2, 2, 2});
  s.records.push_back(r);
  return s;
}

TEST(ScatterTest, MemberScatterAndGatherRoundTrip) {
  SideLayout s = Side();
  std::vector<uint8_t> member(2 * 4 * 2);
  for (size_t i = 0; i < member.size(); ++i) member[i] = static_cast<uint8_t>(i + 1);
  std::vector<uint8_t> buf(16, 0);
  ASSERT_TRUE(ScatterToRecord(s, s.records[0], 2, member, absl::MakeSpan(buf)).ok());
  // Expert 2 is local expert 1: bytes 8..15; row 0 cols 2..3 = member bytes 4..7.
  EXPECT_EQ(buf[8], 5);
  EXPECT_EQ(buf[11], 8);
  EXPECT_EQ(buf[12], 13);
  EXPECT_EQ(buf[0], 0);
  // Expert 0 is not held: nothing written.
  ASSERT_TRUE(ScatterToRecord(s, s.records[0], 0, member, absl::MakeSpan(buf)).ok());
  EXPECT_EQ(buf[0], 0);
  std::vector<uint8_t> back(member.size(), 0);
  ASSERT_TRUE(GatherFromRecord(s, s.records[0], 2, buf, absl::MakeSpan(back)).ok());
  EXPECT_EQ(back[4], 5);
  EXPECT_EQ(back[0], 0);  // col 0 is not held
}

TEST(ScatterTest, WrongSizesNameTheTensorOrBuffer) {
  SideLayout s = Side();
  std::vector<uint8_t> member(7), buf(16);
  absl::Status st = ScatterToRecord(s, s.records[0], 1, member, absl::MakeSpan(buf));
  ASSERT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("w.1.x"));
  std::vector<uint8_t> good(16), small(4);
  st = ScatterToRecord(s, s.records[0], 1, good, absl::MakeSpan(small));
  ASSERT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("buffer buf"));
}

}  // namespace
}  // namespace refit

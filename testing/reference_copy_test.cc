// Tests of the pattern helpers and the reference copy oracle.
#include "testing/reference_copy.h"

#include <string>

#include "gtest/gtest.h"
#include "layout/sharding.h"
#include "plan/planner.h"

namespace refit {
namespace {

// A [6, 5] bf16 tensor, Shard(0) over 2 ranks (rows 0-2, 3-5), each rank's
// rows stored transposed ([5, 3] column-major view) to exercise strides.
SideLayout TwoRankLayout() {
  SideLayout s;
  s.world_size = 2;
  TensorSpec t;
  t.name = "w";
  t.shape = {6, 5};
  t.dtype = DType::kBF16;
  s.tensors.push_back(t);
  for (int r = 0; r < 2; ++r) {
    s.buffers.push_back(BufferSpec{r, "w", 3 * 5 * 2, {}});
    Record rec;
    rec.tensor = 0;
    rec.rank = r;
    rec.buffer = r;
    rec.box = Box::Unchecked({3 * r, 0}, {3, 5});
    rec.dims = {DimMap{{DimSplit{3, 1}}}, DimMap{{DimSplit{5, 3}}}};
    s.records.push_back(rec);
  }
  return s;
}

TEST(PatternTest, RankSelectionAndSeedAreHonoured) {
  SideLayout s = TwoRankLayout();
  for (const Record& r : s.records) ASSERT_TRUE(ValidateRecord(s, r).ok());
  OwnedBuffers b = AllocateBuffers(s);
  FillPattern(s, b.ptrs, {/*rank=*/1, /*seed=*/7});
  // Rank 0 untouched, rank 1 filled.
  for (uint8_t v : b.storage[0]) EXPECT_EQ(v, 0);
  EXPECT_TRUE(CheckPattern(s, b.ptrs, {1, 7}).ok());
  EXPECT_FALSE(CheckPattern(s, b.ptrs, {0, 7}).ok());
  absl::Status other_seed = CheckPattern(s, b.ptrs, {1, 8});
  EXPECT_FALSE(other_seed.ok());
  EXPECT_NE(other_seed.message().find("tensor w"), std::string::npos);
  EXPECT_NE(other_seed.message().find("rank 1"), std::string::npos);
}

TEST(PatternTest, ElementBytesFollowTheStridedLayout) {
  SideLayout s = TwoRankLayout();
  OwnedBuffers b = AllocateBuffers(s);
  FillPattern(s, b.ptrs, {-1, 3});
  const uint64_t h = NameHash("w");
  // Element [4, 2] lives on rank 1 at local (1, 2) -> element offset 1 + 2*3.
  const int64_t off = (1 + 2 * 3) * 2;
  EXPECT_EQ(b.storage[1][off], PatternByte(h, 4 * 5 + 2, 0, 3));
  EXPECT_EQ(b.storage[1][off + 1], PatternByte(h, 4 * 5 + 2, 1, 3));
  // Corrupt one byte: the check names the element.
  b.storage[1][off] ^= 1;
  absl::Status st = CheckPattern(s, b.ptrs, {-1, 3});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("element [4, 2]"), std::string::npos) << st;
  EXPECT_NE(st.message().find("1 wrong elements"), std::string::npos) << st;
}

// An indexed record of one dim (per-expert FP8 scales after the planner
// merged them: expert i in buffer 2i, at the same offset) fills and checks
// the same bytes as one record per expert. Its elements used to be written
// all into the first buffer.
TEST(PatternTest, IndexedOneDimRecordIsOneElementPerBuffer) {
  SideLayout merged, split;
  for (SideLayout* s : {&merged, &split}) {
    s->world_size = 1;
    s->tensors.push_back({"e.{}.weight_scale", {4}, DType::kF32, true});
    for (int b = 0; b < 8; ++b) s->buffers.push_back({0, "buf" + std::to_string(b), 8, {}});
  }
  Record r;
  r.tensor = 0;
  r.buffer = 0;
  r.byte_offset = 4;
  r.box = *Box::Make({0}, {4});
  r.dims.resize(1);
  r.dims[0].splits.push_back({4, 0});
  r.buffer_step = 2;
  merged.records.push_back(r);
  for (int e = 0; e < 4; ++e) {
    Record one = r;
    one.box = *Box::Make({e}, {1});
    one.dims[0].splits[0] = {1, 0};
    one.buffer = 2 * e;
    one.buffer_step = 0;
    split.records.push_back(one);
  }
  OwnedBuffers a = AllocateBuffers(merged), b = AllocateBuffers(split);
  FillPattern(merged, a.ptrs, {-1, 3});
  FillPattern(split, b.ptrs, {-1, 3});
  EXPECT_EQ(a.storage, b.storage);
  EXPECT_TRUE(CheckPattern(merged, a.ptrs, {-1, 3}).ok());
  EXPECT_TRUE(CheckPattern(split, a.ptrs, {-1, 3}).ok());
  EXPECT_FALSE(CheckPattern(merged, a.ptrs, {-1, 4}).ok());
}

TEST(ReferenceCopyTest, CopiesEveryDestinationElement) {
  SideLayout src = TwoRankLayout();
  SideLayout dst = TwoRankLayout();
  dst.world_size = 1;
  dst.buffers = {BufferSpec{0, "w", 6 * 5 * 2, {}}};
  dst.records.resize(1);
  dst.records[0].rank = 0;
  dst.records[0].buffer = 0;
  dst.records[0].box = Box::Unchecked({0, 0}, {6, 5});
  dst.records[0].dims = RowMajorDims({6, 5});
  absl::StatusOr<Plan> plan = BuildPlan(src, dst, PlannerOptions{});
  ASSERT_TRUE(plan.ok()) << plan.status();
  OwnedBuffers sb = AllocateBuffers(src), db = AllocateBuffers(dst);
  FillPattern(src, sb.ptrs);
  ASSERT_TRUE(ReferenceCopy(*plan, sb.ptrs, db.ptrs).ok());
  EXPECT_TRUE(CheckPattern(dst, db.ptrs).ok()) << CheckPattern(dst, db.ptrs);
}

}  // namespace
}  // namespace refit

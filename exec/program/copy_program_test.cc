// Tests copy programs against a brute-force DimOffset oracle on random
// layouts (interleaved dims split into permuted digits, fused byte offsets),
// and runs the programs of a planned transfer end to end on host memory.
#include "exec/program/copy_program.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "layout/dtype.h"
#include "plan/planner.h"
#include "testing/expert_layouts.h"
#include "testing/reference_copy.h"

namespace refit {
namespace {

// A record of box `box` whose dims are each split into 1-2 digits, the
// digits laid out in memory in a random order, starting at `offset` bytes.
Record RandomRecord(std::mt19937& rng, const Box& box, int64_t elem,
                    int64_t offset, int32_t buffer, int64_t* bytes_used) {
  struct Digit {
    int dim, pos;
    int64_t size;
  };
  std::vector<Digit> digits;
  std::vector<std::vector<int64_t>> sizes(box.rank());
  for (int d = 0; d < box.rank(); ++d) {
    int64_t e = box.shape(d);
    std::vector<int64_t> divs;
    for (int64_t k = 1; k <= e; ++k) {
      if (e % k == 0) divs.push_back(k);
    }
    int64_t a = divs[rng() % divs.size()];
    sizes[d] = {a, e / a};
    digits.push_back({d, 0, a});
    digits.push_back({d, 1, e / a});
  }
  std::shuffle(digits.begin(), digits.end(), rng);
  std::vector<std::vector<int64_t>> strides(box.rank(),
                                            std::vector<int64_t>(2));
  int64_t s = 1;
  for (int i = static_cast<int>(digits.size()) - 1; i >= 0; --i) {
    strides[digits[i].dim][digits[i].pos] = s;
    s *= digits[i].size;
  }
  Record r;
  r.buffer = buffer;
  r.box = box;
  r.byte_offset = offset;
  for (int d = 0; d < box.rank(); ++d) {
    DimMap m;
    m.splits.push_back({sizes[d][0], strides[d][0]});
    m.splits.push_back({sizes[d][1], strides[d][1]});
    r.dims.push_back(m);
  }
  *bytes_used = s * elem;
  return r;
}

int64_t ElemOffset(const Record& r, const std::vector<int64_t>& global) {
  int64_t o = 0;
  for (int d = 0; d < r.box.rank(); ++d) {
    o += DimOffset(r.dims[d], global[d] - r.box.origin(d));
  }
  return o;
}

// Calls fn(global index) for every element of box in row-major order.
template <typename Fn>
void ForEachIndex(const Box& b, Fn fn) {
  std::vector<int64_t> idx(b.origin().begin(), b.origin().end());
  int64_t n = UncheckedNumElements(b);
  for (int64_t i = 0; i < n; ++i) {
    fn(idx);
    for (int d = b.rank() - 1; d >= 0; --d) {
      if (++idx[d] < b.limit(d)) break;
      idx[d] = b.origin(d);
    }
  }
}

Box RandomSubBox(std::mt19937& rng, const Box& b) {
  std::vector<int64_t> o, s;
  for (int d = 0; d < b.rank(); ++d) {
    int64_t lo = rng() % b.shape(d);
    int64_t len = 1 + rng() % (b.shape(d) - lo);
    o.push_back(b.origin(d) + lo);
    s.push_back(len);
  }
  return Box::Unchecked(o, s);
}

TEST(CopyProgramTest, RandomLayoutsMatchOracle) {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 300; ++trial) {
    const int rank = 1 + rng() % 3;
    const DType dt = (rng() % 2) ? DType::kBF16 : DType::kF32;
    const int64_t es = DTypeSize(dt);
    std::vector<int64_t> shape;
    for (int d = 0; d < rank; ++d) shape.push_back(1 + rng() % 12);
    Box full = Box::Unchecked(std::vector<int64_t>(rank, 0), shape);
    Plan plan;
    for (SideLayout* side : {&plan.src, &plan.dst}) {
      side->world_size = 1;
      side->tensors.push_back(TensorSpec{"t", shape, dt, false});
      int64_t used = 0;
      const int64_t off = es * (rng() % 5);  // fused: other data before it
      side->records.push_back(RandomRecord(rng, full, es, off, 0, &used));
      side->buffers.push_back(BufferSpec{0, "b", off + used + es * 3, {}});
    }
    Message m;
    const int nseg = 1 + rng() % 3;
    for (int i = 0; i < nseg; ++i) {
      Segment seg;
      seg.box = RandomSubBox(rng, full);
      seg.bytes = UncheckedNumElements(seg.box) * es;
      m.bytes += seg.bytes;
      plan.segments.push_back(seg);
    }
    m.num_segments = nseg;
    auto pack = PackProgram(plan, m);
    auto unpack = UnpackProgram(plan, m);
    auto direct = DirectProgram(plan, m);
    ASSERT_TRUE(pack.ok()) << pack.status();
    ASSERT_TRUE(unpack.ok()) << unpack.status();
    ASSERT_TRUE(direct.ok()) << direct.status();
    EXPECT_EQ(TaskBytes(*pack), m.bytes);
    EXPECT_EQ(TaskBytes(*unpack), m.bytes);
    EXPECT_EQ(TaskBytes(*direct), m.bytes);

    std::vector<char> src(plan.src.buffers[0].byte_size);
    for (auto& c : src) c = static_cast<char>(rng());
    const std::vector<char> dst0 = [&] {
      std::vector<char> d(plan.dst.buffers[0].byte_size);
      for (auto& c : d) c = static_cast<char>(rng());
      return d;
    }();
    // Oracle: element by element through DimOffset.
    std::vector<char> expect_stream;
    std::vector<char> expect_dst = dst0;
    for (const Segment& seg : plan.segments) {
      ForEachIndex(seg.box, [&](const std::vector<int64_t>& g) {
        const char* p = src.data() + plan.src.records[0].byte_offset +
                        es * ElemOffset(plan.src.records[0], g);
        expect_stream.insert(expect_stream.end(), p, p + es);
        std::memcpy(expect_dst.data() + plan.dst.records[0].byte_offset +
                        es * ElemOffset(plan.dst.records[0], g),
                    p, es);
      });
    }
    std::vector<char> stream(m.bytes);
    std::vector<char*> sb = {src.data()};
    std::vector<char> dst = dst0;
    std::vector<char*> db = {dst.data()};
    auto rp = ResolveTasks(*pack, sb, {}, nullptr, stream.data());
    ASSERT_TRUE(rp.ok()) << rp.status();
    RunCopiesHost(*rp);
    ASSERT_EQ(stream, expect_stream) << "trial " << trial;
    auto ru = ResolveTasks(*unpack, {}, db, stream.data(), nullptr);
    ASSERT_TRUE(ru.ok());
    RunCopiesHost(*ru);
    ASSERT_EQ(dst, expect_dst) << "trial " << trial;
    std::vector<char> dst2 = dst0;
    std::vector<char*> db2 = {dst2.data()};
    auto rd = ResolveTasks(*direct, sb, db2, nullptr, nullptr);
    ASSERT_TRUE(rd.ok());
    RunCopiesHost(*rd);
    ASSERT_EQ(dst2, expect_dst) << "trial " << trial;
  }
}

TEST(CopyProgramTest, RowSliceOfRowMajorIsOneTaskColumnSliceIsStrided) {
  Record r;
  r.box = Box::Unchecked({0, 0}, {8, 16});
  r.dims = RowMajorDims({8, 16});
  r.byte_offset = 64;
  std::vector<CopyTask> rows;
  ASSERT_TRUE(AppendRecordTasks(r, 2, Box::Unchecked({2, 0}, {3, 16}), 0,
                                true, &rows)
                  .ok());
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].rows * rows[0].row_bytes, 3 * 16 * 2);
  EXPECT_EQ(rows[0].src_offset, 64 + 2 * 16 * 2);
  std::vector<CopyTask> cols;
  ASSERT_TRUE(AppendRecordTasks(r, 2, Box::Unchecked({0, 4}, {8, 4}), 0,
                                true, &cols)
                  .ok());
  ASSERT_EQ(cols.size(), 1u);
  EXPECT_EQ(cols[0].rows, 8);
  EXPECT_EQ(cols[0].row_bytes, 8);
  EXPECT_EQ(cols[0].src_row_stride, 32);
  EXPECT_EQ(cols[0].dst_row_stride, 8);
}

TEST(CopyProgramTest, SegmentOutsideRecordNamesTensor) {
  Plan plan;
  plan.src.world_size = 1;
  plan.src.tensors.push_back(TensorSpec{"layers.0.qkv", {4, 4}, DType::kBF16});
  Record r;
  r.box = Box::Unchecked({0, 0}, {2, 4});
  r.dims = RowMajorDims({2, 4});
  plan.src.records.push_back(r);
  plan.src.buffers.push_back(BufferSpec{0, "b", 16, {}});
  Segment seg;
  seg.box = Box::Unchecked({0, 0}, {4, 4});
  seg.bytes = 32;
  plan.segments.push_back(seg);
  Message m;
  m.num_segments = 1;
  auto p = PackProgram(plan, m);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("layers.0.qkv"), std::string::npos);
}

// The copy programs (what the executor runs) of a plan with indexed
// records (per-expert trainer buffers): pack on the sender, unpack on the
// receiver, through a staging stream, fill every destination element.
TEST(CopyProgramTest, IndexedRecordsPackAndUnpackEveryElement) {
  absl::StatusOr<testing::LayoutPair> layouts = testing::GroupedExpertLayouts();
  ASSERT_TRUE(layouts.ok()) << layouts.status();
  const SideLayout& src = layouts->src;
  const SideLayout& dst = layouts->dst;
  absl::StatusOr<Plan> plan = BuildPlan(src, dst, PlannerOptions{});
  ASSERT_TRUE(plan.ok()) << plan.status();
  OwnedBuffers sb = AllocateBuffers(src), db = AllocateBuffers(dst, 0xEE);
  FillPattern(src, sb.ptrs);
  for (const Message& m : plan->messages) {
    absl::StatusOr<std::vector<CopyTask>> pack = PackProgram(*plan, m);
    absl::StatusOr<std::vector<CopyTask>> unpack = UnpackProgram(*plan, m);
    ASSERT_TRUE(pack.ok() && unpack.ok());
    EXPECT_EQ(TaskBytes(*pack), m.bytes);
    std::vector<char> stream(m.bytes);
    std::vector<char*> s, d;
    for (uint8_t* x : sb.ptrs) s.push_back(reinterpret_cast<char*>(x));
    for (uint8_t* x : db.ptrs) d.push_back(reinterpret_cast<char*>(x));
    absl::StatusOr<std::vector<ResolvedCopy>> p =
        ResolveTasks(*pack, s, {}, nullptr, stream.data());
    ASSERT_TRUE(p.ok()) << p.status();
    RunCopiesHost(*p);
    absl::StatusOr<std::vector<ResolvedCopy>> u =
        ResolveTasks(*unpack, {}, d, stream.data(), nullptr);
    ASSERT_TRUE(u.ok()) << u.status();
    RunCopiesHost(*u);
  }
  EXPECT_TRUE(CheckPattern(dst, db.ptrs).ok()) << CheckPattern(dst, db.ptrs);
}

}  // namespace
}  // namespace refit

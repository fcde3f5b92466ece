// Tests of BuildPlan: randomized property tests executed by the reference
// copy against the pattern oracle, golden plans, and indexed records.
// Validation errors: planner_error_test.cc.
#include "plan/planner.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "layout/dtype.h"
#include "layout/mesh.h"
#include "layout/sharding.h"
#include "plan/delta_lane.h"
#include "plan/fingerprint.h"
#include "testing/expert_layouts.h"
#include "testing/reference_copy.h"

namespace refit {
namespace {

// ---- random layouts ----

struct RandomMesh {
  Mesh mesh;
};

Mesh RandomMeshOf(std::mt19937_64& rng) {
  const int axes = 1 + rng() % 3;
  std::vector<std::string> names;
  std::vector<int64_t> sizes;
  int64_t n = 1;
  for (int a = 0; a < axes; ++a) {
    names.push_back(absl::StrCat("a", a));
    sizes.push_back(1 + rng() % 3);
    n *= sizes.back();
  }
  std::vector<int32_t> ranks(n);
  for (int64_t i = 0; i < n; ++i) ranks[i] = static_cast<int32_t>(i);
  std::shuffle(ranks.begin(), ranks.end(), rng);
  return *Mesh::Make(names, sizes, ranks);
}

std::vector<Placement> RandomPlacements(std::mt19937_64& rng, const Mesh& mesh,
                                        int tensor_rank) {
  std::vector<Placement> p;
  for (int a = 0; a < mesh.num_axes(); ++a) {
    if (tensor_rank > 0 && rng() % 3 != 0) {
      // Nested shards on one dim happen often with rank-1 tensors.
      p.push_back(Placement::Shard(rng() % tensor_rank));
    } else {
      p.push_back(Placement::Replicate());
    }
  }
  return p;
}

// Builds a side: every rank gets either one dense buffer per tensor or one
// fused buffer with all its shards at consecutive offsets; some records of
// the fused buffers have dim 0 interleaved (rows permuted by a 2-way split).
SideLayout RandomSide(std::mt19937_64& rng, const std::vector<TensorSpec>& ts,
                      bool fused, bool interleave) {
  SideLayout side;
  Mesh mesh = RandomMeshOf(rng);
  side.world_size = static_cast<int32_t>(mesh.size());
  for (const TensorSpec& t : ts) EXPECT_TRUE(AddTensor(side, t).ok());
  std::vector<std::vector<Placement>> pl;
  for (const TensorSpec& t : ts) {
    pl.push_back(RandomPlacements(rng, mesh, static_cast<int>(t.shape.size())));
  }
  if (!fused) {
    for (size_t i = 0; i < ts.size(); ++i) {
      EXPECT_TRUE(AddDenseShards(side, static_cast<int32_t>(i), mesh, pl[i]).ok());
    }
    return side;
  }
  for (int64_t m = 0; m < mesh.size(); ++m) {
    const int32_t rank = mesh.ranks()[m];
    std::vector<Record> recs;
    int64_t offset = 0;
    for (size_t i = 0; i < ts.size(); ++i) {
      Box box = *ShardBox(ts[i].shape, mesh.axis_sizes(), pl[i], mesh.CoordOf(m));
      if (IsEmpty(box)) continue;
      Record r;
      r.tensor = static_cast<int32_t>(i);
      r.rank = rank;
      r.box = box;
      r.byte_offset = offset;
      r.dims = RowMajorDims(box.shape());
      if (interleave && box.rank() >= 1 && box.shape(0) % 2 == 0 &&
          box.shape(0) >= 4 && rng() % 2 == 0) {
        int64_t row = 1;
        for (int d = 1; d < box.rank(); ++d) row *= box.shape(d);
        r.dims[0].splits = {DimSplit{2, row}, DimSplit{box.shape(0) / 2, 2 * row}};
      }
      offset += UncheckedNumElements(box) * DTypeSize(ts[i].dtype);
      recs.push_back(r);
    }
    if (recs.empty()) continue;
    int32_t b = *AddBuffer(side, rank, "fused", offset);
    for (Record& r : recs) {
      r.buffer = b;
      side.records.push_back(r);
    }
  }
  return side;
}

std::vector<TensorSpec> RandomTensors(std::mt19937_64& rng) {
  std::vector<TensorSpec> ts;
  const int n = 1 + rng() % 4;
  const DType dts[] = {DType::kBF16, DType::kF32, DType::kF8E4M3};
  for (int i = 0; i < n; ++i) {
    TensorSpec t;
    t.name = absl::StrCat("t", i);
    const int rank = 1 + rng() % 3;
    for (int d = 0; d < rank; ++d) t.shape.push_back(1 + rng() % 9);
    t.dtype = dts[rng() % 3];
    if (rank >= 2 && rng() % 4 == 0) {
      t.stacked = true;
      t.name = absl::StrCat("t", i, ".experts.{}.w");
    }
    ts.push_back(t);
  }
  return ts;
}

// Packs the message's segments from a side's buffers (row-major per box).
std::vector<uint8_t> Pack(const Plan& plan, const Message& m, bool src_side,
                          const HostBuffers& bufs) {
  const SideLayout& side = src_side ? plan.src : plan.dst;
  std::vector<uint8_t> out;
  for (int32_t i = m.first_segment; i < m.first_segment + m.num_segments; ++i) {
    const Segment& s = plan.segments[i];
    const Record& r = side.records[src_side ? s.src_record : s.dst_record];
    const int64_t es = DTypeSize(side.tensors[r.tensor].dtype);
    Box::Indices g(s.box.origin().begin(), s.box.origin().end());
    if (IsEmpty(s.box)) continue;
    while (true) {
      int64_t off = 0;
      for (int d = 0; d < s.box.rank(); ++d) {
        off += DimOffset(r.dims[d], g[d] - r.box.origin(d));
      }
      const uint8_t* p = bufs[r.buffer] + r.byte_offset + off * es;
      out.insert(out.end(), p, p + es);
      int d = s.box.rank() - 1;
      while (d >= 0 && ++g[d] == s.box.limit(d)) {
        g[d] = s.box.origin(d);
        --d;
      }
      if (d < 0) break;
    }
  }
  return out;
}

void CheckPlanInvariants(const Plan& plan, const HostBuffers& src,
                         const HostBuffers& dst) {
  const PlannerOptions& o = plan.options;
  const int64_t lane_budget = o.staging_budget_bytes / o.num_lanes;
  const int64_t cap = o.max_message_bytes > 0
                          ? std::min(o.max_message_bytes, lane_budget)
                          : lane_budget;
  // Waves partition the messages, in order.
  int32_t next = 0;
  for (size_t r = 0; r < plan.waves.size(); ++r) {
    const Wave& rd = plan.waves[r];
    ASSERT_GE(rd.lane, 0);
    ASSERT_LT(rd.lane, o.num_lanes);
    ASSERT_EQ(rd.first_message, next);
    ASSERT_GT(rd.num_messages, 0);
    std::map<int32_t, int64_t> ss, ds, sall, dall;
    std::map<int32_t, int32_t> scount, dcount;
    for (int32_t i = rd.first_message; i < rd.first_message + rd.num_messages; ++i) {
      const Message& m = plan.messages[i];
      ASSERT_EQ(m.wave, static_cast<int32_t>(r));
      if (i > rd.first_message) {
        const Message& p = plan.messages[i - 1];
        ASSERT_LE(std::make_pair(p.src_rank, p.dst_rank),
                  std::make_pair(m.src_rank, m.dst_rank));
      }
      if (!m.src_contiguous) ss[m.src_rank] += m.bytes;
      if (!m.dst_contiguous) ds[m.dst_rank] += m.bytes;
      sall[m.src_rank] += m.bytes;
      dall[m.dst_rank] += m.bytes;
      ++scount[m.src_rank];
      ++dcount[m.dst_rank];
      if (!plan.src.stage_of_rank.empty()) {
        ASSERT_EQ(plan.src.stage_of_rank[m.src_rank], rd.stage);
      }
    }
    for (auto& [k, v] : ss) ASSERT_LE(v, lane_budget) << "src rank " << k;
    for (auto& [k, v] : ds) ASSERT_LE(v, lane_budget) << "dst rank " << k;
    // All bytes of a rank in a wave: within max_wave_bytes, unless one
    // message alone exceeds it.
    const int64_t wave_cap =
        o.max_wave_bytes > 0 ? o.max_wave_bytes : lane_budget;
    for (auto& [k, v] : sall) {
      if (scount[k] > 1) {
        ASSERT_LE(v, wave_cap) << "src rank " << k;
      }
    }
    for (auto& [k, v] : dall) {
      if (dcount[k] > 1) {
        ASSERT_LE(v, wave_cap) << "dst rank " << k;
      }
    }
    next += rd.num_messages;
  }
  ASSERT_EQ(next, static_cast<int32_t>(plan.messages.size()));
  // Messages partition the segments; bytes and ranks agree.
  std::vector<int> owners(plan.segments.size(), 0);
  for (const Message& m : plan.messages) {
    ASSERT_GE(m.first_segment, 0);
    ASSERT_LE(int64_t{m.first_segment} + m.num_segments,
              static_cast<int64_t>(plan.segments.size()));
    for (int32_t i = m.first_segment; i < m.first_segment + m.num_segments; ++i) {
      ++owners[i];
    }
    ASSERT_GT(m.num_segments, 0);
    int64_t bytes = 0;
    for (int32_t i = m.first_segment; i < m.first_segment + m.num_segments; ++i) {
      const Segment& s = plan.segments[i];
      ASSERT_EQ(plan.src.records[s.src_record].rank, m.src_rank);
      ASSERT_EQ(plan.dst.records[s.dst_record].rank, m.dst_rank);
      bytes += s.bytes;
    }
    ASSERT_EQ(bytes, m.bytes);
    if (m.num_segments > 1) ASSERT_LE(m.bytes, cap);
    // A message of several segments holds only segments that are below
    // direct_min_bytes or contiguous on neither side.
    if (m.num_segments > 1 && o.direct_min_bytes > 0) {
      for (int32_t i = m.first_segment; i < m.first_segment + m.num_segments; ++i) {
        const Segment& s = plan.segments[i];
        if (s.bytes < o.direct_min_bytes) continue;
        const Record& sr = plan.src.records[s.src_record];
        const Record& dr = plan.dst.records[s.dst_record];
        ASSERT_FALSE(ContiguousByteRange(
            sr, DTypeSize(plan.src.tensors[sr.tensor].dtype), s.box).has_value());
        ASSERT_FALSE(ContiguousByteRange(
            dr, DTypeSize(plan.dst.tensors[dr.tensor].dtype), s.box).has_value());
      }
    }
    // Contiguity claims hold: the packed bytes are that buffer range.
    if (m.src_contiguous) {
      std::vector<uint8_t> packed = Pack(plan, m, true, src);
      ASSERT_EQ(plan.src.buffers[m.src_buffer].rank, m.src_rank);
      ASSERT_LE(m.src_offset + m.bytes, plan.src.buffers[m.src_buffer].byte_size);
      ASSERT_EQ(0, std::memcmp(packed.data(), src[m.src_buffer] + m.src_offset,
                               m.bytes));
    }
    if (m.dst_contiguous) {
      std::vector<uint8_t> packed = Pack(plan, m, false, dst);
      ASSERT_EQ(plan.dst.buffers[m.dst_buffer].rank, m.dst_rank);
      ASSERT_EQ(0, std::memcmp(packed.data(), dst[m.dst_buffer] + m.dst_offset,
                               m.bytes));
    }
  }
  for (size_t i = 0; i < owners.size(); ++i) {
    ASSERT_EQ(owners[i], 1) << "segment " << i << " in " << owners[i]
                            << " messages";
  }
}

TEST(PlannerTest, RandomizedLayoutsCopyEveryElementExactlyOnce) {
  std::mt19937_64 rng(20261122);
  int fused = 0, stacked = 0;
  for (int iter = 0; iter < 300; ++iter) {
    SCOPED_TRACE(absl::StrCat("iteration ", iter));
    std::vector<TensorSpec> ts = RandomTensors(rng);
    for (const auto& t : ts) stacked += t.stacked;
    SideLayout src = RandomSide(rng, ts, rng() % 3 == 0, false);
    const bool f = rng() % 2 == 0;
    fused += f;
    SideLayout dst = RandomSide(rng, ts, f, true);
    if (rng() % 2) {
      for (int r = 0; r < src.world_size; ++r) {
        src.stage_of_rank.push_back(rng() % 3);
      }
    }
    if (rng() % 2) {
      for (int r = 0; r < src.world_size; ++r) src.host_of_rank.push_back(r % 2);
      for (int r = 0; r < dst.world_size; ++r) dst.host_of_rank.push_back(r % 2);
    }
    PlannerOptions opt;
    opt.num_lanes = 1 + rng() % 3;
    opt.staging_budget_bytes = opt.num_lanes * (8 + rng() % 200);
    opt.max_message_bytes = rng() % 2 ? 0 : 4 + rng() % 64;
    opt.direct_min_bytes = rng() % 3 == 0 ? 0 : 1 + rng() % 64;
    opt.max_wave_bytes = rng() % 2 ? 0 : 8 + rng() % 400;
    absl::StatusOr<Plan> plan = BuildPlan(src, dst, opt);
    ASSERT_TRUE(plan.ok()) << plan.status();
    OwnedBuffers sb = AllocateBuffers(src);
    OwnedBuffers db = AllocateBuffers(dst, 0xEE);
    FillPattern(src, sb.ptrs);
    ASSERT_TRUE(ReferenceCopy(*plan, sb.ptrs, db.ptrs).ok());
    ASSERT_TRUE(CheckPattern(dst, db.ptrs).ok()) << CheckPattern(dst, db.ptrs);
    // Exactly once: the segments move exactly the destination's bytes.
    int64_t dst_bytes = 0;
    for (const Record& r : dst.records) {
      dst_bytes += UncheckedNumElements(r.box) * DTypeSize(dst.tensors[r.tensor].dtype);
    }
    int64_t seg_bytes = 0;
    for (const Segment& s : plan->segments) seg_bytes += s.bytes;
    ASSERT_EQ(seg_bytes, dst_bytes);
    ASSERT_EQ(plan->stats.total_bytes, dst_bytes);
    CheckPlanInvariants(*plan, sb.ptrs, db.ptrs);
    // Determinism.
    absl::StatusOr<Plan> again = BuildPlan(src, dst, opt);
    ASSERT_TRUE(again.ok());
    ASSERT_EQ(again->fingerprint, plan->fingerprint);
    ASSERT_EQ(plan->fingerprint.size(), 32u);
  }
  EXPECT_GT(fused, 50);
  EXPECT_GT(stacked, 20);
}

TEST(PlannerTest, OverlappingSourceBoxesAreSentOnce) {
  // Source boxes [0:3] on rank 0 and [2:6] on rank 1 overlap at 2.
  std::mt19937_64 rng(7);
  SideLayout src;
  src.world_size = 2;
  TensorSpec t{"w", {6}, DType::kF32};
  ASSERT_TRUE(AddTensor(src, t).ok());
  for (int r = 0; r < 2; ++r) {
    Record rec;
    rec.rank = r;
    rec.buffer = *AddBuffer(src, r, "w", r == 0 ? 12 : 16);
    rec.box = r == 0 ? Box::Unchecked({0}, {3}) : Box::Unchecked({2}, {4});
    rec.dims = RowMajorDims(rec.box.shape());
    src.records.push_back(rec);
  }
  SideLayout dst;
  dst.world_size = 1;
  ASSERT_TRUE(AddTensor(dst, t).ok());
  Mesh one = *Mesh::Make({"x"}, {1});
  ASSERT_TRUE(AddDenseShards(dst, 0, one, {Placement::Replicate()}).ok());
  absl::StatusOr<Plan> plan = BuildPlan(src, dst, PlannerOptions());
  ASSERT_TRUE(plan.ok()) << plan.status();
  int64_t bytes = 0;
  for (const Segment& s : plan->segments) bytes += s.bytes;
  EXPECT_EQ(bytes, 24);
  OwnedBuffers sb = AllocateBuffers(src), db = AllocateBuffers(dst);
  FillPattern(src, sb.ptrs);
  ASSERT_TRUE(ReferenceCopy(*plan, sb.ptrs, db.ptrs).ok());
  EXPECT_TRUE(CheckPattern(dst, db.ptrs).ok());
}

// ---- golden plans ----

std::string PlanText(const Plan& p) {
  std::string s;
  for (size_t r = 0; r < p.waves.size(); ++r) {
    const Wave& rd = p.waves[r];
    absl::StrAppend(&s, "wave ", r, " lane ", rd.lane, " stage ", rd.stage, "\n");
    for (int32_t i = rd.first_message; i < rd.first_message + rd.num_messages; ++i) {
      const Message& m = p.messages[i];
      absl::StrAppend(&s, "  msg ", m.src_rank, "->", m.dst_rank, " ", m.bytes, "B");
      if (m.src_contiguous) {
        absl::StrAppend(&s, " src=", p.src.buffers[m.src_buffer].name, "@", m.src_offset);
      }
      if (m.dst_contiguous) {
        absl::StrAppend(&s, " dst=", p.dst.buffers[m.dst_buffer].name, "@", m.dst_offset);
      }
      absl::StrAppend(&s, "\n");
      for (int32_t j = m.first_segment; j < m.first_segment + m.num_segments; ++j) {
        const Segment& g = p.segments[j];
        absl::StrAppend(&s, "    ", p.dst.tensors[p.dst.records[g.dst_record].tensor].name,
                        " ", g.box.ToString(), " ", g.bytes, "B\n");
      }
    }
  }
  return s;
}

TEST(PlannerTest, GoldenTp2ToTp1) {
  TensorSpec t{"w", {4, 2}, DType::kBF16};
  SideLayout src, dst;
  src.world_size = 2;
  dst.world_size = 1;
  ASSERT_TRUE(AddTensor(src, t).ok());
  ASSERT_TRUE(AddTensor(dst, t).ok());
  ASSERT_TRUE(AddDenseShards(src, 0, *Mesh::Make({"tp"}, {2}), {Placement::Shard(0)}).ok());
  ASSERT_TRUE(AddDenseShards(dst, 0, *Mesh::Make({"tp"}, {1}), {Placement::Shard(0)}).ok());
  absl::StatusOr<Plan> plan = BuildPlan(src, dst, PlannerOptions());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(PlanText(*plan),
            "wave 0 lane 0 stage 0\n"
            "  msg 0->0 8B src=w@0 dst=w@0\n"
            "    w [0:2, 0:2] 8B\n"
            "  msg 1->0 8B src=w@0 dst=w@8\n"
            "    w [2:4, 0:2] 8B\n");
}

TEST(PlannerTest, GoldenReplicatedSourceToTwoShardsBalanced) {
  // [4] f32 replicated on 2 trainer ranks -> 2 engine shards; each engine
  // shard comes from a different replica; small budget splits waves.
  TensorSpec t{"b", {4}, DType::kF32};
  SideLayout src, dst;
  src.world_size = 2;
  dst.world_size = 2;
  ASSERT_TRUE(AddTensor(src, t).ok());
  ASSERT_TRUE(AddTensor(dst, t).ok());
  ASSERT_TRUE(AddDenseShards(src, 0, *Mesh::Make({"dp"}, {2}), {Placement::Replicate()}).ok());
  ASSERT_TRUE(AddDenseShards(dst, 0, *Mesh::Make({"tp"}, {2}), {Placement::Shard(0)}).ok());
  PlannerOptions opt;
  opt.num_lanes = 2;
  opt.staging_budget_bytes = 8;  // 4 bytes per lane: one element per message
  absl::StatusOr<Plan> plan = BuildPlan(src, dst, opt);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(PlanText(*plan),
            "wave 0 lane 0 stage 0\n"
            "  msg 0->0 4B src=b@0 dst=b@0\n"
            "    b [0:1] 4B\n"
            "  msg 1->1 4B src=b@8 dst=b@0\n"
            "    b [2:3] 4B\n"
            "wave 1 lane 1 stage 0\n"
            "  msg 0->0 4B src=b@4 dst=b@4\n"
            "    b [1:2] 4B\n"
            "  msg 1->1 4B src=b@12 dst=b@4\n"
            "    b [3:4] 4B\n");
}

// Per wave, the most bytes one rank stages (sends plus receives of
// messages not contiguous on its side).
int64_t MostStagedPerWave(const Plan& plan) {
  int64_t most = 0;
  for (const Wave& w : plan.waves) {
    std::map<std::pair<int, int32_t>, int64_t> staged;  // (side, rank)
    for (int32_t i = w.first_message; i < w.first_message + w.num_messages; ++i) {
      const Message& m = plan.messages[i];
      if (!m.src_contiguous) most = std::max(most, staged[{0, m.src_rank}] += m.bytes);
      if (!m.dst_contiguous) most = std::max(most, staged[{1, m.dst_rank}] += m.bytes);
    }
  }
  return most;
}

// `n` bf16 [1024, 1024] tensors, Shard(0) over 2 trainer ranks into
// Shard(1) over 2 engine ranks: pieces of 512 KiB, each strided on the
// engine's side.
void StridedShards(int n, SideLayout* src, SideLayout* dst) {
  src->world_size = dst->world_size = 2;
  const Mesh two = *Mesh::Make({"x"}, {2});
  for (int i = 0; i < n; ++i) {
    TensorSpec t{absl::StrCat("w", i), {1024, 1024}, DType::kBF16};
    ASSERT_TRUE(AddTensor(*src, t).ok());
    ASSERT_TRUE(AddTensor(*dst, t).ok());
    ASSERT_TRUE(AddDenseShards(*src, i, two, {Placement::Shard(0)}).ok());
    ASSERT_TRUE(AddDenseShards(*dst, i, two, {Placement::Shard(1)}).ok());
  }
}

TEST(PlannerTest, ManySmallStridedPiecesGetFourLanes) {
  // 256 bf16 [1024, 1024] tensors, Shard(0) over 2 trainer ranks into
  // Shard(1) over 2 engine ranks: 1024 strided pieces of 512 KiB, 256 MiB
  // staged per rank, 64 MiB of staging per lane with the 2 lanes asked
  // for. The planner takes 4 lanes (32 MiB each).
  SideLayout src, dst;
  ASSERT_NO_FATAL_FAILURE(StridedShards(256, &src, &dst));
  PlannerOptions opt;
  opt.num_lanes = 2;
  opt.staging_budget_bytes = 128 << 20;
  absl::StatusOr<Plan> plan = BuildPlan(src, dst, opt);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->options.num_lanes, 4);
  std::set<int32_t> lanes;
  for (const Wave& w : plan->waves) lanes.insert(w.lane);
  EXPECT_EQ(lanes, (std::set<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(MostStagedPerWave(*plan), 32 << 20);
  EXPECT_EQ(plan->stats.total_bytes, int64_t{256} << 21);
  // The lanes asked for when the caller fixes them, or when the staged
  // bytes are under 4 lane budgets.
  opt.choose_lanes = false;
  plan = BuildPlan(src, dst, opt);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->options.num_lanes, 2);
  EXPECT_EQ(MostStagedPerWave(*plan), 64 << 20);
  opt.choose_lanes = true;
  opt.staging_budget_bytes = 256 << 20;
  plan = BuildPlan(src, dst, opt);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->options.num_lanes, 2);
}

// The most bytes one rank sends plus receives in one wave, and the
// largest message.
std::pair<int64_t, int64_t> MostPerWaveAndMessage(const Plan& plan) {
  int64_t wave_most = 0, message_most = 0;
  for (const Wave& w : plan.waves) {
    std::map<std::pair<int, int32_t>, int64_t> bytes;  // (side, rank)
    for (int32_t i = w.first_message; i < w.first_message + w.num_messages; ++i) {
      const Message& m = plan.messages[i];
      message_most = std::max(message_most, m.bytes);
      wave_most = std::max(wave_most, bytes[{0, m.src_rank}] += m.bytes);
      wave_most = std::max(wave_most, bytes[{1, m.dst_rank}] += m.bytes);
    }
  }
  return {wave_most, message_most};
}

TEST(PlannerTest, DeltaPlansKeepWavesWithinHalfALane) {
  // 64 bf16 [1024, 1024] tensors (128 MiB), Shard(0) over 2 trainer ranks
  // into Shard(1) over 2 engine ranks, 64 MiB of staging per lane: a delta
  // runner's lane holds a batch's packed messages and their encodings, so
  // a delta plan's waves and messages carry at most 32 MiB a rank.
  SideLayout src, dst;
  ASSERT_NO_FATAL_FAILURE(StridedShards(64, &src, &dst));
  PlannerOptions opt;
  opt.num_lanes = 2;
  opt.staging_budget_bytes = 128 << 20;
  opt.choose_lanes = false;
  absl::StatusOr<Plan> dense = BuildPlan(src, dst, opt);
  ASSERT_TRUE(dense.ok()) << dense.status();
  EXPECT_GT(MostPerWaveAndMessage(*dense).first, 32 << 20);
  opt.delta = true;
  absl::StatusOr<Plan> delta = BuildPlan(src, dst, opt);
  ASSERT_TRUE(delta.ok()) << delta.status();
  EXPECT_LE(MostPerWaveAndMessage(*delta).first, 32 << 20);
  EXPECT_LE(MostPerWaveAndMessage(*delta).second, 32 << 20);
  EXPECT_EQ(delta->options.max_wave_bytes, 32 << 20);
  EXPECT_EQ(delta->stats.total_bytes, dense->stats.total_bytes);
  EXPECT_NE(PlanFingerprint(*delta), PlanFingerprint(*dense));
  // Smaller caps asked for stay.
  opt.max_wave_bytes = 8 << 20;
  delta = BuildPlan(src, dst, opt);
  ASSERT_TRUE(delta.ok()) << delta.status();
  EXPECT_EQ(delta->options.max_wave_bytes, 8 << 20);
  EXPECT_EQ(delta->options.max_message_bytes, 32 << 20);
}

// 64 bf16 [1024, 1024] tensors on one trainer rank into one engine rank,
// as FP8 blocks (with their scales) when `fp8`, else as they are.
void OneRankTensors(bool fp8, SideLayout* src, SideLayout* dst) {
  src->world_size = dst->world_size = 1;
  const Mesh one = *Mesh::Make({"x"}, {1});
  for (int i = 0; i < 64; ++i) {
    const std::string name = absl::StrCat("w", i);
    const int32_t s = *AddTensor(*src, TensorSpec{name, {1024, 1024}, DType::kBF16});
    ASSERT_TRUE(AddDenseShards(*src, s, one, {Placement::Replicate()}).ok());
    const TensorSpec bf16{name, {1024, 1024}, DType::kBF16};
    const int32_t d = *AddTensor(
        *dst, fp8 ? WithFormat({name, {1024, 1024}, DType::kF8E4M3}, QuantFormat::kFp8Block,
                               QuantRole::kCodes)
                  : bf16);
    ASSERT_TRUE(AddDenseShards(*dst, d, one, {Placement::Replicate()}).ok());
    if (!fp8) continue;
    const int32_t sc = *AddTensor(
        *dst, WithFormat({absl::StrCat(name, "_scale_inv"), {8, 8}, DType::kF32},
                         QuantFormat::kFp8Block, QuantRole::kScales));
    ASSERT_TRUE(AddDenseShards(*dst, sc, one, {Placement::Replicate()}).ok());
  }
}

TEST(PlannerTest, PlansWithConversionsKeepAQuantizingRoomInEveryLane) {
  // 64 MiB of FP8 codes, 32 MiB per lane: a delta round's trainer packs
  // what reads quantized values and quantizes its rows in the lane room
  // its wave leaves, so waves and messages carry at most the lane room
  // less QuantizeRoom (8 MiB); without conversions they fill the lane.
  PlannerOptions opt;
  opt.num_lanes = 2;
  opt.staging_budget_bytes = 64 << 20;
  opt.choose_lanes = false;
  const int64_t cap = DeltaLaneRoom(opt) - QuantizeRoom(opt);
  EXPECT_EQ(cap, 24 << 20);
  for (bool fp8 : {true, false}) {
    SCOPED_TRACE(fp8 ? "fp8" : "bf16");
    SideLayout src, dst;
    ASSERT_NO_FATAL_FAILURE(OneRankTensors(fp8, &src, &dst));
    absl::StatusOr<Plan> plan = BuildPlan(src, dst, opt);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->conversions.empty(), !fp8);
    const auto [wave_most, message_most] = MostPerWaveAndMessage(*plan);
    if (fp8) {
      EXPECT_EQ(plan->options.max_wave_bytes, cap);
      EXPECT_EQ(plan->options.max_message_bytes, cap);
      EXPECT_LE(wave_most, cap);
      EXPECT_GT(wave_most, 16 << 20);  // filled to the cap
      EXPECT_LE(message_most, cap);
    } else {
      EXPECT_EQ(plan->options.max_wave_bytes, 0);
      EXPECT_GT(wave_most, cap);
    }
  }
}

TEST(PlannerTest, GoldenBigContiguousSegmentTravelsAlone) {
  // Three tensors on one rank each side, one buffer each. b (64 bytes) is
  // contiguous on both sides and >= direct_min_bytes: a message of its
  // own, no staging on either side. a and c are coalesced into one staged
  // message, in the same wave (a pair may repeat within a wave).
  SideLayout src, dst;
  src.world_size = 1;
  dst.world_size = 1;
  for (const TensorSpec& t : {TensorSpec{"a", {4}, DType::kF32},
                              TensorSpec{"b", {16}, DType::kF32},
                              TensorSpec{"c", {4}, DType::kF32}}) {
    for (SideLayout* side : {&src, &dst}) {
      ASSERT_TRUE(AddTensor(*side, t).ok());
      ASSERT_TRUE(AddDenseShards(*side, static_cast<int32_t>(side->tensors.size()) - 1,
                                 *Mesh::Make({"x"}, {1}), {Placement::Replicate()})
                      .ok());
    }
  }
  PlannerOptions opt;
  opt.direct_min_bytes = 32;
  absl::StatusOr<Plan> plan = BuildPlan(src, dst, opt);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(PlanText(*plan),
            "wave 0 lane 0 stage 0\n"
            "  msg 0->0 64B src=b@0 dst=b@0\n"
            "    b [0:16] 64B\n"
            "  msg 0->0 32B\n"
            "    a [0:4] 16B\n"
            "    c [0:4] 16B\n");
  EXPECT_EQ(plan->stats.staging_src[0], 32);
  EXPECT_EQ(plan->stats.staging_dst[0], 32);
  // Without the rule everything is one staged message.
  opt.direct_min_bytes = 0;
  plan = BuildPlan(src, dst, opt);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->messages.size(), 1u);
  EXPECT_EQ(plan->stats.staging_src[0], 96);
  // A wave holds at most max_wave_bytes of a rank's bytes.
  opt.direct_min_bytes = 32;
  opt.max_wave_bytes = 64;
  plan = BuildPlan(src, dst, opt);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->waves.size(), 2u);
}

// Megatron TEGroupedMLP: one buffer per local expert. The planner merges
// the per-expert records of a rank into one indexed record, and the plan
// copies every element exactly (reference copy).
TEST(PlannerTest, PerExpertBuffersAreMergedIntoIndexedRecords) {
  absl::StatusOr<testing::LayoutPair> layouts = testing::GroupedExpertLayouts();
  ASSERT_TRUE(layouts.ok()) << layouts.status();
  const SideLayout& src = layouts->src;
  const SideLayout& dst = layouts->dst;
  absl::StatusOr<Plan> plan = BuildPlan(src, dst, PlannerOptions{});
  ASSERT_TRUE(plan.ok()) << plan.status();
  // 16 per-expert records -> 4 indexed ones (2 ranks x 2 weights).
  ASSERT_EQ(plan->src.records.size(), 4u);
  for (const Record& r : plan->src.records) {
    EXPECT_EQ(r.buffer_step, 1);
    EXPECT_EQ(r.box.shape(0), 4);
    EXPECT_TRUE(ValidateRecord(plan->src, r).ok()) << ValidateRecord(plan->src, r);
  }
  // One segment per (weight, src rank, dst rank), not per expert.
  EXPECT_EQ(plan->segments.size(), 8u);
  // The fingerprints see the buffer step of an indexed record (the same
  // boxes with another buffer per expert are another layout).
  {
    int merged = -1;
    for (size_t i = 0; i < plan->src.records.size(); ++i) {
      if (plan->src.records[i].buffer_step != 0) merged = static_cast<int>(i);
    }
    ASSERT_GE(merged, 0);
    SideLayout other = plan->src;
    EXPECT_EQ(LayoutFingerprint(other), LayoutFingerprint(plan->src));
    other.records[merged].buffer_step += 1;
    EXPECT_NE(LayoutFingerprint(other), LayoutFingerprint(plan->src));
    Plan changed = *plan;
    changed.src = other;
    EXPECT_NE(PlanFingerprint(changed), plan->fingerprint);
  }

  OwnedBuffers sb = AllocateBuffers(src), db = AllocateBuffers(dst, 0xEE);
  FillPattern(src, sb.ptrs);
  ASSERT_TRUE(ReferenceCopy(*plan, sb.ptrs, db.ptrs).ok());
  EXPECT_TRUE(CheckPattern(dst, db.ptrs).ok()) << CheckPattern(dst, db.ptrs);
}

}  // namespace
}  // namespace refit

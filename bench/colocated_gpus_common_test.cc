// The two-GPU colocated cases' plans, split by GPU (no device needed: the
// arenas are address ranges only).
#include "bench/colocated_gpus_common.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace refit::bench {
namespace {

// Arenas laid out at fake, disjoint addresses (never dereferenced).
Arena Fake(const SideLayout& side, int rank, uintptr_t base) {
  Arena a;
  a.base = reinterpret_cast<char*>(base);
  a.offset.assign(side.buffers.size(), -1);
  for (size_t b = 0; b < side.buffers.size(); ++b) {
    if (side.buffers[b].rank != rank) continue;
    a.offset[b] = a.bytes;
    a.bytes += (side.buffers[b].byte_size + 255) / 256 * 256;
  }
  return a;
}

struct Split {
  int64_t local = 0, peer = 0;
};

Split SplitOf(const std::string& name, int e) {
  absl::StatusOr<GpusCase> c = GpusCaseNamed(name);
  EXPECT_TRUE(c.ok());
  absl::StatusOr<Plan> plan = GpusCasePlan(*c, "qwen3-8b");
  EXPECT_TRUE(plan.ok()) << plan.status();
  std::vector<Arena> trainers = {Fake(plan->src, 0, uintptr_t{1} << 40),
                                 Fake(plan->src, 1, uintptr_t{2} << 40)};
  absl::StatusOr<EngineCopies> copies =
      ResolveEngineCopies(*plan, e, trainers, Fake(plan->dst, e, uintptr_t{3} << 40));
  EXPECT_TRUE(copies.ok()) << copies.status();
  return {copies->local_bytes, copies->peer_bytes};
}

TEST(GpusCaseTest, DataParallelEnginesReadHalfOfTheModelFromTheOtherGpu) {
  for (int e : {0, 1}) {
    const Split s = SplitOf("dp2", e);
    EXPECT_GT(s.peer, 7'000'000'000);
    EXPECT_GT(s.local, 7'000'000'000);
    EXPECT_GT(s.local + s.peer, 16'000'000'000);
  }
}

TEST(GpusCaseTest, TensorParallelEnginesReadMostlyTheirOwnGpu) {
  for (int e : {0, 1}) {
    const Split s = SplitOf("tp2", e);
    EXPECT_GT(s.local, 7'000'000'000);
    EXPECT_LT(s.peer, s.local / 10) << "engine " << e << " peer bytes " << s.peer;
  }
}

TEST(GpusCaseTest, ReplicatedTensorsAreReadFromTheEngineRanksOwnGpu) {
  // Norms are replicated on both trainer ranks: each engine rank reads
  // them from the trainer on its GPU (145 small peer copies otherwise).
  for (const char* name : {"tp2", "dp2"}) {
    absl::StatusOr<Plan> plan = GpusCasePlan(*GpusCaseNamed(name), "qwen3-8b");
    ASSERT_TRUE(plan.ok()) << plan.status();
    int replicated = 0;
    for (const Segment& s : plan->segments) {
      const Record& from = plan->src.records[s.src_record];
      const int32_t e = plan->dst.records[s.dst_record].rank;
      bool on_engine_gpu = false;
      for (const Record& r : plan->src.records) {
        on_engine_gpu = on_engine_gpu ||
                        (r.rank == e && r.tensor == from.tensor && Contains(r.box, s.box));
      }
      if (!on_engine_gpu) continue;
      ++replicated;
      EXPECT_EQ(from.rank, e) << name << ": engine rank " << e << " reads "
                              << plan->src.tensors[from.tensor].name << " from the other GPU";
    }
    EXPECT_GT(replicated, 145) << name;
  }
}

TEST(GpusCaseTest, UnknownCaseNamesTheFlag) {
  absl::StatusOr<GpusCase> c = GpusCaseNamed("tp4");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("--cases"), std::string::npos);
}

}  // namespace
}  // namespace refit::bench

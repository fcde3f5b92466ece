// Delta rounds into quantized engines over Gloo: BF16 trainers (Megatron
// tp=2, ep=2; FSDP over 3 ranks, whose uneven shards cut blocks) quantize
// every round into FP8 (128 x 128 tiles), MXFP8 (1 x 32
// blocks) and NVFP4 (1 x 16 blocks and global scales) engines, cut blocks'
// and global amaxes exchanged, and compare in the engine's format (codes
// and their scales); after every round of random changes every engine byte
// equals the reference copy's (which quantizes with the reference
// quantizer), the verified round's digests agree, and small changes move
// fewer bytes than dense.
#include <random>
#include <thread>

#include "exec/delta/delta_runner.h"
#include "exec/transport/gloo_transport.h"
#include "exec/transport/kv_store.h"
#include "gtest/gtest.h"
#include "mapping/mapping.h"
#include "plan/planner.h"
#include "testing/planned_case.h"
#include "testing/reference_copy.h"

namespace refit {
namespace {

struct Format {
  const char* model;
  const char* trainer;
  const char* engine;
};

constexpr char kMegatron[] = "megatron:tp=2,ep=2,etp=1";

class DeltaQuantizedTest : public ::testing::TestWithParam<Format> {};

TEST_P(DeltaQuantizedTest, RoundsOfRandomChangesLandEveryEngineByte) {
  testing::PlannedCase pc;
  const absl::Status planned =
      testing::PlanCase(GetParam().model, GetParam().trainer, GetParam().engine, &pc);
  ASSERT_TRUE(planned.ok()) << planned;
  auto& [model, src, dst, plan] = pc;
  ASSERT_FALSE(plan->conversions.empty());
  const int ws = plan->src.world_size, world = ws + plan->dst.world_size;
  OwnedBuffers s = AllocateBuffers(src->layout);
  OwnedBuffers d = AllocateBuffers(plan->dst, 0xEE);
  FillPattern(src->layout, s.ptrs, {-1, 1});
  std::vector<DeltaSnapshot> snaps(ws);
  DeltaPolicy policy(plan->dst.world_size);
  std::mt19937_64 rng(5);
  int64_t version = 0;
  for (double fraction : {1.0, 0.01, 0.05, 0.0, 0.3}) {
    // Changes to the mantissas' low 7 bits keep every value finite.
    std::bernoulli_distribution pick(fraction);
    for (auto& b : s.storage) {
      for (size_t i = 0; i < b.size(); i += 2) {
        if (pick(rng)) b[i] ^= static_cast<uint8_t>(1 + rng() % 127);
      }
    }
    const std::vector<EngineDeltaMode> modes = policy.Announce(true);
    InMemoryKvStore store;
    std::vector<std::unique_ptr<Transport>> transports(world);
    std::vector<std::unique_ptr<DeltaRunner>> runners(world);
    std::vector<absl::Status> status(world);
    std::vector<DeltaRoundStats> stats(world);
    std::vector<DigestSums> sums(world);
    std::vector<std::thread> threads;
    for (int g = 0; g < world; ++g) {
      threads.emplace_back([&, g] {
        GlooTransportOptions o;
        auto t = GlooTransport::Create(&store, g, world, o);
        if (!t.ok()) {
          status[g] = t.status();
          return;
        }
        transports[g] = std::move(*t);
        const bool is_src = g < ws;
        std::vector<char*> ptrs;
        for (uint8_t* p : (is_src ? s : d).ptrs) ptrs.push_back(reinterpret_cast<char*>(p));
        DeltaRunnerOptions opt;
        if (is_src) opt.snapshot = &snaps[g];
        auto r = DeltaRunner::Create(*plan, is_src ? Side::kTrainer : Side::kEngine,
                                     is_src ? g : g - ws, ptrs, transports[g].get(), opt);
        if (!r.ok()) {
          status[g] = r.status();
          return;
        }
        (*r)->Begin({version + 1, DeltaBases(modes), true});
        absl::StatusOr<RunStats> run = (*r)->Run(absl::Now() + absl::Seconds(60));
        status[g] = run.status();
        if (run.ok()) sums[g] = run->digests;
        stats[g] = (*r)->delta_stats();
        runners[g] = std::move(*r);
      });
    }
    for (auto& t : threads) t.join();
    DigestSums trainers, engines;
    for (int g = 0; g < world; ++g) {
      ASSERT_TRUE(status[g].ok()) << "fraction " << fraction << " rank " << g << ": " << status[g];
      AddDigests(sums[g], g < ws ? &trainers : &engines);
    }
    ASSERT_TRUE(CompareDigests(*plan, trainers, engines).ok()) << fraction;
    ++version;
    for (int g = 0; g < ws; ++g) runners[g]->Finish(RoundOutcome::kCommitted);
    policy.OnCommit(version);
    OwnedBuffers want = AllocateBuffers(plan->dst, 0xEE);
    ASSERT_TRUE(ReferenceCopy(*plan, s.ptrs, want.ptrs).ok());
    for (size_t b = 0; b < want.storage.size(); ++b) {
      ASSERT_EQ(want.storage[b], d.storage[b])
          << "fraction " << fraction << ": engine buffer " << plan->dst.buffers[b].name;
    }
    if (fraction == 0.01) {
      int64_t wire = 0, dense = 0;
      for (int g = 0; g < ws; ++g) {
        wire += stats[g].wire_bytes;
        dense += stats[g].dense_bytes;
      }
      EXPECT_LT(wire, dense / 2) << "1% of the BF16 words changed";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, DeltaQuantizedTest,
                         ::testing::Values(
                             Format{"tiny-qwen3-moe-b128", kMegatron, "vllm:tp=2,quant=fp8"},
                             Format{"tiny-qwen3-moe-b128", "fsdp:dp=3", "vllm:tp=2,quant=fp8"},
                             Format{"tiny-qwen3-moe-mx", kMegatron, "vllm:tp=2,quant=mxfp8"},
                             Format{"tiny-qwen3-moe-mx", "fsdp:dp=3", "vllm:tp=2,quant=mxfp8"},
                             Format{"tiny-qwen3-moe-fp4", kMegatron, "vllm:tp=2,quant=nvfp4"},
                             Format{"tiny-qwen3-moe-fp4", "fsdp:dp=3",
                                    "vllm:tp=2,quant=nvfp4"}));

}  // namespace
}  // namespace refit

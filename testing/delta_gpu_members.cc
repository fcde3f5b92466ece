// Delta and verified rounds of two GPU members: see delta_gpu_members.h.
#include "testing/delta_gpu_members.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "exec/transport/kv_store.h"
#include "gtest/gtest.h"
#include "mapping/mapping.h"
#include "plan/planner.h"
#include "testing/reference_copy.h"

namespace refit {
namespace testing {
namespace {

struct Side2 {
  std::vector<char*> dev;  // per buffer of the side (null: not this rank's)
  std::vector<int64_t> bytes;
};

Side2 Upload(const SideLayout& layout, const HostBuffers& host) {
  Side2 s;
  for (size_t b = 0; b < layout.buffers.size(); ++b) {
    char* p = nullptr;
    const int64_t n = layout.buffers[b].byte_size;
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p), n + 1), cudaSuccess);
    if (b < host.size()) {
      EXPECT_EQ(cudaMemcpy(p, host[b], n, cudaMemcpyHostToDevice), cudaSuccess);
    }
    s.dev.push_back(p);
    s.bytes.push_back(n);
  }
  return s;
}

}  // namespace

void RunGpuDeltaRounds(const GpuMembers& members, const std::string& model_name,
                       const std::string& engine_spec, int32_t lanes, int64_t budget) {
  SCOPED_TRACE(absl::StrCat(engine_spec, ", ", lanes, " lanes"));
  const absl::Time start = absl::Now();
  absl::StatusOr<ModelConfig> model = LoadModelConfig(model_name);
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<MappedSide> src = BuildTrainerLayout(*model, *ParseTrainerSpec("megatron:tp=1"));
  absl::StatusOr<MappedSide> dst = BuildEngineLayout(*model, *ParseEngineSpec(engine_spec));
  ASSERT_TRUE(src.ok() && dst.ok());
  // Small waves: many waves on every lane, several messages (some packed)
  // per wave.
  PlannerOptions po;
  po.num_lanes = lanes;
  po.choose_lanes = false;
  po.staging_budget_bytes = budget;
  po.max_wave_bytes = po.max_message_bytes = po.staging_budget_bytes / lanes / 4;
  absl::StatusOr<Plan> plan = BuildPlan(src->layout, dst->layout, po);
  ASSERT_TRUE(plan.ok()) << plan.status();
  OwnedBuffers s = AllocateBuffers(src->layout);
  FillPattern(src->layout, s.ptrs, {-1, 1});
  OwnedBuffers d = AllocateBuffers(plan->dst, 0xEE);
  const std::function<void(int32_t)>& use = members.use;
  use(0);
  Side2 ts = Upload(src->layout, s.ptrs);
  use(1);
  Side2 es = Upload(plan->dst, d.ptrs);
  std::vector<DataPlaneParts> all_parts = members.parts(plan->options.num_lanes);
  ASSERT_EQ(all_parts.size(), 2u);
  InMemoryKvStore store;
  std::unique_ptr<DeltaRunner> runners[2];
  DeltaSnapshot snapshot;
  {
    absl::Status st[2];
    std::vector<std::thread> threads;
    for (int g = 0; g < 2; ++g) {
      threads.emplace_back([&, g] {
        use(g);
        MemberSlice m;
        m.plan = &*plan;
        m.side = g == 0 ? Side::kTrainer : Side::kEngine;
        m.rank = 0;
        m.buffers = g == 0 ? ts.dev : es.dev;
        m.buffers.resize(g == 0 ? plan->src.buffers.size() : plan->dst.buffers.size(), nullptr);
        m.global_rank = g;
        m.global_world = 2;
        m.num_lanes = plan->options.num_lanes;
        DataPlaneParts parts = all_parts[g];
        parts.delta = true;
        if (g == 0) parts.delta_options.snapshot = &snapshot;
        auto r = MakeDeltaMemberRunner(m, parts, &store);
        st[g] = r.status();
        if (r.ok()) runners[g] = std::move(*r);
      });
    }
    for (auto& t : threads) t.join();
    ASSERT_TRUE(st[0].ok()) << st[0];
    ASSERT_TRUE(st[1].ok()) << st[1];
  }
  std::mt19937_64 rng(3);
  int64_t version = 0;
  // Runs one round; returns the digest comparison.
  auto round = [&](bool delta, DeltaRoundStats* engine_stats) -> absl::Status {
    std::vector<EngineDeltaMode> modes = {delta ? EngineDeltaMode{false, version}
                                                : EngineDeltaMode{}};
    absl::Status st[2];
    DigestSums sums[2];
    std::vector<std::thread> threads;
    for (int g = 0; g < 2; ++g) {
      threads.emplace_back([&, g] {
        use(g);
        runners[g]->Begin({version + 1, DeltaBases(modes), true});
        absl::StatusOr<RunStats> run = runners[g]->Run(absl::Now() + members.round_timeout);
        st[g] = run.status();
        if (run.ok()) sums[g] = run->digests;
      });
    }
    for (auto& t : threads) t.join();
    if (!st[0].ok()) return st[0];
    if (!st[1].ok()) return st[1];
    *engine_stats = runners[1]->delta_stats();
    absl::Status c = CompareDigests(*plan, sums[0], sums[1]);
    if (c.ok()) {
      ++version;
      runners[0]->Finish(RoundOutcome::kCommitted);
    } else {
      runners[0]->Finish(RoundOutcome::kAborted);
    }
    return c;
  };
  auto expect_bytes = [&](const char* when) {
    OwnedBuffers want = AllocateBuffers(plan->dst, 0xEE);
    ASSERT_TRUE(ReferenceCopy(*plan, s.ptrs, want.ptrs).ok());
    use(1);
    for (size_t b = 0; b < want.storage.size(); ++b) {
      std::vector<uint8_t> got(es.bytes[b]);
      ASSERT_EQ(cudaMemcpy(got.data(), es.dev[b], es.bytes[b], cudaMemcpyDeviceToHost),
                cudaSuccess);
      ASSERT_EQ(want.storage[b], got) << when << ": engine buffer " << plan->dst.buffers[b].name;
    }
  };
  DeltaRoundStats stats;
  absl::Status r1 = round(false, &stats);
  ASSERT_TRUE(r1.ok()) << r1;
  expect_bytes("dense round");
  EXPECT_EQ(stats.dense_messages, stats.messages);
  // 1% of the trainer's 2-byte words change (low mantissa bits: finite).
  std::bernoulli_distribution pick(0.01);
  for (auto& b : s.storage) {
    for (size_t i = 0; i < b.size(); i += 2) {
      if (pick(rng)) b[i] ^= static_cast<uint8_t>(1 + rng() % 127);
    }
  }
  use(0);
  for (size_t b = 0; b < s.storage.size(); ++b) {
    ASSERT_EQ(cudaMemcpy(ts.dev[b], s.storage[b].data(), s.storage[b].size(),
                         cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  absl::Status r2 = round(true, &stats);
  ASSERT_TRUE(r2.ok()) << r2;
  expect_bytes("delta round");
  EXPECT_LT(stats.dense_messages, stats.messages);
  EXPECT_LT(stats.wire_bytes, stats.dense_bytes / 5);
  // A byte flipped in the engine's memory: the next verified round fails
  // naming engine rank 0 and the tensor there.
  int32_t tensor = -1;
  int32_t buffer = -1;
  int64_t offset = 0;
  for (const Record& r : plan->dst.records) {
    if (r.buffer_step == 0 && es.bytes[r.buffer] > 0) {
      tensor = r.tensor;
      buffer = r.buffer;
      offset = r.byte_offset;
      break;
    }
  }
  ASSERT_GE(tensor, 0);
  use(1);
  uint8_t x = 0;
  ASSERT_EQ(cudaMemcpy(&x, es.dev[buffer] + offset, 1, cudaMemcpyDeviceToHost), cudaSuccess);
  x ^= 0x40;
  ASSERT_EQ(cudaMemcpy(es.dev[buffer] + offset, &x, 1, cudaMemcpyHostToDevice), cudaSuccess);
  absl::Status r3 = round(true, &stats);
  ASSERT_TRUE(absl::IsDataLoss(r3)) << r3;
  EXPECT_TRUE(absl::StrContains(r3.message(), "engine rank 0 tensor " + plan->dst.tensors[tensor].name))
      << r3;
  std::printf("%s, %d lanes: %zu messages in %zu waves; delta round %lld of %lld messages as deltas, wire %.4f of dense; "
              "3 rounds in %.1f s; flipped byte caught: %s\n",
              engine_spec.c_str(), plan->options.num_lanes, plan->messages.size(),
              plan->waves.size(),
              static_cast<long long>(stats.messages - stats.dense_messages),
              static_cast<long long>(stats.messages),
              static_cast<double>(stats.wire_bytes) / stats.dense_bytes,
              absl::ToDoubleSeconds(absl::Now() - start), std::string(r3.message()).c_str());
  // Each member's memory and runner go in its own thread (its device or
  // context current there).
  std::vector<std::thread> threads;
  for (int g = 0; g < 2; ++g) {
    threads.emplace_back([&, g] {
      use(g);
      runners[g].reset();
      for (char* p : (g == 0 ? ts : es).dev) cudaFree(p);
    });
  }
  for (auto& t : threads) t.join();
}

}  // namespace testing
}  // namespace refit

// Delta and verified rounds of GPU members over NCCL (2 GPUs: trainer on
// GPU 0, engine on GPU 1), built as a member builds them
// (MakeDeltaMemberRunner with the NCCL transport, the CUDA copier and the
// GPU wave ops), for BF16, FP8, MXFP8 and NVFP4 engines: a dense first round, then a
// delta round of 1% changed words, after each every engine byte equal to
// the host reference copy and the digests agreeing; then a byte flipped in
// the engine's GPU memory fails the next verified round's comparison,
// naming the engine rank and the tensor. SKIP (REFIT_GPU_SKIP) with fewer
// than 2 GPUs.
#include <cuda_runtime_api.h>

#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "exec/cuda/cuda_copier.h"
#include "exec/transport/cuda/nccl_transport.h"
#include "exec/delta/cuda/gpu_wave_ops.h"
#include "exec/transport/kv_store.h"
#include "exec/member_runner.h"
#include "gtest/gtest.h"
#include "mapping/mapping.h"
#include "plan/planner.h"
#include "testing/reference_copy.h"

namespace refit {
namespace {

bool TwoGpus() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n >= 2;
}

DataPlaneParts NcclParts(int device) {
  DataPlaneParts p;
  p.transport = [device](KvStore* store, int32_t rank, int32_t world,
                         int32_t lanes) -> absl::StatusOr<std::unique_ptr<Transport>> {
    NcclTransportOptions o;
    o.num_lanes = lanes;
    o.device = device;
    auto t = NcclTransport::Create(store, rank, world, o);
    if (!t.ok()) return t.status();
    return std::unique_ptr<Transport>(std::move(*t));
  };
  p.copier = [](Transport* t) { return MakeCudaCopier(static_cast<NcclTransport*>(t)); };
  p.delta_ops = [device](Transport* t) {
    GpuWaveOpsOptions o;
    o.device = device;
    return MakeGpuWaveOps(static_cast<NcclTransport*>(t), o);
  };
  return p;
}

struct Side2 {
  std::vector<char*> dev;  // per buffer of the side (null: not this rank's)
  std::vector<int64_t> bytes;
};

Side2 Upload(const SideLayout& layout, const HostBuffers& host, int device) {
  Side2 s;
  cudaSetDevice(device);
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

// `budget`: the plan's staging budget, whose lane rooms hold a batch's
// packed messages beside a message's quantized rows (the same plans run on
// the host in exec/delta:delta_quantize_test).
void RunDeltaRounds(const std::string& model_name, const std::string& engine_spec,
                    int32_t lanes = 2, int64_t budget = 1 << 20) {
  SCOPED_TRACE(absl::StrCat(engine_spec, ", ", lanes, " lanes"));
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
  Side2 ts = Upload(src->layout, s.ptrs, 0);
  Side2 es = Upload(plan->dst, d.ptrs, 1);
  InMemoryKvStore store;
  std::unique_ptr<DeltaRunner> runners[2];
  DeltaSnapshot snapshot;
  {
    absl::Status st[2];
    std::vector<std::thread> threads;
    for (int g = 0; g < 2; ++g) {
      threads.emplace_back([&, g] {
        cudaSetDevice(g);
        MemberSlice m;
        m.plan = &*plan;
        m.side = g == 0 ? Side::kTrainer : Side::kEngine;
        m.rank = 0;
        m.buffers = g == 0 ? ts.dev : es.dev;
        m.buffers.resize(g == 0 ? plan->src.buffers.size() : plan->dst.buffers.size(), nullptr);
        m.global_rank = g;
        m.global_world = 2;
        m.num_lanes = plan->options.num_lanes;
        DataPlaneParts parts = NcclParts(g);
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
        cudaSetDevice(g);
        runners[g]->Begin({version + 1, DeltaBases(modes), true});
        absl::StatusOr<RunStats> run = runners[g]->Run(absl::Now() + absl::Seconds(60));
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
    cudaSetDevice(1);
    for (size_t b = 0; b < want.storage.size(); ++b) {
      std::vector<uint8_t> got(es.bytes[b]);
      ASSERT_EQ(cudaMemcpy(got.data(), es.dev[b], es.bytes[b], cudaMemcpyDeviceToHost),
                cudaSuccess);
      ASSERT_EQ(want.storage[b], got) << when << ": engine buffer " << plan->dst.buffers[b].name;
    }
  };
  DeltaRoundStats stats;
  ASSERT_TRUE(round(false, &stats).ok());
  expect_bytes("dense round");
  EXPECT_EQ(stats.dense_messages, stats.messages);
  // 1% of the trainer's 2-byte words change (low mantissa bits: finite).
  std::bernoulli_distribution pick(0.01);
  for (auto& b : s.storage) {
    for (size_t i = 0; i < b.size(); i += 2) {
      if (pick(rng)) b[i] ^= static_cast<uint8_t>(1 + rng() % 127);
    }
  }
  cudaSetDevice(0);
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
  cudaSetDevice(1);
  uint8_t x = 0;
  ASSERT_EQ(cudaMemcpy(&x, es.dev[buffer] + offset, 1, cudaMemcpyDeviceToHost), cudaSuccess);
  x ^= 0x40;
  ASSERT_EQ(cudaMemcpy(es.dev[buffer] + offset, &x, 1, cudaMemcpyHostToDevice), cudaSuccess);
  absl::Status r3 = round(true, &stats);
  ASSERT_TRUE(absl::IsDataLoss(r3)) << r3;
  EXPECT_TRUE(absl::StrContains(r3.message(), "engine rank 0 tensor " + plan->dst.tensors[tensor].name))
      << r3;
  std::printf("%s, %d lanes: %zu messages in %zu waves; delta round %lld of %lld messages as deltas, wire %.4f of dense; "
              "flipped byte caught: %s\n",
              engine_spec.c_str(), plan->options.num_lanes, plan->messages.size(),
              plan->waves.size(),
              static_cast<long long>(stats.messages - stats.dense_messages),
              static_cast<long long>(stats.messages),
              static_cast<double>(stats.wire_bytes) / stats.dense_bytes,
              std::string(r3.message()).c_str());
  for (int g = 0; g < 2; ++g) runners[g].reset();
  for (char* p : ts.dev) cudaFree(p);
  for (char* p : es.dev) cudaFree(p);
}

TEST(DeltaNcclGpuTest, GpuMembersRunDeltaRoundsAndVerifiedRoundsCatchAFlippedByte) {
  if (!TwoGpus()) {
    std::printf("SKIP delta_nccl_gpu_test: needs 2 CUDA devices (REFIT_GPU_SKIP)\n");
    GTEST_SKIP() << "needs 2 CUDA devices";
  }
  RunDeltaRounds("tiny-qwen3-moe-b128", "vllm:tp=1");
  RunDeltaRounds("tiny-qwen3-moe-b128", "vllm:tp=1,quant=fp8", 2, 4 << 20);
  RunDeltaRounds("tiny-qwen3-moe-mx", "vllm:tp=1,quant=mxfp8");
  RunDeltaRounds("tiny-qwen3-moe-fp4", "vllm:tp=1,quant=nvfp4");
  // Four lanes (the planner's choice for plans of many staged pieces): each
  // lane connects before the round's kernels are in flight.
  RunDeltaRounds("tiny-qwen3-moe-b128", "vllm:tp=1", 4);
  // FP8 batches quantizing on every lane's stream.
  RunDeltaRounds("tiny-qwen3-moe-b128", "vllm:tp=1,quant=fp8", 4, 4 << 20);
}

}  // namespace
}  // namespace refit

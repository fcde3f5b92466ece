// Delta rounds into quantized engines (FP8, MXFP8, NVFP4) within the plan's
// staging budget: each batch quantizes the rows its messages read into its
// lane room, so a trainer rank holds no more than the budget even when its
// quantized model is larger; every round's engine bytes equal those a dense
// round (Executor) writes, over several rounds of small changes.
#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "exec/delta/delta_runner.h"
#include "exec/executor.h"
#include "exec/transport/inproc_transport.h"
#include "gtest/gtest.h"
#include "testing/counting_copier.h"
#include "testing/planned_case.h"
#include "testing/reference_copy.h"

namespace refit {
namespace {

// PlannerOptions' default staging budget.
const int64_t kDefaultBudget = PlannerOptions().staging_budget_bytes;

// How a case's plan sizes its waves and messages.
enum class Waves {
  kQuarter,       // at most a quarter of the lane share each
  kPlanner,       // the planner's defaults (filled to what it leaves)
  kPlannerDelta,  // the planner's for delta rounds (PlannerOptions::delta)
};

struct Case {
  const char* model;
  const char* trainer;
  const char* engine;
  int64_t budget;
  bool model_above_budget;  // a trainer rank's quantized model passes the budget
  int32_t lanes = 0;        // 0: the planner's
  Waves waves = Waves::kQuarter;
};

// The plan of `c` with `budget`; *trainer: the trainer's layout as
// registered (before its converted tensors were moved to scratch).
absl::StatusOr<Plan> PlanOf(const Case& c, int64_t budget, SideLayout* trainer = nullptr) {
  PlannerOptions o;
  o.staging_budget_bytes = budget;
  if (c.lanes > 0) {
    o.num_lanes = c.lanes;
    o.choose_lanes = false;
  }
  if (c.waves == Waves::kQuarter) o.max_wave_bytes = o.max_message_bytes = budget / o.num_lanes / 4;
  o.delta = c.waves == Waves::kPlannerDelta;
  testing::PlannedCase pc;
  if (absl::Status s = testing::PlanCase(c.model, c.trainer, c.engine, &pc, o); !s.ok()) return s;
  if (trainer != nullptr) *trainer = pc.src->layout;
  return *std::move(pc.plan);
}

// The side's buffers; none for the plan's scratch buffers (the runner's
// own memory holds the quantized values).
std::vector<char*> Pointers(const SideLayout& side, OwnedBuffers& b) {
  std::vector<char*> p;
  for (size_t i = 0; i < b.storage.size(); ++i) {
    p.push_back(side.buffers[i].scratch ? nullptr : reinterpret_cast<char*>(b.storage[i].data()));
  }
  return p;
}

// Runs a dense round of `plan` (Executor) from `trainer` into `engine`.
absl::Status DenseRound(const Plan& plan, OwnedBuffers& trainer, OwnedBuffers& engine) {
  const int ws = plan.src.world_size, world = ws + plan.dst.world_size;
  auto fabric = InProcFabric::Create(world, plan.options.num_lanes).value();
  std::vector<absl::Status> status(world);
  std::vector<std::thread> threads;
  for (int g = 0; g < world; ++g) {
    threads.emplace_back([&, g] {
      auto t = InProcTransport::Create(fabric, g).value();
      const bool src = g < ws;
      auto e = Executor::Create(plan, src ? Side::kTrainer : Side::kEngine, src ? g : g - ws,
                                Pointers(src ? plan.src : plan.dst, src ? trainer : engine),
                                t.get());
      status[g] = e.ok() ? (*e)->Run(absl::Now() + absl::Seconds(60)).status() : e.status();
    });
  }
  for (auto& t : threads) t.join();
  for (const absl::Status& s : status) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

// Conversion steps that count the elements they quantize (or cast).
class CountingConvertOps : public ConvertOps {
 public:
  CountingConvertOps(std::unique_ptr<ConvertOps> inner, std::atomic<int64_t>* elements)
      : inner_(std::move(inner)), elements_(elements) {}
  absl::StatusOr<const char*> Gather(const Record& r, const Box& part, DType dtype,
                                     absl::Span<char* const> buffers, char* into) override {
    return inner_->Gather(r, part, dtype, buffers, into);
  }
  absl::StatusOr<std::vector<float>> TileAmax(const char* dense, DType dtype, const Box& box,
                                              const std::vector<int64_t>& tile) override {
    return inner_->TileAmax(dense, dtype, box, tile);
  }
  absl::Status Quantize(const char* dense, DType dtype, const Box& box,
                        const std::vector<int64_t>& tile, const std::vector<float>& amax,
                        ScaleMode mode, char* out, char* scales) override {
    *elements_ += UncheckedNumElements(box);
    return inner_->Quantize(dense, dtype, box, tile, amax, mode, out, scales);
  }
  absl::Status QuantizeWhole(const char* dense, DType dtype, const Box& box,
                             const std::vector<int64_t>& tile, ScaleMode mode, char* out,
                             char* scales, absl::string_view what) override {
    *elements_ += UncheckedNumElements(box);
    return inner_->QuantizeWhole(dense, dtype, box, tile, mode, out, scales, what);
  }
  absl::StatusOr<Nvfp4Amaxes> Nvfp4Amax(const char* dense, DType dtype, const Box& box,
                                        bool blocks) override {
    return inner_->Nvfp4Amax(dense, dtype, box, blocks);
  }
  absl::Status Nvfp4GlobalAmax(const char* dense, DType dtype, const Box& box,
                               std::vector<float>* global, absl::string_view what) override {
    return inner_->Nvfp4GlobalAmax(dense, dtype, box, global, what);
  }
  absl::Status QuantizeNvfp4(const char* dense, DType dtype, const Box& box, Nvfp4Recipe recipe,
                             const std::vector<float>& block_amax,
                             const std::vector<float>& global_amax, char* out, char* scales,
                             char* global_scales) override {
    *elements_ += UncheckedNumElements(box);
    return inner_->QuantizeNvfp4(dense, dtype, box, recipe, block_amax, global_amax, out, scales,
                                 global_scales);
  }
  absl::Status StoreF32(absl::Span<const float> values, char* out) override {
    return inner_->StoreF32(values, out);
  }
  absl::Status Cast(const char* dense, DType dtype, int64_t n, bool neg_exp, char* out) override {
    *elements_ += n;
    return inner_->Cast(dense, dtype, n, neg_exp, out);
  }
  absl::Status Sync() override { return inner_->Sync(); }
  int64_t workspace_bytes() const override { return inner_->workspace_bytes(); }

 private:
  std::unique_ptr<ConvertOps> inner_;
  std::atomic<int64_t>* elements_;
};

// A counting copier whose conversion steps count what they quantize.
class QuantizeCountingCopier : public testing::CountingCopier {
 public:
  std::unique_ptr<ConvertOps> MakeConvertOps(int32_t lane) override {
    return std::make_unique<CountingConvertOps>(CountingCopier::MakeConvertOps(lane),
                                                &elements);
  }
  std::atomic<int64_t> elements{0};
};

// The host's wave ops, noting how many elements were quantized when the
// round's first count started.
class FirstCountOps : public ForwardingWaveOps {
 public:
  explicit FirstCountOps(const std::atomic<int64_t>* quantized)
      : ForwardingWaveOps(MakeHostWaveOps()), quantized_(quantized) {}
  int64_t at_first_count = -1;
  absl::Status StartCount(int32_t lane, absl::Span<const EncodeItem> items,
                          absl::Time deadline) override {
    if (at_first_count < 0) at_first_count = *quantized_;
    return ForwardingWaveOps::StartCount(lane, items, deadline);
  }

 private:
  const std::atomic<int64_t>* quantized_;
};

class DeltaQuantizeTest : public ::testing::TestWithParam<Case> {};

TEST_P(DeltaQuantizeTest, RoundsStayWithinTheBudgetAndLandTheDenseRoundsBytes) {
  const Case& c = GetParam();
  SideLayout registered;
  absl::StatusOr<Plan> planned = PlanOf(c, c.budget, &registered);
  ASSERT_TRUE(planned.ok()) << planned.status();
  const Plan& plan = *planned;
  ASSERT_FALSE(plan.conversions.empty());
  const int ws = plan.src.world_size, world = ws + plan.dst.world_size;
  if (c.model_above_budget) {
    int64_t scratch = 0;  // the largest rank's quantized values
    for (int r = 0; r < ws; ++r) {
      int64_t n = 0;
      for (const BufferSpec& b : plan.src.buffers) n += b.scratch && b.rank == r ? b.byte_size : 0;
      scratch = std::max(scratch, n);
    }
    ASSERT_GT(scratch, c.budget);
  }
  OwnedBuffers trainer = AllocateBuffers(plan.src, 0);
  OwnedBuffers engine = AllocateBuffers(plan.dst, 0xEE);
  OwnedBuffers dense = AllocateBuffers(plan.dst, 0xEE);
  FillPattern(registered, trainer.ptrs, {-1, 1});
  // One runner per rank for every round (snapshots and lane rooms kept).
  auto fabric = InProcFabric::Create(world, plan.options.num_lanes).value();
  std::vector<std::unique_ptr<Transport>> transports(world);
  std::vector<std::unique_ptr<testing::CountingCopier>> copiers(world);
  std::vector<std::unique_ptr<DeltaRunner>> runners(world);
  for (int g = 0; g < world; ++g) {
    transports[g] = InProcTransport::Create(fabric, g).value();
    copiers[g] = std::make_unique<testing::CountingCopier>();
    DeltaRunnerOptions o;
    o.copier = copiers[g].get();
    const bool src = g < ws;
    auto r = DeltaRunner::Create(plan, src ? Side::kTrainer : Side::kEngine, src ? g : g - ws,
                                 Pointers(src ? plan.src : plan.dst, src ? trainer : engine),
                                 transports[g].get(), o);
    ASSERT_TRUE(r.ok()) << "rank " << g << ": " << r.status();
    runners[g] = std::move(*r);
  }
  DeltaPolicy policy(plan.dst.world_size);
  std::mt19937_64 rng(11);
  int64_t version = 0;
  for (double fraction : {1.0, 0.01, 0.0, 0.05, 0.01}) {
    SCOPED_TRACE(::testing::Message() << "version " << version + 1 << ", fraction " << fraction);
    // Changes to the BF16 mantissas' low bits keep every value finite.
    std::bernoulli_distribution pick(fraction);
    for (auto& b : trainer.storage) {
      for (size_t i = 0; i < b.size(); i += 2) {
        if (pick(rng)) b[i] ^= static_cast<uint8_t>(1 + rng() % 127);
      }
    }
    const std::vector<EngineDeltaMode> modes = policy.Announce(true);
    std::vector<absl::StatusOr<RunStats>> runs(world, absl::UnknownError("not run"));
    std::vector<std::thread> threads;
    for (int g = 0; g < world; ++g) {
      threads.emplace_back([&, g] {
        runners[g]->Begin({version + 1, DeltaBases(modes), true});
        runs[g] = runners[g]->Run(absl::Now() + absl::Seconds(60));
      });
    }
    for (auto& t : threads) t.join();
    DigestSums trainers, engines;
    for (int g = 0; g < world; ++g) {
      ASSERT_TRUE(runs[g].ok()) << "rank " << g << ": " << runs[g].status();
      AddDigests(runs[g]->digests, g < ws ? &trainers : &engines);
    }
    ASSERT_TRUE(CompareDigests(plan, trainers, engines).ok());
    ++version;
    for (int g = 0; g < world; ++g) runners[g]->Finish(RoundOutcome::kCommitted);
    policy.OnCommit(version);
    ASSERT_TRUE(DenseRound(plan, trainer, dense).ok());
    for (size_t b = 0; b < dense.storage.size(); ++b) {
      ASSERT_EQ(dense.storage[b], engine.storage[b])
          << "engine buffer " << plan.dst.buffers[b].name;
    }
    int64_t wire = 0, bytes = 0;
    for (int g = 0; g < ws; ++g) {
      // What the trainer took from its copier, the committed round's
      // re-quantization included, and what it reports: within the budget.
      const DeltaRoundStats& st = runners[g]->delta_stats();
      EXPECT_LE(copiers[g]->peak_bytes(), c.budget) << "trainer rank " << g;
      EXPECT_LE(runs[g]->peak_staging_bytes, c.budget) << "trainer rank " << g;
      EXPECT_GE(runs[g]->peak_staging_bytes, copiers[g]->peak_bytes()) << "trainer rank " << g;
      // The amax pass gathers what does not lie dense in a lane room too:
      // no working memory beside the budget.
      EXPECT_EQ(st.convert_workspace_bytes, 0) << "trainer rank " << g;
      if (c.budget < kDefaultBudget) {
        EXPECT_GT(st.batches, 1) << "trainer rank " << g;
      }
      wire += st.wire_bytes;
      bytes += st.dense_bytes;
    }
    // (Waves filled to what the planner leaves have little room for
    // encodings: their messages may go dense.)
    if (version > 1 && fraction == 0.01 && c.waves != Waves::kPlanner) {
      EXPECT_LT(wire, bytes / 2) << "1% of the words changed";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Formats, DeltaQuantizeTest,
    ::testing::Values(
        Case{"tiny-qwen3-moe-b128", "fsdp:dp=3", "vllm:tp=2,quant=fp8", 512 << 10, true},
        Case{"tiny-qwen3-moe-b128", "megatron:tp=2,ep=2,etp=1", "vllm:tp=2,quant=fp8", 1 << 20,
             true},
        Case{"tiny-qwen3-moe-mx", "fsdp:dp=3", "vllm:tp=2,quant=mxfp8", 256 << 10, false},
        Case{"tiny-qwen3-moe-fp4", "fsdp:dp=3", "vllm:tp=2,quant=nvfp4", 128 << 10, false},
        // The plans of exec/delta/cuda:delta_nccl_gpu_test (NCCL, 2 GPUs).
        Case{"tiny-qwen3-moe-b128", "megatron:tp=1", "vllm:tp=1,quant=fp8", 4 << 20, false, 2},
        Case{"tiny-qwen3-moe-b128", "megatron:tp=1", "vllm:tp=1,quant=fp8", 4 << 20, false, 4},
        Case{"tiny-qwen3-moe-mx", "megatron:tp=1", "vllm:tp=1,quant=mxfp8", 1 << 20, false, 2},
        Case{"tiny-qwen3-moe-fp4", "megatron:tp=1", "vllm:tp=1,quant=nvfp4", 1 << 20, false, 2},
        // The planner's waves and messages (what it leaves of the lane
        // room for quantizing), small budgets and the default one.
        Case{"tiny-qwen3-moe-b128", "megatron:tp=1", "vllm:tp=1,quant=fp8", 1 << 20, false, 2,
             Waves::kPlanner},
        Case{"tiny-qwen3-moe-b128", "fsdp:dp=3", "vllm:tp=2,quant=fp8", 512 << 10, true, 2,
             Waves::kPlanner},
        Case{"tiny-qwen3-moe-mx", "fsdp:dp=3", "vllm:tp=2,quant=mxfp8", 256 << 10, false, 0,
             Waves::kPlanner},
        Case{"tiny-qwen3-moe-fp4", "fsdp:dp=3", "vllm:tp=2,quant=nvfp4", 128 << 10, false, 0,
             Waves::kPlanner},
        Case{"tiny-qwen3-moe-b128", "fsdp:dp=3", "vllm:tp=2,quant=fp8", 512 << 10, true, 0,
             Waves::kPlannerDelta},
        Case{"tiny-qwen3-moe-fp4", "fsdp:dp=3", "vllm:tp=2,quant=nvfp4", 128 << 10, false, 0,
             Waves::kPlannerDelta},
        Case{"tiny-qwen3-moe-mx", "fsdp:dp=3", "vllm:tp=2,quant=mxfp8", 64 << 10, false, 0,
             Waves::kPlanner},
        Case{"tiny-qwen3-moe-fp4", "fsdp:dp=3", "vllm:tp=2,quant=nvfp4", 64 << 10, false, 0,
             Waves::kPlanner},
        Case{"tiny-qwen3-moe-b128", "fsdp:dp=3", "vllm:tp=2,quant=fp8", kDefaultBudget, false,
             0, Waves::kPlanner},
        Case{"tiny-qwen3-moe-mx", "fsdp:dp=3", "vllm:tp=2,quant=mxfp8", kDefaultBudget, false,
             0, Waves::kPlanner},
        Case{"tiny-qwen3-moe-fp4", "fsdp:dp=3", "vllm:tp=2,quant=nvfp4", kDefaultBudget, false,
             0, Waves::kPlanner}));

// A budget whose lane room holds less than one batch's messages (those
// that read quantized values are packed) is refused at Create, naming the
// parameter and the flag (a plan built for 512 KiB, run with 16 KiB).
TEST(DeltaQuantizeBudgetTest, ABudgetTooSmallForABatchsQuantizedMessagesIsRefused) {
  const Case c{"tiny-qwen3-moe-b128", "fsdp:dp=3", "vllm:tp=2,quant=fp8", 512 << 10, true};
  absl::StatusOr<Plan> plan = PlanOf(c, c.budget);
  ASSERT_TRUE(plan.ok()) << plan.status();
  plan->options.staging_budget_bytes = 16 << 10;
  auto fabric =
      InProcFabric::Create(plan->src.world_size + plan->dst.world_size, plan->options.num_lanes)
          .value();
  OwnedBuffers trainer = AllocateBuffers(plan->src, 0);
  for (int r = 0; r < plan->src.world_size; ++r) {
    auto t = InProcTransport::Create(fabric, r).value();
    auto d = DeltaRunner::Create(*plan, Side::kTrainer, r, Pointers(plan->src, trainer), t.get());
    ASSERT_TRUE(absl::IsInvalidArgument(d.status())) << d.status();
    const std::string rank = absl::StrCat("trainer rank ", r);
    for (const char* word :
         {"staging_budget_bytes", "--staging_mib", "16384 bytes", "at least", rank.c_str()}) {
      EXPECT_TRUE(absl::StrContains(d.status().message(), word)) << word << ": " << d.status();
    }
  }
}

// Qwen3-8B's default plans (the planner's options, 512 MiB) into each
// quantized format: every trainer batch's packed messages and quantizing
// steps fit its lane room, so Create takes its lane rooms within the
// budget and nothing beside it. (Create reads no weight: the buffers are
// addresses only.)
TEST(DeltaQuantizeBudgetTest, RealModelsDefaultPlansQuantizeWithinTheBudget) {
  for (const char* engine :
       {"vllm:tp=1,quant=fp8", "vllm:tp=1,quant=mxfp8", "vllm:tp=1,quant=nvfp4"}) {
    SCOPED_TRACE(engine);
    testing::PlannedCase pc;
    ASSERT_TRUE(testing::PlanCase("qwen3-8b", "megatron:tp=1", engine, &pc).ok());
    const Plan& plan = *pc.plan;
    ASSERT_FALSE(plan.conversions.empty());
    std::vector<char*> buffers;
    uintptr_t at = uintptr_t{1} << 40;  // never dereferenced at Create
    for (const BufferSpec& b : plan.src.buffers) {
      buffers.push_back(b.scratch ? nullptr : reinterpret_cast<char*>(at));
      at += (static_cast<uintptr_t>(b.byte_size) + 4095) / 4096 * 4096;
    }
    auto fabric =
        InProcFabric::Create(plan.src.world_size + plan.dst.world_size, plan.options.num_lanes)
            .value();
    auto t = InProcTransport::Create(fabric, 0).value();
    testing::CountingCopier copier;
    DeltaRunnerOptions o;
    o.copier = &copier;
    auto d = DeltaRunner::Create(plan, Side::kTrainer, 0, buffers, t.get(), o);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_GT(copier.peak_bytes(), 0);
    EXPECT_LE(copier.peak_bytes(), plan.options.staging_budget_bytes);
  }
}

// A trainer's first count starts once its first batch's rows are
// quantized, long before the rank's whole model is.
TEST(DeltaQuantizeOrderTest, TheFirstCountWaitsForItsBatchOnly) {
  const Case c{"tiny-qwen3-moe-b128", "fsdp:dp=3", "vllm:tp=2,quant=fp8", 512 << 10, true};
  SideLayout registered;
  absl::StatusOr<Plan> planned = PlanOf(c, c.budget, &registered);
  ASSERT_TRUE(planned.ok()) << planned.status();
  const Plan& plan = *planned;
  const int ws = plan.src.world_size, world = ws + plan.dst.world_size;
  OwnedBuffers trainer = AllocateBuffers(plan.src, 0);
  OwnedBuffers engine = AllocateBuffers(plan.dst, 0xEE);
  FillPattern(registered, trainer.ptrs, {-1, 1});
  auto fabric = InProcFabric::Create(world, plan.options.num_lanes).value();
  std::vector<std::unique_ptr<Transport>> transports(world);
  std::vector<QuantizeCountingCopier> copiers(ws);
  std::vector<std::unique_ptr<FirstCountOps>> ops(ws);
  std::vector<absl::Status> status(world);
  std::vector<DeltaRoundStats> stats(world);
  for (int g = 0; g < world; ++g) transports[g] = InProcTransport::Create(fabric, g).value();
  std::vector<std::thread> threads;
  for (int g = 0; g < world; ++g) {
    threads.emplace_back([&, g] {
      const bool src = g < ws;
      DeltaRunnerOptions o;
      if (src) {
        ops[g] = std::make_unique<FirstCountOps>(&copiers[g].elements);
        o.copier = &copiers[g];
        o.ops = ops[g].get();
      }
      auto r = DeltaRunner::Create(plan, src ? Side::kTrainer : Side::kEngine, src ? g : g - ws,
                                   Pointers(src ? plan.src : plan.dst, src ? trainer : engine),
                                   transports[g].get(), o);
      if (!r.ok()) {
        status[g] = r.status();
        return;
      }
      (*r)->Begin({1, std::vector<int64_t>(plan.dst.world_size, -1), false});
      status[g] = (*r)->Run(absl::Now() + absl::Seconds(60)).status();
      stats[g] = (*r)->delta_stats();
    });
  }
  for (auto& t : threads) t.join();
  for (int g = 0; g < world; ++g) ASSERT_TRUE(status[g].ok()) << "rank " << g << ": " << status[g];
  for (int g = 0; g < ws; ++g) {
    EXPECT_GT(stats[g].batches, 2) << "trainer rank " << g;
    EXPECT_GT(ops[g]->at_first_count, 0) << "trainer rank " << g;
    EXPECT_LT(ops[g]->at_first_count * 2, copiers[g].elements.load())
        << "trainer rank " << g << ": quantized before its first count, of the round's";
  }
}

}  // namespace
}  // namespace refit

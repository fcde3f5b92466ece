// ConversionStage run in parts (the delta runner's way): the amaxes
// exchanged once, then the conversions' rows quantized a tile row at a
// time into memory of the caller's write the bytes Run writes into its
// whole-model scratch; scales alone where the codes are not asked for.
// Trainer ranks are threads exchanging through memory; FSDP's uneven
// shards cut tiles, Megatron's fused weights are gathered from strided rows
// (for the amax pass in bands of rows into the caller's memory).
#include "exec/convert/conversion_stage.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "testing/planned_case.h"
#include "testing/reference_copy.h"

namespace refit {
namespace {

// What each trainer rank sent each other rank, per exchange.
class Mailbox {
 public:
  ConversionStage::AmaxExchange For(int32_t rank, int* round) {
    return [this, rank, round](const std::map<int32_t, std::vector<float>>& sends)
               -> absl::StatusOr<std::map<int32_t, std::vector<float>>> {
      const int r = (*round)++;
      absl::MutexLock l(&mu_);
      for (const auto& [peer, v] : sends) box_[{r, rank, peer}] = v;
      std::map<int32_t, std::vector<float>> got;
      for (const auto& [peer, v] : sends) {
        auto there = [&] { return box_.count({r, peer, rank}) > 0; };
        if (!mu_.AwaitWithTimeout(absl::Condition(&there), absl::Seconds(30))) {
          return absl::DeadlineExceededError("no amaxes");
        }
        got[peer] = box_.at({r, peer, rank});
      }
      return got;
    };
  }

 private:
  absl::Mutex mu_;
  std::map<std::tuple<int, int32_t, int32_t>, std::vector<float>> box_ ABSL_GUARDED_BY(mu_);
};

ConversionStage::Memory HostMemory() {
  return {[](int64_t bytes) -> absl::StatusOr<char*> { return new char[bytes + 1]; },
          [](char* p, int64_t) { delete[] p; }};
}

struct Case {
  const char* model;
  const char* trainer;
  const char* engine;
};

class ConversionStageTest : public ::testing::TestWithParam<Case> {};

// The caller's memory for the amax pass's gathers: a few rows of the
// tiny models' weights.
constexpr int64_t kBandBytes = 4 << 10;

TEST_P(ConversionStageTest, RowsIntoCallerMemoryWriteTheBytesRunWrites) {
  testing::PlannedCase pc;
  ASSERT_TRUE(testing::PlanCase(GetParam().model, GetParam().trainer, GetParam().engine, &pc).ok());
  const Plan& plan = *pc.plan;
  ASSERT_FALSE(plan.conversions.empty());
  OwnedBuffers src = AllocateBuffers(plan.src, 0);
  FillPattern(pc.src->layout, src.ptrs, {-1, 1});  // the trainer's tensors as registered
  const int ws = plan.src.world_size;
  Mailbox mail;
  std::vector<std::string> failures(ws);
  std::vector<int> rounds(ws, 0);
  std::vector<int64_t> checked(ws, 0), nonzero(ws, 0);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < ws; ++rank) {
    threads.emplace_back([&, rank] {
      auto fail = [&](const std::string& what) { failures[rank] = what; };
      std::vector<char*> registered;
      for (size_t b = 0; b < plan.src.buffers.size(); ++b) {
        registered.push_back(plan.src.buffers[b].scratch
                                 ? nullptr
                                 : reinterpret_cast<char*>(src.storage[b].data()));
      }
      // Whole: Run into the stage's scratch.
      std::vector<char*> whole = registered;
      auto a = ConversionStage::Create(plan, rank, [] { return MakeHostConvertOps(); },
                                       HostMemory(), &whole);
      if (!a.ok() || *a == nullptr) return fail("Create");
      absl::Status run = (*a)->Run(whole, mail.For(rank, &rounds[rank]));
      if (!run.ok()) return fail(std::string(run.message()));
      // In parts: one exchange, then a tile row of one conversion at a time.
      auto b = ConversionStage::CreateUnplaced(plan, rank, [] { return MakeHostConvertOps(); },
                                               registered);
      if (!b.ok() || *b == nullptr) return fail("CreateUnplaced");
      ConversionStage& stage = **b;
      // The amax pass gathers what does not lie dense into memory of the
      // caller's, in bands of a few rows, and none of its own.
      std::vector<char> bands(kBandBytes);
      absl::Status ex = stage.ExchangeAmaxes(registered, mail.For(rank, &rounds[rank]),
                                             bands.data(), kBandBytes);
      if (!ex.ok()) return fail(std::string(ex.message()));
      if (stage.workspace_bytes() != 0) return fail("amax pass workspace");
      std::unique_ptr<ConvertOps> ops = MakeHostConvertOps();
      for (bool codes : {true, false}) {
        std::vector<std::vector<char>> mine(plan.src.buffers.size());
        std::vector<char*> parts = registered;
        for (int32_t k = 0; k < stage.size(); ++k) {
          const Conversion& c = stage.conversion(k);
          for (int32_t buf : {c.to_buffer, c.scale_buffer, c.global_buffer}) {
            if (buf < 0) continue;
            mine[buf].assign(plan.src.buffers[buf].byte_size, 0x5A);
            parts[buf] = mine[buf].data();
          }
          const Box& box = c.from.box;
          const int64_t step = stage.row_align(k);
          const int64_t first = box.rank() == 0 ? 0 : box.origin(0);
          const int64_t limit = box.rank() == 0 ? 1 : box.limit(0);
          for (int64_t r = first; r < limit; r = std::min(limit, (r / step + 1) * step)) {
            const int64_t end = std::min(limit, (r / step + 1) * step);
            const ConversionStage::Rows rows{k, r, box.rank() == 0 ? 0 : end, codes};
            std::vector<char> gather(stage.gather_bytes(rows) + 1);
            absl::Status s = stage.Convert(*ops, parts, {rows}, gather.data());
            if (!s.ok()) return fail(std::string(s.message()));
            if (box.rank() == 0) break;
          }
        }
        if (!ops->Sync().ok()) return fail("Sync");
        for (int32_t k = 0; k < stage.size(); ++k) {
          const Conversion& c = stage.conversion(k);
          const bool want_codes = codes || !stage.scales_alone(k);
          for (int32_t buf : {want_codes ? c.to_buffer : -1, c.scale_buffer, c.global_buffer}) {
            if (buf < 0) continue;
            if (std::memcmp(mine[buf].data(), whole[buf], mine[buf].size()) != 0) {
              return fail("buffer " + plan.src.buffers[buf].name +
                          (codes ? "" : " (scales alone)"));
            }
            ++checked[rank];
            nonzero[rank] += std::count_if(mine[buf].begin(), mine[buf].end(),
                                           [](char x) { return x != 0; });
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  int64_t total = 0, values = 0;
  for (int rank = 0; rank < ws; ++rank) {
    EXPECT_EQ(failures[rank], "") << "trainer rank " << rank;
    total += checked[rank];
    values += nonzero[rank];
  }
  EXPECT_GT(total, 0);
  EXPECT_GT(values, total);  // real codes and scales, not zeros
}

INSTANTIATE_TEST_SUITE_P(
    Formats, ConversionStageTest,
    ::testing::Values(Case{"tiny-qwen3-moe-b128", "fsdp:dp=3", "vllm:tp=2,quant=fp8"},
                      Case{"tiny-qwen3-moe-b128", "megatron:tp=2,ep=2,etp=1",
                           "vllm:tp=2,quant=fp8"},
                      Case{"tiny-qwen3-moe-mx", "fsdp:dp=3", "vllm:tp=2,quant=mxfp8"},
                      Case{"tiny-qwen3-moe-fp4", "fsdp:dp=3", "vllm:tp=2,quant=nvfp4"},
                      Case{"tiny-qwen3-moe-fp4", "megatron:tp=1", "vllm:tp=1,quant=nvfp4"}));

}  // namespace
}  // namespace refit

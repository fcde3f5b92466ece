// Fuzzing the model config, which refitd receives from members (a built-in
// name or a whole config.json text) and users give the CLI: the tiny
// configs of every family, with values replaced by edge numbers, wrong
// types or nothing.
//
// The property: parsing and mapping never crash, and every mutant that is
// accepted still makes a correct plan — each engine byte, for a Megatron and
// an FSDP trainer into vLLM and SGLang engines, holds the trainer's value
// after the reference copy (when the model is small enough to hold).
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "mapping/mapping.h"
#include "mapping/model_config.h"
#include "mapping/parallel_spec.h"
#include "nlohmann/json.hpp"
#include "plan/planner.h"
#include "testing/reference_copy.h"

namespace refit {
namespace {

using nlohmann::json;

constexpr int kMutantsPerModel = 150;
constexpr int64_t kMaxBytesToCopy = int64_t{16} << 20;

json Edge(std::mt19937_64& rng, const json& v) {
  const int64_t n = v.is_number_integer() ? v.get<int64_t>() : 4;
  switch (rng() % 16) {
    case 0: return 0;
    case 1: return -1;
    case 2: return 1;
    case 3: return n + 1;
    case 4: return n - 1;
    case 5: return n * 2;
    case 6: return n / 2;
    case 7: return 3;
    case 8: return std::numeric_limits<int32_t>::max();
    case 9: return std::numeric_limits<int64_t>::max();
    case 10: return 1.5;
    case 11: return "x";
    case 12: return nullptr;
    case 13: return true;
    case 14: return json::array();
    default: return static_cast<int64_t>(rng() % 64);
  }
}

// 1-2 edits: a value replaced, or a key removed.
std::string Mutate(std::mt19937_64& rng, json j) {
  const int edits = 1 + static_cast<int>(rng() % 2);
  for (int e = 0; e < edits; ++e) {
    std::vector<std::string> keys;
    for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
    if (keys.empty()) break;
    const std::string& k = keys[rng() % keys.size()];
    if (rng() % 6 == 0) {
      j.erase(k);
    } else if (j[k].is_array() && !j[k].empty() && rng() % 2) {
      j[k][rng() % j[k].size()] = Edge(rng, j[k][0]);
    } else {
      j[k] = Edge(rng, j[k]);
    }
  }
  return j.dump();
}

struct Counts {
  int rejected = 0, accepted = 0, planned = 0, copied = 0;
};

// Maps, plans and (if small) copies and checks one accepted config.
void CheckAccepted(const ModelConfig& model, const std::string& text, Counts* n) {
  const char* trainers[] = {"megatron:tp=2", "fsdp:dp=2"};
  const char* engines[] = {"vllm:tp=2", "sglang:tp=2"};
  for (const char* t : trainers) {
    absl::StatusOr<MappedSide> src = BuildTrainerLayout(model, *ParseTrainerSpec(t));
    if (!src.ok()) continue;  // e.g. heads not divisible by tp: an error, fine
    for (const char* e : engines) {
      absl::StatusOr<MappedSide> dst = BuildEngineLayout(model, *ParseEngineSpec(e));
      if (!dst.ok()) continue;
      absl::StatusOr<Plan> plan = BuildPlan(src->layout, dst->layout, PlannerOptions{});
      if (!plan.ok()) continue;
      ++n->planned;
      int64_t bytes = 0;
      for (const auto* side : {&plan->src, &plan->dst}) {
        for (const BufferSpec& b : side->buffers) bytes += b.byte_size;
      }
      if (bytes > kMaxBytesToCopy) continue;
      OwnedBuffers s = AllocateBuffers(plan->src);
      OwnedBuffers d = AllocateBuffers(plan->dst);
      // The trainer fills its registered layout; A_log is converted (f32 -exp).
      FillPattern(src->layout, s.ptrs, {-1, 7});
      absl::Status copied = ReferenceCopy(*plan, s.ptrs, d.ptrs);
      ASSERT_TRUE(copied.ok()) << t << " -> " << e << ": " << copied << "\n" << text;
      const std::map<std::string, DType> source = SourceDTypes(src->layout);
      PatternOptions po{-1, 7};
      po.source_dtypes = &source;
      absl::Status checked = CheckPattern(plan->dst, d.ptrs, po);
      ASSERT_TRUE(checked.ok()) << t << " -> " << e << ": " << checked << "\n" << text;
      ++n->copied;
    }
  }
}

TEST(ModelConfigFuzz, AcceptedConfigsPlanCorrectlyOthersAreErrors) {
  std::mt19937_64 rng(20261123);
  Counts n;
  for (const char* name : {"tiny-llama", "tiny-qwen3", "tiny-qwen3-moe",
                           "tiny-qwen3-moe-fp8", "tiny-deepseek-v3-fp8",
                           "tiny-nemotron-h"}) {
    const json base = json::parse(*BuiltinModelJson(name));
    for (int i = 0; i < kMutantsPerModel; ++i) {
      const std::string text = Mutate(rng, base);
      absl::StatusOr<ModelConfig> model = ParseModelConfig(text);
      if (!model.ok()) {
        ++n.rejected;
        EXPECT_TRUE(absl::IsInvalidArgument(model.status())) << model.status();
        continue;
      }
      ++n.accepted;
      CheckAccepted(*model, text, &n);
      if (testing::Test::HasFatalFailure()) return;
    }
  }
  std::printf("configs: %d accepted (%d plans, %d copied and checked), %d rejected\n",
              n.accepted, n.planned, n.copied, n.rejected);
  EXPECT_GT(n.copied, 100);
  EXPECT_GT(n.rejected, 100);
}

}  // namespace
}  // namespace refit

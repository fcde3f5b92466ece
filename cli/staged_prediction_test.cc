// Staged engines' pause: buffers staged on the device in order while they
// fit the budget (bytes or share), the rest in host overflow; the pause is
// the device copy plus the overflow over the host link.
#include "cli/staged_prediction.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace refit {
namespace {

// Engine rank 0 holds buffers of 100, 200 and 300 bytes, rank 1 one of 600.
Plan TwoRanks() {
  Plan p;
  p.dst.world_size = 2;
  for (auto [rank, bytes] : {std::pair{0, 100}, {0, 200}, {0, 300}, {1, 600}}) {
    BufferSpec b;
    b.rank = rank;
    b.name = "w" + std::to_string(p.dst.buffers.size());
    b.byte_size = bytes;
    p.dst.buffers.push_back(b);
  }
  return p;
}

TEST(StagedPrediction, BytesBudgetSplitsInBufferOrder) {
  LinkModel link;
  link.same_gpu_gbps = 1000;
  link.host_gbps = 10;
  EngineStaging st = ParseEngineStaging("350").value();
  StagedPrediction p = PredictStaged(TwoRanks(), link, st).value();
  ASSERT_EQ(p.ranks.size(), 2u);
  EXPECT_EQ(p.ranks[0].weight_bytes, 600);
  EXPECT_EQ(p.ranks[0].device_bytes, 300);  // 100 + 200; 300 more would pass 350
  EXPECT_EQ(p.ranks[0].overflow_bytes, 300);
  EXPECT_EQ(p.ranks[1].device_bytes, 0);
  EXPECT_EQ(p.ranks[1].overflow_bytes, 600);
  EXPECT_DOUBLE_EQ(p.ranks[0].pause_seconds, 300 / 1000e9 + 300 / 10e9);
  EXPECT_DOUBLE_EQ(p.ranks[1].pause_seconds, 600 / 10e9);
  EXPECT_EQ(p.slowest_rank, 1);
  const std::string text = FormatStagedText(p, link, st, 1.0);
  EXPECT_TRUE(absl::StrContains(
      text, "engine rank 0: 300 bytes staged on the device, 300 bytes in host overflow"))
      << text;
  EXPECT_TRUE(absl::StrContains(text, "longest 6e-05 ms (engine rank 1, 600 bytes in host overflow)")) << text;
  nlohmann::json j = nlohmann::json::parse(FormatStagedJson(p, link, st));
  EXPECT_EQ(j["ranks"][1]["overflow_bytes"], 600);
  EXPECT_DOUBLE_EQ(j["longest_pause_seconds"].get<double>(), 600 / 10e9);
}

TEST(StagedPrediction, ShareOfEachRanksBytes) {
  LinkModel link;
  StagedPrediction half = PredictStaged(TwoRanks(), link, ParseEngineStaging("50%").value()).value();
  EXPECT_EQ(half.ranks[0].device_bytes, 300);  // budget 300 of 600
  EXPECT_EQ(half.ranks[1].device_bytes, 0);    // budget 300, its one buffer is 600
  EXPECT_EQ(half.ranks[1].overflow_bytes, 600);
  StagedPrediction all = PredictStaged(TwoRanks(), link, ParseEngineStaging("1.0").value()).value();
  for (const StagedRank& r : all.ranks) {
    EXPECT_EQ(r.overflow_bytes, 0);
    EXPECT_EQ(r.device_bytes, r.weight_bytes);
    EXPECT_DOUBLE_EQ(r.pause_seconds, r.weight_bytes / (link.same_gpu_gbps * 1e9));
  }
  EXPECT_EQ(ParseEngineStaging("0.25").value().share, 0.25);
  EXPECT_EQ(ParseEngineStaging("2GiB").value().bytes, int64_t{2} << 30);
}

TEST(StagedPrediction, BadValuesNameTheFlag) {
  for (const char* bad : {"", "x", "1.5", "0.0", "-3", "0%", "120%", "5TiB"}) {
    absl::StatusOr<EngineStaging> s = ParseEngineStaging(bad);
    EXPECT_TRUE(absl::IsInvalidArgument(s.status())) << bad;
    EXPECT_TRUE(absl::StrContains(s.status().message(), "--engine_staging")) << bad;
  }
  LinkModel link;
  link.host_gbps = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(
      PredictStaged(TwoRanks(), link, EngineStaging{}).status()));
  Plan p = TwoRanks();
  p.dst.buffers[0].rank = 7;
  absl::Status st = PredictStaged(p, LinkModel{}, EngineStaging{}).status();
  EXPECT_TRUE(absl::StrContains(st.message(), "'w0' of rank 7")) << st;
}

}  // namespace
}  // namespace refit

#include "cli/status_command.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "cli/status_watch.h"

namespace refit {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

v1::StatusResponse Sample() {
  v1::StatusResponse r;
  r.set_protocol_version(1);
  r.set_epoch(3);
  r.set_plan_fingerprint("abc123");
  r.set_pull_pairs(6);
  r.set_network_pairs(2);
  r.add_refusals("engine e2 rank 1: layer model.layers.0.mlp.experts: FlashInfer TRTLLM");
  auto* m = r.add_members();
  m->set_member_id("engine/e0/0");
  m->mutable_identity()->set_side(v1::SIDE_ENGINE);
  m->mutable_identity()->set_engine_id("e0");
  m->mutable_identity()->set_world_size(1);
  m->mutable_identity()->set_device("cuda:0");
  m->mutable_identity()->set_device_uuid("GPU-0000aaaa");
  m->mutable_identity()->set_transport(v1::TRANSPORT_PULL);
  auto* e0 = r.add_engines();
  e0->set_engine_id("e0");
  e0->set_committed_version(4);
  e0->set_torn_version(5);
  e0->set_verified_version(3);
  auto* e1 = r.add_engines();
  e1->set_engine_id("e1");
  for (int v = 1; v <= 5; ++v) {
    auto* s = r.add_rounds();
    s->set_version(v);
    s->set_outcome(v == 5 ? "aborted" : "committed");
    if (v == 5) s->set_reason("member trainer rank 1: its stream dropped");
    if (v == 4) {
      s->set_peak_staging_bytes(16128);
      s->set_peak_staging_member("engine/e0/0");
      s->set_bytes(2384199680);
      s->set_seconds(0.494);
      s->set_bytes_per_second(2384199680 / 0.494);
      s->set_engine_ranks(2);
      s->set_engine_bytes(2 * int64_t{2384199680});
    }
  }
  return r;
}

TEST(StatusCommandTest, TextNamesTornEnginesAndTheProtocol) {
  const std::string text = FormatStatusText(Sample(), 2);
  EXPECT_THAT(text, HasSubstr("refit protocol: 1\n"));
  EXPECT_THAT(text, HasSubstr("engine/e0/0  engine job="));
  EXPECT_THAT(text, Not(HasSubstr("SIDE_")));
  EXPECT_THAT(text, HasSubstr("device=cuda:0 transport=pull"));
  EXPECT_THAT(text, HasSubstr("; version 3 verified\n"));
  EXPECT_THAT(text, HasSubstr("engine e0: version 4 committed; TORN by aborted round 5"));
  EXPECT_THAT(text, HasSubstr("engine e1: no version committed\n"));
  EXPECT_THAT(text, HasSubstr("refused to join: engine e2 rank 1: layer model.layers.0"));
  EXPECT_THAT(text, HasSubstr("rounds (last 2 of 5)"));
  EXPECT_THAT(text, HasSubstr("pairs (trainer, engine): 6 on the pull path (same host), 2 on "
                              "the network transport"));
  EXPECT_THAT(text, HasSubstr("its stream dropped"));
  EXPECT_THAT(text, HasSubstr("peak staging\n"));
  // Bytes for people, the same bytes and GB/s refitd defines.
  EXPECT_THAT(text, HasSubstr("bytes: what one engine rank received"));
  EXPECT_THAT(text, HasSubstr("       4  committed     2.38 GB      0.494         4.83"
                              "    16128 bytes  (engine/e0/0)\n"));
  EXPECT_THAT(text, Not(HasSubstr("       3  committed")));
}

TEST(StatusCommandTest, JsonCarriesTheSameFields) {
  v1::StatusResponse sample = Sample();
  v1::MemberBytes* live = sample.mutable_rounds(sample.rounds_size() - 1)->add_live();
  live->set_member_id("trainer/t/0");
  live->set_bytes(300);
  live->set_planned_bytes(1200);
  nlohmann::json j = nlohmann::json::parse(FormatStatusJson(sample, 10));
  ASSERT_EQ(j["rounds"][4]["live"].size(), 1u);
  EXPECT_EQ(j["rounds"][4]["live"][0]["member_id"], "trainer/t/0");
  EXPECT_EQ(j["rounds"][4]["live"][0]["bytes"], 300);
  EXPECT_EQ(j["rounds"][4]["live"][0]["planned_bytes"], 1200);
  EXPECT_EQ(j["rounds"][4]["live"][0]["engine"], false);
  EXPECT_EQ(j["protocol_version"], 1);
  EXPECT_EQ(j["members"][0]["side"], "engine");
  EXPECT_EQ(j["members"][0]["transport"], "pull");
  EXPECT_EQ(j["members"][0]["device_uuid"], "GPU-0000aaaa");
  EXPECT_EQ(j["pairs"]["pull"], 6);
  EXPECT_EQ(j["pairs"]["network"], 2);
  ASSERT_EQ(j["refusals"].size(), 1u);
  EXPECT_EQ(j["refusals"][0], "engine e2 rank 1: layer model.layers.0.mlp.experts: FlashInfer TRTLLM");
  ASSERT_EQ(j["engines"].size(), 2u);
  EXPECT_EQ(j["engines"][0]["engine_id"], "e0");
  EXPECT_EQ(j["engines"][0]["committed_version"], 4);
  EXPECT_EQ(j["engines"][0]["torn_version"], 5);
  EXPECT_EQ(j["engines"][0]["verified_version"], 3);
  EXPECT_EQ(j["engines"][1]["torn_version"], 0);
  EXPECT_EQ(j["rounds"].size(), 5u);
  EXPECT_EQ(j["rounds"][3]["peak_staging_bytes"], 16128);
  EXPECT_EQ(j["rounds"][3]["peak_staging_member"], "engine/e0/0");
  EXPECT_EQ(j["rounds"][3]["bytes"], 2384199680);
  EXPECT_EQ(j["rounds"][3]["engine_ranks"], 2);
  EXPECT_NEAR(j["rounds"][3]["bytes_per_second"].get<double>(), 4.826e9, 1e6);
}

v1::RoundSummary* Round(v1::StatusResponse& r, int64_t v, const std::string& outcome) {
  v1::RoundSummary* s = r.add_rounds();
  s->set_version(v);
  s->set_outcome(outcome);
  return s;
}

TEST(StatusWatchTest, AFrameGivesEveryMembersBytesWaitingOnesTooAligned) {
  v1::StatusResponse r;
  r.set_plan_fingerprint("abc");
  Round(r, 1, "committed");
  v1::RoundSummary* running = Round(r, 2, "running");
  running->add_reported("trainer/job/0");
  running->add_waiting("engine/job/A/0");
  running->set_bytes(1000);
  running->set_engine_ranks(1);
  v1::MemberReport* report = running->add_reports();
  report->set_member_id("trainer/job/0");
  report->set_bytes(1000);
  report->set_seconds(0.25);
  report->set_peak_staging_bytes(4096);
  const std::string f = FormatWatchFrame(r, "h:1");
  EXPECT_THAT(f, ::testing::HasSubstr(
                     "round 2 running: 1 of 2 members reported, 1000 bytes per engine "
                     "rank so far\n"));
  EXPECT_THAT(f, ::testing::HasSubstr(
                     "  reported  trainer/job/0   1000 bytes in 0.250 s, peak staging "
                     "4096 bytes\n"));
  EXPECT_THAT(f, ::testing::HasSubstr("refitd h:1: 0 members, plan abc\n"));
  r.add_members();
  EXPECT_THAT(FormatWatchFrame(r, "h:1"), ::testing::HasSubstr("refitd h:1: 1 member, plan"));
  EXPECT_THAT(f, ::testing::HasSubstr("  moving    engine/job/A/0  0 bytes so far\n"));
  // With the member's heartbeat figure: its bytes so far of its plan's.
  v1::MemberBytes* live = r.mutable_rounds(1)->add_live();
  live->set_member_id("engine/job/A/0");
  live->set_bytes(250);
  live->set_planned_bytes(1000);
  EXPECT_THAT(FormatWatchFrame(r, "h:1"),
              ::testing::HasSubstr("  moving    engine/job/A/0  250 bytes of 1000 bytes (25%)\n"));
  EXPECT_EQ(FinishedRoundAfter(r, 1), nullptr);
  EXPECT_EQ(FinishedRoundAfter(r, 0)->version(), 1);
}

TEST(StatusWatchTest, FollowsTheRoundUntilItEnds) {
  // Polls see: round 1 finished (before the watch), round 2 running with
  // nobody reported, then one reported, then round 2 aborted.
  std::vector<v1::StatusResponse> polls(4);
  for (auto& p : polls) Round(p, 1, "committed");
  Round(polls[1], 2, "running")->add_waiting("e");
  v1::RoundSummary* two = Round(polls[2], 2, "running");
  two->add_reported("e");
  v1::RoundSummary* end = Round(polls[3], 2, "aborted");
  end->set_reason("member e failed: NCCL timeout");
  size_t next = 0;
  std::vector<std::string> shown;
  absl::StatusOr<v1::RoundSummary> got = WatchRounds(
      [&](absl::Time) -> absl::StatusOr<v1::StatusResponse> {
        return polls[std::min(next++, polls.size() - 1)];
      },
      [&](const std::string& f) { shown.push_back(f); }, "h:1", absl::Milliseconds(1),
      absl::Now() + absl::Seconds(10), false);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->version(), 2);
  ASSERT_EQ(shown.size(), 4u);
  EXPECT_THAT(shown[0], ::testing::HasSubstr("no round in flight"));
  EXPECT_THAT(shown[1], ::testing::HasSubstr("0 of 1 member reported"));
  EXPECT_THAT(shown[2], ::testing::HasSubstr("1 of 1 member reported"));
  EXPECT_THAT(shown[3], ::testing::HasSubstr("round 2 aborted after 0.000 s: member e failed"));
}

TEST(StatusWatchTest, FollowKeepsWatchingRoundAfterRound) {
  // Polls see round 1 running, then committed, round 2 running, then
  // committed, then nothing new until the deadline.
  std::vector<v1::StatusResponse> polls(5);
  Round(polls[0], 1, "running")->add_waiting("e");
  Round(polls[1], 1, "committed");
  Round(polls[2], 1, "committed");
  Round(polls[2], 2, "running")->add_waiting("e");
  for (size_t i = 3; i < polls.size(); ++i) {
    Round(polls[i], 1, "committed");
    Round(polls[i], 2, "committed");
  }
  size_t next = 0;
  std::vector<std::string> shown;
  const absl::Time t0 = absl::Now();
  absl::StatusOr<int> ended = FollowRounds(
      [&](absl::Time) -> absl::StatusOr<v1::StatusResponse> {
        return polls[std::min(next++, polls.size() - 1)];
      },
      [&](const std::string& f) { shown.push_back(f); }, "h:1", absl::Milliseconds(5),
      absl::Now() + absl::Milliseconds(300), false);
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_EQ(*ended, 2);
  EXPECT_GE(absl::Now() - t0, absl::Milliseconds(250));  // watched until the deadline
  int finals = 0;
  for (const std::string& f : shown) finals += f.rfind("round ", 0) == 0 ? 1 : 0;
  EXPECT_EQ(finals, 2);
  // refitd gone: the error, not a silent end.
  absl::StatusOr<int> gone = FollowRounds(
      [&](absl::Time) -> absl::StatusOr<v1::StatusResponse> {
        return absl::UnavailableError("refitd at h:1: connection refused");
      },
      [](const std::string&) {}, "h:1", absl::Milliseconds(5),
      absl::Now() + absl::Seconds(5), false);
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kUnavailable);
}

TEST(StatusWatchTest, GivesUpAtTheDeadline) {
  v1::StatusResponse idle;
  absl::StatusOr<v1::RoundSummary> got = WatchRounds(
      [&](absl::Time) -> absl::StatusOr<v1::StatusResponse> { return idle; },
      [](const std::string&) {}, "h:1", absl::Milliseconds(5),
      absl::Now() + absl::Milliseconds(50), false);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace refit

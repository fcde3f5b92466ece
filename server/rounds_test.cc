// Rounds: starting, reports, commit and abort, torn engines, history.
#include "server/rounds.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace refit {
namespace {

const absl::Time t0 = absl::UnixEpoch() + absl::Hours(1);

std::string EngineOf(const std::string& id) {
  return id.rfind("engine/", 0) == 0 ? id.substr(7, 1) : "";
}

TEST(RoundsTest, LiveBytesRiseWithinThePlanAndOnlyForTheRunningRound) {
  Rounds r(8);
  r.Start(3, {"trainer/0", "engine/A"}, t0);
  EXPECT_TRUE(r.RecordLive("trainer/0", 3, 0, 400, 1000).ok());
  EXPECT_EQ(r.active()->live.at("trainer/0"), 400);
  // An older figure (a heartbeat that crossed a newer one) never lowers it.
  EXPECT_TRUE(r.RecordLive("trainer/0", 3, 1, 100, 1000).ok());
  EXPECT_EQ(r.active()->live.at("trainer/0"), 400);
  // More than the plan slice moves, or negative: refused, figure unchanged.
  const absl::Status over = r.RecordLive("trainer/0", 3, 0, 1001, 1000);
  EXPECT_EQ(over.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(over.message().find("round_bytes: 1001"), std::string::npos) << over;
  EXPECT_EQ(r.RecordLive("trainer/0", 3, 0, -1, 1000).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.active()->live.at("trainer/0"), 400);
  // Another round, another attempt, a stranger: ignored.
  EXPECT_TRUE(r.RecordLive("trainer/0", 2, 0, 500, 1000).ok());
  EXPECT_TRUE(r.RecordLive("trainer/0", 3, 2, 500, 1000).ok());
  EXPECT_TRUE(r.RecordLive("engine/B", 3, 0, 500, 1000).ok());
  EXPECT_EQ(r.active()->live.at("trainer/0"), 400);
  EXPECT_EQ(r.active()->live.count("engine/B"), 0u);
}

TEST(RoundsTest, StartChecksVersionsAndRetries) {
  Rounds r(64);
  EXPECT_EQ(*r.CheckStart(1), false);
  EXPECT_EQ(r.CheckStart(0).status().code(), absl::StatusCode::kInvalidArgument);
  r.Start(1, {"trainer/0", "engine/A"}, t0);
  EXPECT_EQ(*r.CheckStart(1), true);  // retry of the running round
  EXPECT_EQ(r.CheckStart(2).status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(r.End(true, "", t0, 3, EngineOf).has_value());
  EXPECT_EQ(*r.CheckStart(1), true);  // retry of the last round
  EXPECT_EQ(*r.CheckStart(2), false);
}

TEST(RoundsTest, TheNextVersionIsOneAboveTheLastStarted) {
  Rounds r(64);
  EXPECT_EQ(r.NextVersion(), 1);
  r.Start(7, {"trainer/0"}, t0);
  EXPECT_EQ(r.NextVersion(), 8);
  ASSERT_TRUE(r.End(false, "aborted", t0, 3, EngineOf).has_value());
  EXPECT_EQ(r.NextVersion(), 8);  // new weights after an abort: a new version
  EXPECT_EQ(*r.CheckStart(r.NextVersion()), false);
}

v1::MemberReport Report(const std::string& id, int64_t bytes, double seconds,
                        int64_t peak_staging) {
  v1::MemberReport m;
  m.set_member_id(id);
  m.set_bytes(bytes);
  m.set_seconds(seconds);
  m.set_peak_staging_bytes(peak_staging);
  return m;
}

TEST(RoundsTest, RefusesVersionsOutsideOneToTwoPow53NamingTheField) {
  Rounds r(64);
  for (int64_t v : {int64_t{0}, int64_t{-1}, kMaxRoundVersion + 1,
                    std::numeric_limits<int64_t>::max()}) {
    absl::StatusOr<bool> s = r.CheckStart(v);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << v;
    EXPECT_NE(s.status().message().find("version: "), absl::string_view::npos) << v;
  }
  EXPECT_EQ(*r.CheckStart(kMaxRoundVersion), false);
}

TEST(RoundsTest, RefusesAbsurdFiguresNamingTheField) {
  Rounds r(64);
  r.Start(1, {"trainer/0", "engine/A", "engine/B"}, t0);
  auto field_of = [&](const v1::MemberReport& m) {
    absl::Status s = r.CheckReport(m);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    const std::string msg(s.message());
    return msg.substr(0, msg.find(':'));
  };
  EXPECT_EQ(field_of(Report("trainer/0", -2, 1, 0)), "bytes");
  EXPECT_EQ(field_of(Report("trainer/0", 1, 1, -1)), "peak_staging_bytes");
  EXPECT_EQ(field_of(Report("trainer/0", 1, std::nan(""), 0)), "seconds");
  EXPECT_EQ(field_of(Report("trainer/0", 1, -0.5, 0)), "seconds");
  EXPECT_EQ(field_of(Report("trainer/0", 1, HUGE_VAL, 0)), "seconds");
  const int64_t max = std::numeric_limits<int64_t>::max();
  // The round adds up what its engine ranks received.
  ASSERT_TRUE(r.CheckReport(Report("engine/B", max, 1, 0)).ok());
  EXPECT_FALSE(r.RecordDone(Report("engine/B", max, 1, 0), true));
  EXPECT_EQ(field_of(Report("engine/A", 1, 1, 0)), "bytes");  // the sum overflows
  EXPECT_TRUE(r.CheckReport(Report("engine/A", 0, 1, 0)).ok());
}

TEST(RoundsTest, CommitsWhenEveryParticipantIsDone) {
  Rounds r(64);
  r.Start(5, {"trainer/0", "engine/A"}, t0);
  EXPECT_TRUE(r.IsParticipant("engine/A"));
  EXPECT_FALSE(r.IsParticipant("engine/B"));
  EXPECT_EQ(r.ReplyToFinished(5), std::nullopt);
  EXPECT_FALSE(r.RecordDone(Report("trainer/0", 100, 2.0, 4096), false));
  EXPECT_FALSE(r.RecordDone(Report("trainer/0", 100, 2.0, 1 << 20), false));  // counted once
  ASSERT_EQ(r.active()->reports.size(), 1u);
  EXPECT_EQ(r.active()->reports.at("trainer/0").peak_staging_bytes(), 4096);
  EXPECT_TRUE(r.RecordDone(Report("engine/A", 100, 1.0, 0), true));
  std::optional<v1::RoundEvent> e = r.End(true, "", t0 + absl::Seconds(3), 7, EngineOf);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->kind(), v1::RoundEvent::ROUND_COMMITTED);
  EXPECT_EQ(e->version(), 5);
  EXPECT_EQ(e->epoch(), 7);
  EXPECT_EQ(r.active(), nullptr);
  EXPECT_EQ(r.CommittedVersion("A"), 5);
  ASSERT_EQ(r.history().size(), 1u);
  // What the engine rank received (not the trainer's sends added), over
  // the slowest member's time.
  EXPECT_EQ(r.history()[0].bytes(), 100);
  EXPECT_EQ(r.history()[0].engine_ranks(), 1);
  EXPECT_DOUBLE_EQ(r.history()[0].seconds(), 2.0);
  EXPECT_DOUBLE_EQ(r.history()[0].bytes_per_second(), 50);
  EXPECT_EQ(r.LastCommitTime("A"), t0 + absl::Seconds(3));
  EXPECT_EQ(r.LastCommitTime("B"), absl::InfinitePast());
  EXPECT_DOUBLE_EQ(r.history()[0].duration_seconds(), 3.0);
  EXPECT_EQ(r.history()[0].peak_staging_bytes(), 4096);
  EXPECT_EQ(r.history()[0].peak_staging_member(), "trainer/0");
  EXPECT_TRUE(r.ReplyToFinished(5)->ok());
  EXPECT_EQ(r.ReplyToFinished(6)->code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(r.End(true, "", t0, 7, EngineOf).has_value());  // none running
}

TEST(RoundsTest, AbortLeavesEnginesTornUntilACommit) {
  Rounds r(64);
  r.Start(1, {"trainer/0", "engine/A"}, t0);
  r.End(true, "", t0, 1, EngineOf);
  r.Start(2, {"trainer/0", "engine/A"}, t0);
  std::optional<v1::RoundEvent> e = r.End(false, "engine A failed", t0, 1, EngineOf);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->kind(), v1::RoundEvent::ROUND_ABORTED);
  EXPECT_EQ(e->reason(), "engine A failed");
  EXPECT_EQ(r.CommittedVersion("A"), 1);
  EXPECT_EQ(r.TornVersion("A"), 2);
  absl::Status late = *r.ReplyToFinished(2);
  EXPECT_EQ(late.code(), absl::StatusCode::kAborted);
  EXPECT_NE(late.message().find("engine A failed"), absl::string_view::npos);
  r.Start(3, {"trainer/0", "engine/A"}, t0);
  r.End(true, "", t0, 1, EngineOf);
  EXPECT_EQ(r.CommittedVersion("A"), 3);
  EXPECT_EQ(r.TornVersion("A"), 0);
}

TEST(RoundsTest, StagedEnginesAreTornOnlyOnceTheyBeganWritingLiveBuffers) {
  Rounds r(64);
  // Round 1 commits after both staged engines applied; the longest pause
  // is the round's.
  r.Start(1, {"trainer/0", "engine/A", "engine/B"}, t0);
  r.MarkStaged({"engine/A", "engine/B"});
  EXPECT_EQ(r.RecordApplied("engine/A", 0.1).status().code(),
            absl::StatusCode::kFailedPrecondition);  // not applying yet
  for (const char* id : {"trainer/0", "engine/A", "engine/B"}) {
    r.RecordDone(Report(id, 10, 1, 0), id[0] == 'e');
  }
  r.BeginApply();
  EXPECT_EQ(r.RecordApplied("trainer/0", 0.1).status().code(),
            absl::StatusCode::kFailedPrecondition);  // not staged
  EXPECT_EQ(r.RecordApplied("engine/A", -1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*r.RecordApplied("engine/A", 0.25), false);
  EXPECT_EQ(*r.RecordApplied("engine/B", 0.5), true);
  ASSERT_TRUE(r.End(true, "", t0, 1, EngineOf).has_value());
  EXPECT_DOUBLE_EQ(r.history().back().pause_seconds(), 0.5);
  EXPECT_EQ(r.history().back().pause_member(), "engine/B");
  // Round 2 aborts while applying: A began writing (torn), B had not.
  r.Start(2, {"trainer/0", "engine/A", "engine/B"}, t0);
  r.MarkStaged({"engine/A", "engine/B"});
  r.BeginApply();
  ASSERT_TRUE(r.RecordWriting("engine/A").ok());
  ASSERT_TRUE(r.End(false, "injected", t0, 1, EngineOf).has_value());
  EXPECT_EQ(r.TornVersion("A"), 2);
  EXPECT_EQ(r.TornVersion("B"), 0);
  EXPECT_EQ(r.CommittedVersion("B"), 1);
}

TEST(RoundsTest, AVersionStartedAgainAfterItsAbortRunsAsTheNextAttempt) {
  Rounds r(64);
  EXPECT_EQ(r.Start(1, {"trainer/0", "engine/A"}, t0), 1);
  ASSERT_TRUE(r.End(false, "engine A failed", t0, 1, EngineOf).has_value());
  EXPECT_EQ(r.TornVersion("A"), 1);
  EXPECT_EQ(*r.CheckStart(1), false);  // aborted: it may run again
  EXPECT_EQ(r.Start(1, {"trainer/0", "engine/A"}, t0), 2);
  EXPECT_EQ(r.active()->attempt, 2);
  EXPECT_EQ(*r.CheckStart(1), true);  // running: an idempotent retry
  // A late report of attempt 1 is not counted for attempt 2.
  EXPECT_EQ(r.ReplyToFinished(1, 1)->code(), absl::StatusCode::kAborted);
  EXPECT_EQ(r.ReplyToFinished(1, 2), std::nullopt);
  EXPECT_EQ(r.ReplyToFinished(1), std::nullopt);
  std::optional<v1::RoundEvent> e = r.End(true, "", t0, 1, EngineOf);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->attempt(), 2);
  EXPECT_EQ(r.CommittedVersion("A"), 1);
  EXPECT_EQ(r.TornVersion("A"), 0);  // made whole by the retry
  EXPECT_EQ(*r.CheckStart(1), true);  // committed: a retry is a no-op
  EXPECT_EQ(r.Start(2, {"trainer/0"}, t0), 1);
}

TEST(RoundsTest, KeepsTheLastRoundsOnly) {
  Rounds r(2);
  for (int v = 1; v <= 5; ++v) {
    r.Start(v, {"trainer/0"}, t0);
    r.End(true, "", t0, 1, EngineOf);
  }
  ASSERT_EQ(r.history().size(), 2u);
  EXPECT_EQ(r.history()[0].version(), 4);
}

}  // namespace
}  // namespace refit

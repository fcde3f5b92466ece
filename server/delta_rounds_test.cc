// DeltaRounds: the announcement follows each engine member's history, parts
// are checked against the sender's slice, and the comparison at commit names
// the engine rank and tensor.
#include "server/delta_rounds.h"

#include "gtest/gtest.h"

namespace refit {
namespace {

std::vector<int64_t> Bases(const v1::RoundEvent& e) {
  return {e.delta_base().begin(), e.delta_base().end()};
}

v1::ReportRequest Part(int32_t rank, int32_t tensor, uint64_t sum, const char* name = "") {
  v1::ReportRequest r;
  v1::DigestPart* p = r.add_digests();
  p->set_engine_rank(rank);
  p->set_tensor(tensor);
  p->set_sum(sum);
  p->set_tensor_name(name);
  return r;
}

TEST(DeltaRounds, DeltaOnlyForEnginesHoldingTheLastCommit) {
  DeltaRounds d(true, 0);
  v1::RoundEvent e;
  d.Announce({{0, "e0"}, {1, "e1"}}, &e);
  EXPECT_EQ(Bases(e), (std::vector<int64_t>{-1, -1}));
  EXPECT_TRUE(e.verify());
  d.End(true, 1, {"t0", "e0", "e1"}, {{"engA", {"e0", "e1"}}});
  v1::RoundEvent e2;
  // e1 restarted: a new member id holds engine rank 1.
  d.Announce({{0, "e0"}, {1, "e1b"}}, &e2);
  EXPECT_EQ(Bases(e2), (std::vector<int64_t>{1, -1}));
  d.End(false, 2, {"t0", "e0", "e1b"}, {{"engA", {"e0", "e1b"}}});
  v1::RoundEvent e3;
  d.Announce({{0, "e0"}, {1, "e1b"}}, &e3);
  EXPECT_EQ(Bases(e3), (std::vector<int64_t>{-1, -1}));  // torn by the abort
}

// A plan whose host codec loses to the links (plan/host_delta.h) runs its
// rounds as without --delta: no bases, no digests, off the delta plane; and
// since no snapshot was refreshed, the next delta round is dense.
TEST(DeltaRounds, RoundsPlannedDenseRunOffTheDeltaPlane) {
  DeltaRounds d(true, 0);
  v1::RoundEvent e1;
  d.Announce({{0, "e0"}}, &e1);
  d.End(true, 1, {"t0", "e0"}, {{"engA", {"e0"}}});
  v1::RoundEvent e2;
  d.Announce({{0, "e0"}}, &e2, /*dense=*/true);
  EXPECT_TRUE(e2.delta_base().empty());
  EXPECT_FALSE(e2.verify());
  EXPECT_FALSE(e2.delta_plane());
  d.End(true, 2, {"t0", "e0"}, {{"engA", {"e0"}}});
  v1::RoundEvent e3;
  d.Announce({{0, "e0"}}, &e3);
  EXPECT_EQ(Bases(e3), (std::vector<int64_t>{-1}));
  EXPECT_TRUE(e3.delta_plane());
  d.End(true, 3, {"t0", "e0"}, {{"engA", {"e0"}}});
  v1::RoundEvent e4;
  d.Announce({{0, "e0"}}, &e4);
  EXPECT_EQ(Bases(e4), (std::vector<int64_t>{3}));
}

TEST(DeltaRounds, AMismatchNamesTheEngineRankAndTensor) {
  DeltaRounds d(true, 0);
  v1::RoundEvent e;
  d.Announce({{0, "e0"}}, &e);
  d.AddReport("t0", false, nullptr, Part(0, 3, 5));
  d.AddReport("t1", false, nullptr, Part(0, 3, 6));
  d.AddReport("e0", true, nullptr, Part(0, 3, 12, "layers.0.mlp.w"));
  absl::Status s = d.Check();
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_NE(s.message().find("engine rank 0 tensor layers.0.mlp.w"), std::string::npos) << s;
  d.AddReport("e0", true, nullptr, Part(0, 3, static_cast<uint64_t>(-1)));  // 11 = 5 + 6
  EXPECT_TRUE(d.Check().ok());
  d.End(true, 1, {"e0"}, {{"engA", {"e0"}}});
  EXPECT_EQ(d.VerifiedVersion("engA"), 1);
}

// Parts digested by different definitions (members of different builds)
// are not compared: the commit fails naming both members and the cause,
// not as corruption. Members reporting no scheme digest by the first one.
TEST(DeltaRounds, DigestsOfDifferentBuildsAreRefusedNamingBoth) {
  DeltaRounds d(true, 0);
  v1::RoundEvent e;
  d.Announce({{0, "e0"}}, &e);
  v1::ReportRequest trainer = Part(0, 3, 5);
  trainer.set_digest_scheme(2);
  d.AddReport("t0", false, nullptr, trainer, "trainer rank 0");
  d.AddReport("e0", true, nullptr, Part(0, 3, 5, "w"), "engine e0 rank 0");  // scheme 0
  absl::Status s = d.Check();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_NE(s.message().find("engine e0 rank 0 digests by definition 1 but trainer rank 0 by "
                             "definition 2"),
            std::string::npos)
      << s;
  // The next round starts clean; the same scheme on both sides compares.
  d.End(false, 1, {"e0"}, {{"engA", {"e0"}}});
  d.Announce({{0, "e0"}}, &e);
  v1::ReportRequest engine = Part(0, 3, 5, "w");
  engine.set_digest_scheme(2);
  d.AddReport("t0", false, nullptr, trainer, "trainer rank 0");
  d.AddReport("e0", true, nullptr, engine, "engine e0 rank 0");
  EXPECT_TRUE(d.Check().ok());
}

TEST(DeltaRounds, DenseRoundsVerifyEveryNth) {
  DeltaRounds d(false, 2);
  v1::RoundEvent a, b;
  d.Announce({{0, "e0"}}, &a);
  d.End(true, 1, {"e0"}, {{"engA", {"e0"}}});
  d.Announce({{0, "e0"}}, &b);
  EXPECT_FALSE(a.verify());
  EXPECT_TRUE(b.verify());
  EXPECT_TRUE(b.delta_base().empty());
}

// A member id that returns as a new process (it left, expired or was taken
// over, and registered again) holds nothing: dense, never a delta.
TEST(DeltaRounds, ANewProcessOfTheSameMemberGetsDenseBytes) {
  DeltaRounds d(true, 0);
  v1::RoundEvent e;
  d.Announce({{0, "a0"}, {1, "b0"}}, &e);
  d.End(true, 1, {"a0", "b0"}, {{"A", {"a0"}}, {"B", {"b0"}}});
  d.Forget("b0");
  v1::RoundEvent e2;
  d.Announce({{0, "a0"}, {1, "b0"}}, &e2);
  EXPECT_EQ(Bases(e2), (std::vector<int64_t>{1, -1}));
}

SliceBounds Slice(int32_t engine_rank, std::vector<std::pair<int32_t, int32_t>> keys) {
  SliceBounds b;
  b.engine_rank = engine_rank;
  b.digest_keys = std::move(keys);
  return b;
}

TEST(DeltaRounds, PartsOutsideTheSendersSliceAreRefused) {
  DeltaRounds d(true, 0);
  v1::RoundEvent e;
  d.Announce({{0, "a0"}, {1, "b0"}}, &e);
  const SliceBounds a = Slice(0, {{0, 1}, {0, 2}});
  // Another engine's rank, a tensor the slice does not write, one place
  // twice, more parts than the slice writes.
  for (const v1::ReportRequest& r :
       {Part(1, 1, 5), Part(0, 7, 5), [] {
          v1::ReportRequest r = Part(0, 1, 5);
          *r.add_digests() = r.digests(0);
          return r;
        }(),
        [] {
          v1::ReportRequest r = Part(0, 1, 5);
          for (int i = 0; i < 3; ++i) *r.add_digests() = r.digests(0);
          return r;
        }()}) {
    absl::Status s = d.CheckParts(true, 0, &a, r, "engine A rank 0");
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_NE(s.message().find("digests: engine A rank 0"), std::string::npos) << s;
  }
  // Without bounds an engine still names only its own rank.
  EXPECT_TRUE(absl::IsInvalidArgument(d.CheckParts(true, 0, nullptr, Part(1, 1, 5))));
  EXPECT_TRUE(d.CheckParts(true, 0, &a, Part(0, 2, 5)).ok());
  EXPECT_TRUE(d.CheckParts(false, -1, nullptr, Part(1, 2, 5)).ok());
}

// An engine is verified only when its parts covered its slice and agreed:
// an engine that sent none (and whose parts the trainer omitted) is not.
TEST(DeltaRounds, OnlyEnginesWhosePartsWereComparedAreVerified) {
  DeltaRounds d(true, 0);
  v1::RoundEvent e;
  d.Announce({{0, "a0"}, {1, "b0"}}, &e);
  const SliceBounds a = Slice(0, {{0, 1}}), b = Slice(1, {{1, 1}});
  d.AddReport("t0", false, nullptr, Part(0, 1, 5));
  d.AddReport("a0", true, &a, Part(0, 1, 5));
  d.AddReport("b0", true, &b, v1::ReportRequest());
  EXPECT_TRUE(d.Check().ok());
  d.End(true, 1, {"t0", "a0", "b0"}, {{"A", {"a0"}}, {"B", {"b0"}}});
  EXPECT_EQ(d.VerifiedVersion("A"), 1);
  EXPECT_EQ(d.VerifiedVersion("B"), 0);
}

}  // namespace
}  // namespace refit

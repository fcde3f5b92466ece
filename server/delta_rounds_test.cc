// DeltaRounds: the announcement follows each engine member's history, and
// the comparison at commit names the engine rank and tensor.
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
  d.End(true, 1, {"t0", "e0", "e1"}, {"engA"});
  v1::RoundEvent e2;
  // e1 restarted: a new member id holds engine rank 1.
  d.Announce({{0, "e0"}, {1, "e1b"}}, &e2);
  EXPECT_EQ(Bases(e2), (std::vector<int64_t>{1, -1}));
  d.End(false, 2, {"t0", "e0", "e1b"}, {"engA"});
  v1::RoundEvent e3;
  d.Announce({{0, "e0"}, {1, "e1b"}}, &e3);
  EXPECT_EQ(Bases(e3), (std::vector<int64_t>{-1, -1}));  // torn by the abort
}

TEST(DeltaRounds, AMismatchNamesTheEngineRankAndTensor) {
  DeltaRounds d(true, 0);
  v1::RoundEvent e;
  d.Announce({{0, "e0"}}, &e);
  d.AddReport(false, Part(0, 3, 5));
  d.AddReport(false, Part(0, 3, 6));
  d.AddReport(true, Part(0, 3, 12, "layers.0.mlp.w"));
  absl::Status s = d.Check();
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_NE(s.message().find("engine rank 0 tensor layers.0.mlp.w"), std::string::npos) << s;
  d.AddReport(true, Part(0, 3, static_cast<uint64_t>(-1)));  // 12 - 1 = 11 = 5 + 6
  EXPECT_TRUE(d.Check().ok());
  d.End(true, 1, {"e0"}, {"engA"});
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
  d.AddReport(false, trainer, "trainer rank 0");
  d.AddReport(true, Part(0, 3, 5, "w"), "engine e0 rank 0");  // scheme 0: the first
  absl::Status s = d.Check();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_NE(s.message().find("engine e0 rank 0 digests by definition 1 but trainer rank 0 by "
                             "definition 2"),
            std::string::npos)
      << s;
  // The next round starts clean; the same scheme on both sides compares.
  d.End(false, 1, {"e0"}, {"engA"});
  d.Announce({{0, "e0"}}, &e);
  v1::ReportRequest engine = Part(0, 3, 5, "w");
  engine.set_digest_scheme(2);
  d.AddReport(false, trainer, "trainer rank 0");
  d.AddReport(true, engine, "engine e0 rank 0");
  EXPECT_TRUE(d.Check().ok());
}

TEST(DeltaRounds, DenseRoundsVerifyEveryNth) {
  DeltaRounds d(false, 2);
  v1::RoundEvent a, b;
  d.Announce({{0, "e0"}}, &a);
  d.End(true, 1, {"e0"}, {"engA"});
  d.Announce({{0, "e0"}}, &b);
  EXPECT_FALSE(a.verify());
  EXPECT_TRUE(b.verify());
  EXPECT_TRUE(b.delta_base().empty());
}

}  // namespace
}  // namespace refit

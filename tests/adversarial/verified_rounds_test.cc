// Delta and verified rounds against a refitd child (--delta, two engines):
// one delta base per engine rank of the plan, a new process of a member
// always dense, Report contents checked against the sender's own plan slice
// (its own engine ranks and tensors, once per round, part counts and bytes
// bounded by the slice), and an engine verified only when its digest parts
// were compared. A new process is dense whichever way the old one went: it
// left, it expired (no heartbeats), or it was taken over (job key).
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/refit_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/refitd_process.h"
#include "testing/tiny_registration.h"
#include "tests/adversarial/refitd_peers.h"

namespace refit {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

absl::Time In(absl::Duration d) { return absl::Now() + d; }

// What a member's slice moves: its message bytes and the (engine rank,
// engine tensor) places it writes.
struct SliceView {
  int64_t bytes = 0;
  std::set<std::pair<int32_t, int32_t>> keys;
};

SliceView ViewOf(RefitClient& c) {
  SliceView v;
  absl::StatusOr<v1::AwaitPlanResponse> plan = c.AwaitPlan(In(absl::Seconds(20)));
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok()) return v;
  absl::StatusOr<v1::PlanProto> slice = RefitClient::Slice(*plan);
  EXPECT_TRUE(slice.ok()) << slice.status();
  if (!slice.ok()) return v;
  for (const v1::MessageProto& m : slice->messages()) {
    v.bytes += m.bytes();
    for (int s = m.first_segment(); s < m.first_segment() + m.num_segments(); ++s) {
      const int record = slice->segments(s).dst_record();
      v.keys.emplace(m.dst_rank(), slice->dst().records(record).tensor());
    }
  }
  return v;
}

// Figures reporting `bytes` and the digest part `sum` for each key of
// `keys` (a part per key: every side sums alike, so the round compares equal).
RefitClient::RoundFigures Figures(int64_t bytes,
                                  const std::set<std::pair<int32_t, int32_t>>& keys) {
  RefitClient::RoundFigures f;
  f.bytes = bytes;
  f.seconds = 0.01;
  for (const auto& [rank, tensor] : keys) {
    v1::DigestPart& p = f.digests.emplace_back();
    p.set_engine_rank(rank);
    p.set_tensor(tensor);
    p.set_sum(7);
  }
  return f;
}

std::set<std::pair<int32_t, int32_t>> OfRank(const std::set<std::pair<int32_t, int32_t>>& keys,
                                             int32_t rank) {
  std::set<std::pair<int32_t, int32_t>> out;
  for (const auto& k : keys) {
    if (k.first == rank) out.insert(k);
  }
  return out;
}

absl::Status Start(RefitClient& t, int64_t v) {
  const absl::Time deadline = In(absl::Seconds(20));
  absl::Status s = t.StartRound(v, deadline);
  while (absl::IsUnavailable(s) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
    s = t.StartRound(v, deadline);
  }
  return s;
}

int64_t VerifiedVersion(RefitClient& c, const std::string& engine) {
  absl::StatusOr<v1::StatusResponse> s = c.GetStatus(In(absl::Seconds(10)));
  EXPECT_TRUE(s.ok()) << s.status();
  if (!s.ok()) return -1;
  for (const v1::EngineStatus& e : s->engines()) {
    if (e.engine_id() == engine) return e.verified_version();
  }
  return -1;
}

std::vector<int64_t> Bases(RefitClient& c, int64_t v) {
  return c.RoundModeOf(v).delta_base;
}

// A refitd child (--delta, two engines) with the trainer `t` and engines
// "A" and "B" joined, their slices' views, and round 1 started and seen by
// all three.
struct RoundOfTwoEngines {
  RefitdProcess refitd;
  std::unique_ptr<RefitClient> t, a, b;
  SliceView tv, av, bv;
};

// Starts `r`, refitd's output in `log` under TEST_TMPDIR; gtest failures
// when it could not.
void StartRoundOne(const std::string& log, RoundOfTwoEngines* r) {
  ASSERT_TRUE(r->refitd
                  .Start(absl::StrCat(std::getenv("TEST_SRCDIR"), "/refit/server/refitd"),
                         {"--plan_settle_ms=5", "--delta", "--min_engines=2",
                          // slow host links: delta pays (plan/host_delta.h)
                          "--host_link_gbps=0.01"},
                         absl::StrCat(std::getenv("TEST_TMPDIR"), "/", log), absl::Seconds(20))
                  .ok());
  const int port = r->refitd.port();
  r->t = testing::JoinRefitd(port, testing::TinyRegistration(true, "job"));
  r->a = testing::JoinRefitd(port, testing::TinyRegistration(false, "job", "A"));
  r->b = testing::JoinRefitd(port, testing::TinyRegistration(false, "job", "B"));
  ASSERT_TRUE(r->t && r->a && r->b);
  r->tv = ViewOf(*r->t);
  r->av = ViewOf(*r->a);
  r->bv = ViewOf(*r->b);
  ASSERT_FALSE(r->av.keys.empty());
  ASSERT_FALSE(r->bv.keys.empty());
  ASSERT_TRUE(Start(*r->t, 1).ok());
  for (RefitClient* c : {r->t.get(), r->a.get(), r->b.get()}) {
    ASSERT_TRUE(c->WaitForRound(In(absl::Seconds(10))).ok());
  }
}

TEST(VerifiedRoundsTest, ReportsAreBoundByTheSendersSliceAndNewProcessesGetDenseBytes) {
  RoundOfTwoEngines r;
  ASSERT_NO_FATAL_FAILURE(StartRoundOne("refitd.out", &r));
  RefitdProcess& refitd = r.refitd;
  std::unique_ptr<RefitClient>& t = r.t;
  std::unique_ptr<RefitClient>& a = r.a;
  std::unique_ptr<RefitClient>& b = r.b;
  const SliceView &tv = r.tv, &av = r.av, &bv = r.bv;
  const int32_t rank_a = av.keys.begin()->first, rank_b = bv.keys.begin()->first;
  ASSERT_NE(rank_a, rank_b);  // two engines: two engine ranks of the plan

  // Round 1: every engine rank dense.
  EXPECT_THAT(Bases(*t, 1), ElementsAre(-1, -1));
  // Engine A digests engine B's rank: refused, naming the field; the round
  // does not blame B.
  absl::Status s = a->ReportDone(1, Figures(av.bytes, bv.keys), In(absl::Seconds(10)));
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("digests: "));
  // 100,000 parts: more than the slice writes.
  RefitClient::RoundFigures many = Figures(av.bytes, av.keys);
  many.digests.resize(100000, many.digests[0]);
  s = a->ReportDone(1, many, In(absl::Seconds(10)));
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("digests: "));
  // Bytes above what the slice moves (INT64_MAX).
  s = t->ReportDone(1, Figures(std::numeric_limits<int64_t>::max(), tv.keys),
                    In(absl::Seconds(10)));
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("bytes: "));
  // The trainer's report twice: counted once, the round commits.
  ASSERT_TRUE(t->ReportDone(1, Figures(tv.bytes, tv.keys), In(absl::Seconds(10))).ok());
  ASSERT_TRUE(t->ReportDone(1, Figures(tv.bytes, tv.keys), In(absl::Seconds(10))).ok());
  ASSERT_TRUE(a->ReportDone(1, Figures(av.bytes, av.keys), In(absl::Seconds(10))).ok());
  ASSERT_TRUE(b->ReportDone(1, Figures(bv.bytes, bv.keys), In(absl::Seconds(10))).ok());
  ASSERT_TRUE(t->AwaitOutcome(1, In(absl::Seconds(10))).ok());
  EXPECT_EQ(VerifiedVersion(*t, "A"), 1);
  EXPECT_EQ(VerifiedVersion(*t, "B"), 1);

  // Round 2: each engine rank its own base. B sends no digest and the
  // trainer omits B's parts: the round commits, B is not verified by it.
  ASSERT_TRUE(Start(*t, 2).ok());
  for (RefitClient* c : {t.get(), a.get(), b.get()}) {
    ASSERT_TRUE(c->WaitForRound(In(absl::Seconds(10))).ok());
  }
  EXPECT_THAT(Bases(*t, 2), ElementsAre(1, 1));
  ASSERT_TRUE(
      t->ReportDone(2, Figures(tv.bytes, OfRank(tv.keys, rank_a)), In(absl::Seconds(10)))
          .ok());
  ASSERT_TRUE(a->ReportDone(2, Figures(av.bytes, av.keys), In(absl::Seconds(10))).ok());
  ASSERT_TRUE(b->ReportDone(2, Figures(bv.bytes, {}), In(absl::Seconds(10))).ok());
  ASSERT_TRUE(t->AwaitOutcome(2, In(absl::Seconds(10))).ok());
  EXPECT_EQ(VerifiedVersion(*t, "A"), 2);
  EXPECT_EQ(VerifiedVersion(*t, "B"), 1);

  // B's process leaves and a new one registers the same identity: it holds
  // nothing, so its rank is dense while A's takes a delta.
  ASSERT_TRUE(b->Leave(In(absl::Seconds(10))).ok());
  b.reset();
  auto b2 = testing::JoinRefitd(refitd.port(), testing::TinyRegistration(false, "job", "B"));
  ASSERT_TRUE(b2);
  ViewOf(*b2);
  ViewOf(*t);
  ViewOf(*a);
  ASSERT_TRUE(Start(*t, 3).ok());
  ASSERT_TRUE(t->WaitForRound(In(absl::Seconds(10))).ok());
  std::vector<int64_t> expected(2, -1);
  expected[rank_a] = 2;
  EXPECT_EQ(Bases(*t, 3), expected);
}

// The outsider's Report replays, round 1 of two engines: digest parts for
// the other engine's rank, or for a tensor outside the sender's slice, are
// refused naming the sender; one report of 1,000,000 parts (with tensor
// names) is refused at once, refitd's memory barely grows and another
// member's calls stay fast meanwhile; an engine's report sent twice counts
// once, so the round commits verified for both engines.
TEST(VerifiedRoundsTest, ReportReplaysAreRefusedNamingTheSenderAndCountedOnce) {
  RoundOfTwoEngines r;
  ASSERT_NO_FATAL_FAILURE(StartRoundOne("refitd-replay.out", &r));
  const int32_t rank_a = r.av.keys.begin()->first;
  // Parts for engine B's rank, and for a tensor A's slice does not write.
  for (const auto& keys : {r.bv.keys, std::set<std::pair<int32_t, int32_t>>{{rank_a, 999999}}}) {
    const absl::Status s = r.a->ReportDone(1, Figures(r.av.bytes, keys), In(absl::Seconds(10)));
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("digests: engine A rank 0 sent"));
  }
  // 1,000,000 parts, each with a tensor name, while the trainer calls
  // GetStatus over and over.
  RefitClient::RoundFigures flood = Figures(r.av.bytes, r.av.keys);
  flood.digests.resize(1000000, flood.digests[0]);
  for (v1::DigestPart& p : flood.digests) p.set_tensor_name("model.layers.0.mlp.down_proj.weight");
  const int64_t wire_bytes =
      static_cast<int64_t>(flood.digests.size() * (flood.digests[0].ByteSizeLong() + 2));
  const int64_t before_kib = r.refitd.PeakRssKib();
  std::atomic<bool> done{false};
  absl::Duration slowest;
  int calls = 0;
  std::thread other([&] {
    while (!done) {
      const absl::Time start = absl::Now();
      EXPECT_TRUE(r.t->GetStatus(In(absl::Seconds(10))).ok());
      slowest = std::max(slowest, absl::Now() - start);
      ++calls;
    }
  });
  const absl::Time start = absl::Now();
  const absl::Status s = r.a->ReportDone(1, flood, In(absl::Seconds(30)));
  const absl::Duration took = absl::Now() - start;
  absl::SleepFor(absl::Milliseconds(100));
  done = true;
  other.join();
  const int64_t grew_kib = r.refitd.PeakRssKib() - before_kib;
  std::printf("a report of 1,000,000 digest parts (%.1f MiB): %s in %.2f s; refitd peak RSS "
              "+%.1f MiB; another member's GetStatus slowest %.1f ms of %d\n",
              wire_bytes / 1048576.0, absl::StatusCodeToString(s.code()).c_str(),
              absl::ToDoubleSeconds(took), grew_kib / 1024.0,
              absl::ToDoubleMilliseconds(slowest), calls);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("digests: "));
  // refitd holds the request's bytes as gRPC receives them, and nothing
  // more: no parse, no parts kept.
  EXPECT_LT(grew_kib, wire_bytes / 1024 + 16 * 1024);
  EXPECT_LT(slowest, absl::Seconds(1));
  // A's report twice: counted once; the round commits verified.
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(r.a->ReportDone(1, Figures(r.av.bytes, r.av.keys), In(absl::Seconds(10))).ok());
  }
  ASSERT_TRUE(r.b->ReportDone(1, Figures(r.bv.bytes, r.bv.keys), In(absl::Seconds(10))).ok());
  ASSERT_TRUE(r.t->ReportDone(1, Figures(r.tv.bytes, r.tv.keys), In(absl::Seconds(10))).ok());
  ASSERT_TRUE(r.t->AwaitOutcome(1, In(absl::Seconds(10))).ok());
  EXPECT_EQ(VerifiedVersion(*r.t, "A"), 1);
  EXPECT_EQ(VerifiedVersion(*r.t, "B"), 1);
  EXPECT_TRUE(r.refitd.Alive());
}

// Joins refitd on `port` as `reg` with the job key `key`.
std::unique_ptr<RefitClient> JoinWithKey(int port, const v1::Registration& reg,
                                         const std::string& key) {
  RefitClient::Options o;
  o.target = absl::StrCat("127.0.0.1:", port);
  o.job_key = key;
  auto c = RefitClient::Connect(o);
  EXPECT_TRUE(c.ok()) << c.status();
  if (!c.ok()) return nullptr;
  absl::StatusOr<std::string> id = (*c)->Register(reg);
  EXPECT_TRUE(id.ok()) << id.status();
  return id.ok() ? std::move(*c) : nullptr;
}

// Runs round `v` with `t` the trainer and `engines`, every member reporting
// its whole slice; returns the round's delta bases (by engine rank).
std::vector<int64_t> CommitRound(int64_t v, RefitClient& t,
                                 const std::vector<RefitClient*>& engines) {
  std::vector<RefitClient*> all = {&t};
  all.insert(all.end(), engines.begin(), engines.end());
  std::vector<SliceView> views;
  for (RefitClient* c : all) views.push_back(ViewOf(*c));
  EXPECT_TRUE(Start(t, v).ok()) << v;
  for (RefitClient* c : all) EXPECT_TRUE(c->WaitForRound(In(absl::Seconds(10))).ok()) << v;
  const std::vector<int64_t> bases = Bases(t, v);
  for (size_t i = 0; i < all.size(); ++i) {
    const absl::Status s =
        all[i]->ReportDone(v, Figures(views[i].bytes, views[i].keys), In(absl::Seconds(10)));
    EXPECT_TRUE(s.ok()) << v << ": " << s;
  }
  const absl::Status outcome = t.AwaitOutcome(v, In(absl::Seconds(10)));
  EXPECT_TRUE(outcome.ok()) << v << ": " << outcome;
  return bases;
}

TEST(VerifiedRoundsTest, AnEngineProcessThatExpiredOrWasTakenOverGetsDenseBytes) {
  const std::string key_file = absl::StrCat(std::getenv("TEST_TMPDIR"), "/job.key");
  std::ofstream(key_file) << "delta-key\n";
  RefitdProcess refitd;
  ASSERT_TRUE(refitd
                  .Start(absl::StrCat(std::getenv("TEST_SRCDIR"), "/refit/server/refitd"),
                         {"--plan_settle_ms=5", "--delta", "--min_engines=2",
                          "--host_link_gbps=0.01", "--heartbeat_timeout_ms=1500",
                          "--job_key_file=" + key_file},
                         absl::StrCat(std::getenv("TEST_TMPDIR"), "/refitd-expiry.out"),
                         absl::Seconds(20))
                  .ok());
  const int port = refitd.port();
  auto t = JoinWithKey(port, testing::TinyRegistration(true, "job"), "delta-key");
  auto a = JoinWithKey(port, testing::TinyRegistration(false, "job", "A"), "delta-key");
  auto b = JoinWithKey(port, testing::TinyRegistration(false, "job", "B"), "delta-key");
  ASSERT_TRUE(t && a && b);
  const int32_t rank_a = ViewOf(*a).keys.begin()->first;
  EXPECT_THAT(CommitRound(1, *t, {a.get(), b.get()}), ElementsAre(-1, -1));
  std::vector<int64_t> expected(2, -1);
  expected[rank_a] = 1;

  // B's process stops without leaving: refitd expires it after its
  // heartbeat timeout, and the new process is dense.
  b.reset();
  const absl::Time until = In(absl::Seconds(10));
  while (VerifiedVersion(*t, "B") != -1 && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_EQ(VerifiedVersion(*t, "B"), -1) << "engine B not expired";
  auto b2 = JoinWithKey(port, testing::TinyRegistration(false, "job", "B"), "delta-key");
  ASSERT_TRUE(b2);
  EXPECT_EQ(CommitRound(2, *t, {a.get(), b2.get()}), expected);

  // A new process of B takes the identity over with the job key while the
  // old one is still registered: dense again, A still a delta.
  auto b3 = JoinWithKey(port, testing::TinyRegistration(false, "job", "B"), "delta-key");
  ASSERT_TRUE(b3);
  expected[rank_a] = 2;
  EXPECT_EQ(CommitRound(3, *t, {a.get(), b3.get()}), expected);
  EXPECT_TRUE(refitd.Alive());
}

}  // namespace
}  // namespace refit

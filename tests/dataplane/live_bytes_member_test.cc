// A round's bytes while it runs, through refitd: members send what their
// transport moved so far with their heartbeats, refitd's status shows each
// participant's figure against its plan slice, and Member::Progress (what
// the Python progress callback and `refit status --watch` read) gives it.
#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/data_plane.h"
#include "client/member.h"
#include "gtest/gtest.h"
#include "server/refit_server.h"
#include "testing/host_members.h"
#include "testing/member_patterns.h"

namespace refit {
namespace {

// Gloo, each wave held `*delay` longer once it completed: a slow link.
class SlowTransport : public Transport {
 public:
  SlowTransport(std::unique_ptr<Transport> inner, std::shared_ptr<std::atomic<int64_t>> delay_us)
      : inner_(std::move(inner)), delay_us_(std::move(delay_us)) {}
  int32_t rank() const override { return inner_->rank(); }
  int32_t world_size() const override { return inner_->world_size(); }
  int32_t num_lanes() const override { return inner_->num_lanes(); }
  MemoryKind memory_kind() const override { return inner_->memory_kind(); }
  absl::Status StartWave(int32_t lane, absl::Span<const SendOp> sends,
                         absl::Span<const RecvOp> recvs, absl::Time deadline) override {
    return inner_->StartWave(lane, sends, recvs, deadline);
  }
  absl::Status WaitWave(int32_t lane, absl::Time deadline) override {
    absl::Status s = inner_->WaitWave(lane, deadline);
    absl::SleepFor(absl::Microseconds(delay_us_->load()));
    return s;
  }

 private:
  std::unique_ptr<Transport> inner_;
  std::shared_ptr<std::atomic<int64_t>> delay_us_;
};

TEST(LiveBytesMemberTest, MidRoundStatusShowsBytesBetweenZeroAndThePlan) {
  PlannerOptions planner;  // many small waves on one lane
  planner.num_lanes = 1;
  planner.choose_lanes = false;
  planner.staging_budget_bytes = 256 << 10;
  planner.max_message_bytes = 1024;  // tiny-llama: about 26 KB
  planner.max_wave_bytes = 1024;
  planner.direct_min_bytes = 0;
  absl::StatusOr<std::unique_ptr<RefitServer>> server =
      testing::StartHostRefitd(/*delta=*/false, planner);
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<testing::HostMember> nodes = testing::TrainerAndEngine(
      absl::StrCat("127.0.0.1:", (*server)->port()), "tiny-llama");
  for (testing::HostMember& n : nodes) {
    n.options.connection.heartbeat_interval = absl::Milliseconds(20);
  }
  auto delay_us = std::make_shared<std::atomic<int64_t>>(0);
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  const absl::Status joined = testing::JoinHostMembers(
      nodes,
      [&](size_t) {
        DataPlaneOptions o;
        TransportFactory gloo = GlooTransportFactory();
        o.transport = [gloo, delay_us](KvStore* store, int32_t rank, int32_t world,
                                       int32_t lanes) -> absl::StatusOr<std::unique_ptr<Transport>> {
          absl::StatusOr<std::unique_ptr<Transport>> t = gloo(store, rank, world, lanes);
          if (!t.ok()) return t;
          return std::unique_ptr<Transport>(std::make_unique<SlowTransport>(std::move(*t), delay_us));
        };
        return o;
      },
      deadline);
  ASSERT_TRUE(joined.ok()) << joined;
  Member& trainer = *nodes[0].member;
  Member& engine = *nodes[1].member;
  absl::Status prepared_t, prepared_e;
  std::thread pe([&] { prepared_e = engine.Prepare(deadline); });
  prepared_t = trainer.Prepare(deadline);
  pe.join();
  ASSERT_TRUE(prepared_t.ok()) << prepared_t;
  ASSERT_TRUE(prepared_e.ok()) << prepared_e;
  const Plan& plan = trainer.data_plane().plan();
  int64_t planned = 0;
  for (const Message& m : plan.messages) planned += m.bytes;  // one trainer, one engine
  ASSERT_GE(plan.waves.size(), 8u) << "the test needs a round of many waves: " << planned
                                   << " bytes in " << plan.messages.size() << " messages";
  // The round takes about 3 s.
  delay_us->store(3'000'000 / static_cast<int64_t>(plan.waves.size()));
  ASSERT_TRUE(testing::FillMemberPattern(trainer, 1).ok());
  ASSERT_TRUE(trainer.StartRound(1, deadline).ok());
  absl::Status ran_t, ran_e;
  std::thread rt([&] {
    absl::StatusOr<int64_t> v = trainer.WaitForRound(deadline);
    ran_t = v.ok() ? trainer.RunRound(*v, deadline).status() : v.status();
  });
  std::thread re([&] {
    absl::StatusOr<int64_t> v = engine.WaitForRound(deadline);
    ran_e = v.ok() ? engine.RunRound(*v, deadline).status() : v.status();
  });
  // Poll as `refit status --watch` and the Python callback do.
  std::vector<int64_t> seen;  // the trainer's bytes so far, as Progress says
  bool between = false;
  int64_t status_planned = -1;
  for (int i = 0; i < 200 && !between; ++i) {
    absl::SleepFor(absl::Milliseconds(25));
    absl::StatusOr<Member::RoundProgress> p = trainer.Progress(1, deadline);
    ASSERT_TRUE(p.ok()) << p.status();
    if (!p->running) continue;
    EXPECT_EQ(p->planned_bytes, planned);
    EXPECT_EQ(p->round_planned_bytes, planned);  // one engine rank receives it all
    EXPECT_LE(p->bytes, p->planned_bytes);
    seen.push_back(p->bytes);
    absl::StatusOr<v1::StatusResponse> st = trainer.client().GetStatus(deadline);
    ASSERT_TRUE(st.ok()) << st.status();
    for (const v1::RoundSummary& s : st->rounds()) {
      if (s.outcome() != "running") continue;
      ASSERT_EQ(s.live_size(), 2);
      for (const v1::MemberBytes& b : s.live()) {
        EXPECT_LE(b.bytes(), b.planned_bytes()) << b.member_id();
        if (b.member_id() == trainer.client().member_id() && b.bytes() > 0 &&
            b.bytes() < b.planned_bytes()) {
          between = true;
          status_planned = b.planned_bytes();
        }
      }
    }
  }
  rt.join();
  re.join();
  ASSERT_TRUE(ran_t.ok()) << ran_t;
  ASSERT_TRUE(ran_e.ok()) << ran_e;
  EXPECT_TRUE(testing::CheckMemberPattern(engine, 1).ok());
  EXPECT_TRUE(between) << "no status showed the trainer between 0 and its plan";
  EXPECT_EQ(status_planned, planned);
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));  // the figure only rises
}

}  // namespace
}  // namespace refit

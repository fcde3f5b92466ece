// A member whose data plane runs out of its round deadline (a peer that
// never moves its bytes: frozen data plane, a link that drops everything)
// still tells refitd, so refitd aborts the round for everyone at once; the
// round does not stay open until refitd's round timeout. Found by the
// namespace fault tests (netns_faults_test), checked here on loopback.
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "client/member.h"
#include "exec/transport/gloo_transport.h"
#include "gtest/gtest.h"
#include "server/default_plan.h"
#include "server/refit_server.h"
#include "testing/host_members.h"

namespace refit {
namespace {

TEST(RoundDeadlineReportTest, AMemberPastItsDeadlineStillAbortsTheRound) {
  RefitServer::Options so;
  so.coordinator.plan_function = DefaultPlanFunction({});
  so.coordinator.heartbeat_timeout = absl::Seconds(30);  // the engine stays alive
  absl::StatusOr<std::unique_ptr<RefitServer>> server = RefitServer::Start(std::move(so));
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<testing::HostMember> nodes = testing::TrainerAndEngine(
      absl::StrCat("127.0.0.1:", (*server)->port()), "tiny-llama");  // trainer, engine A
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  // Gloo's rendezvous gives up after 1 s, as the trainer's round does.
  auto data_plane = [](size_t) {
    DataPlaneOptions o;
    o.transport = [](KvStore* store, int32_t rank, int32_t world,
                     int32_t lanes) -> absl::StatusOr<std::unique_ptr<Transport>> {
      GlooTransportOptions g;
      g.num_lanes = lanes;
      g.key_prefix = "gloo";
      g.connect_timeout = absl::Seconds(1);
      absl::StatusOr<std::unique_ptr<GlooTransport>> t =
          GlooTransport::Create(store, rank, world, g);
      if (!t.ok()) return t.status();
      return std::unique_ptr<Transport>(std::move(*t));
    };
    return o;
  };
  ASSERT_TRUE(testing::JoinHostMembers(nodes, data_plane, deadline).ok());
  Member& trainer = *nodes[0].member;
  Member& engine = *nodes[1].member;
  ASSERT_TRUE(trainer.Prepare(deadline).ok());
  ASSERT_TRUE(engine.Prepare(deadline).ok());
  ASSERT_TRUE(trainer.StartRound(1, deadline).ok());
  ASSERT_EQ(trainer.WaitForRound(deadline).value_or(-1), 1);
  ASSERT_EQ(engine.WaitForRound(deadline).value_or(-1), 1);

  // The engine never runs its data plane; the trainer gives up at 1 s,
  // when its round deadline has passed.
  const absl::Time round_deadline = absl::Now() + absl::Seconds(1);
  absl::StatusOr<RunStats> ran = trainer.RunRound(1, round_deadline);
  ASSERT_FALSE(ran.ok());
  EXPECT_GE(absl::Now(), round_deadline) << ran.status();

  // refitd heard of it: the round is aborted now, naming the trainer.
  const absl::Status out = engine.client().AwaitOutcome(1, absl::Now() + absl::Seconds(5));
  EXPECT_EQ(out.code(), absl::StatusCode::kAborted) << out;
  EXPECT_NE(out.message().find("trainer rank 0"), std::string::npos) << out;
}

}  // namespace
}  // namespace refit

// RefitClient against a stand-in refitd that announces a round on a newer
// plan epoch before (or without) the PLAN_CHANGED event: the member must
// see that its plan is stale (PlanChanged) and fetch the round's plan,
// instead of running the round on the old one and failing it for everyone.
#include <atomic>
#include <memory>
#include <string>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/refit_client.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/refit_service.grpc.pb.h"

namespace refit {
namespace {

// Serves one member: plan epoch 1 until round 1 starts on epoch 2.
class StandInRefitd final : public v1::RefitService::Service {
 public:
  absl::Notification start_round;  // the test lets round 1 start
  std::atomic<int64_t> min_epoch_asked{-1};

  grpc::Status Register(grpc::ServerContext*, const v1::RegisterRequest*,
                        v1::RegisterResponse* resp) override {
    resp->set_member_id("engine/j/e0/0");
    resp->set_member_secret("s");
    return grpc::Status::OK;
  }
  grpc::Status AwaitPlan(grpc::ServerContext*, const v1::AwaitPlanRequest* req,
                         v1::AwaitPlanResponse* resp) override {
    min_epoch_asked = req->min_epoch();
    const bool round_started = start_round.HasBeenNotified();
    resp->set_epoch(round_started ? 2 : 1);
    resp->set_fingerprint(round_started ? "plan-2" : "plan-1");
    return grpc::Status::OK;
  }
  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest*,
                         v1::HeartbeatResponse*) override {
    return grpc::Status::OK;
  }
  grpc::Status Leave(grpc::ServerContext*, const v1::LeaveRequest*,
                     v1::LeaveResponse*) override {
    return grpc::Status::OK;
  }
  grpc::Status WatchRounds(grpc::ServerContext* ctx, const v1::WatchRequest*,
                           grpc::ServerWriter<v1::RoundEvent>* writer) override {
    v1::RoundEvent e;
    e.set_kind(v1::RoundEvent::PLAN_CHANGED);
    e.set_epoch(1);
    writer->Write(e);
    while (!ctx->IsCancelled() &&
           !start_round.WaitForNotificationWithTimeout(absl::Milliseconds(10))) {
    }
    if (ctx->IsCancelled()) return grpc::Status::OK;
    // The round's announcement carries its epoch; no PLAN_CHANGED first.
    e.Clear();
    e.set_kind(v1::RoundEvent::ROUND_STARTED);
    e.set_version(1);
    e.set_attempt(1);
    e.set_epoch(2);
    writer->Write(e);
    while (!ctx->IsCancelled()) absl::SleepFor(absl::Milliseconds(10));
    return grpc::Status::OK;
  }
};

TEST(RefitClientEpoch, ARoundOnANewerEpochMarksThePlanChanged) {
  StandInRefitd refitd;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&refitd);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  {
    RefitClient::Options o;
    o.target = "127.0.0.1:" + std::to_string(port);
    auto client = RefitClient::Connect(o);
    ASSERT_TRUE(client.ok()) << client.status();
    RefitClient& c = **client;
    v1::Registration reg;
    reg.mutable_identity()->set_job("j");
    ASSERT_TRUE(c.Register(reg).ok());
    auto plan = c.AwaitPlan(absl::Now() + absl::Seconds(5));
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->epoch(), 1);
    EXPECT_FALSE(c.PlanChanged());

    refitd.start_round.Notify();
    auto round = c.WaitForRound(absl::Now() + absl::Seconds(5));
    ASSERT_TRUE(round.ok()) << round.status();
    EXPECT_EQ(*round, 1);
    auto epoch = c.RoundEpoch(1);
    ASSERT_TRUE(epoch.ok()) << epoch.status();
    EXPECT_EQ(*epoch, 2);
    EXPECT_TRUE(c.PlanChanged()) << "round 1 runs epoch 2, the member holds epoch 1";
    // The next AwaitPlan asks for the round's epoch at least.
    plan = c.AwaitPlan(absl::Now() + absl::Seconds(5));
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(refitd.min_epoch_asked.load(), 2);
    EXPECT_EQ(plan->epoch(), 2);
    EXPECT_FALSE(c.PlanChanged());
  }
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
}

}  // namespace
}  // namespace refit

// RefitServer + RefitClient on loopback: registration checks, plan hand-out,
// rounds, the key-value store, membership changes.
#include "server/refit_server.h"

#include <atomic>
#include <memory>
#include <thread>

#include "client/grpc_kv_store.h"
#include "client/refit_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/plan.pb.h"
#include "proto/protocol_version.h"
#include "server/registration.h"
#include "testing/name_matching_plan.h"
#include "testing/restart_port.h"

namespace refit {
namespace {

using ::testing::HasSubstr;

absl::Time In(absl::Duration d) { return absl::Now() + d; }

RefitServer::Options TestOptions() {
  RefitServer::Options o;
  o.coordinator.plan_function = NameMatchingPlan;
  o.coordinator.heartbeat_timeout = absl::Seconds(2);
  o.coordinator.max_buffers_per_member = 16;
  o.coordinator.max_metadata_bytes = 4096;
  return o;
}

v1::Registration Reg(v1::Side side, const std::string& engine, int rank, int world,
                     const std::vector<std::string>& buffers) {
  v1::Registration r;
  auto* id = r.mutable_identity();
  id->set_job("job");
  id->set_side(side);
  id->set_engine_id(engine);
  id->set_rank(rank);
  id->set_world_size(world);
  id->set_host_id("host0");
  id->set_device("cpu");
  r.set_model_config("tiny-llama");
  r.set_convention(side == v1::SIDE_TRAINER ? "megatron:tp=2" : "vllm:tp=1");
  for (const auto& name : buffers) {
    auto* b = r.add_buffers();
    b->set_name(name);
    b->add_shape(4);
    b->add_shape(8);
    b->set_dtype(3);  // F32
    b->set_byte_size(128);
  }
  return r;
}

std::unique_ptr<RefitClient> Client(
    int port, absl::Duration heartbeat_interval = absl::Milliseconds(200)) {
  RefitClient::Options o;
  o.target = absl::StrCat("127.0.0.1:", port);
  o.rpc_timeout = absl::Seconds(5);
  o.heartbeat_interval = heartbeat_interval;
  o.connect_timeout = absl::Seconds(5);
  auto c = RefitClient::Connect(o);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

struct Cluster {
  std::unique_ptr<RefitServer> server;
  std::vector<std::unique_ptr<RefitClient>> trainers, engines;
};

// 2 trainer ranks (w0 | w1), engine A with 2 ranks (w0 | w1), engine B with
// one rank holding both.
Cluster Start(RefitServer::Options opts = TestOptions()) {
  Cluster c;
  auto s = RefitServer::Start(std::move(opts));
  EXPECT_TRUE(s.ok()) << s.status();
  c.server = std::move(*s);
  const int port = c.server->port();
  for (int r = 0; r < 2; ++r) {
    c.trainers.push_back(Client(port));
    auto id = c.trainers.back()->Register(
        Reg(v1::SIDE_TRAINER, "", r, 2, {absl::StrCat("w", r)}));
    EXPECT_TRUE(id.ok()) << id.status();
  }
  for (int r = 0; r < 2; ++r) {
    c.engines.push_back(Client(port));
    auto id = c.engines.back()->Register(
        Reg(v1::SIDE_ENGINE, "A", r, 2, {absl::StrCat("w", r)}));
    EXPECT_TRUE(id.ok()) << id.status();
  }
  c.engines.push_back(Client(port));
  EXPECT_TRUE(c.engines.back()->Register(Reg(v1::SIDE_ENGINE, "B", 0, 1, {"w0", "w1"})).ok());
  return c;
}

std::vector<RefitClient*> All(Cluster& c) {
  std::vector<RefitClient*> all;
  for (auto& t : c.trainers) all.push_back(t.get());
  for (auto& e : c.engines) all.push_back(e.get());
  return all;
}

// Runs one round: trainer 0 starts, every member waits, reports, awaits.
void RunRound(Cluster& c, int64_t version, bool fail_one = false) {
  ASSERT_TRUE(c.trainers[0]->StartRound(version, In(absl::Seconds(5))).ok());
  ASSERT_TRUE(c.trainers[1]->StartRound(version, In(absl::Seconds(5))).ok());
  auto all = All(c);
  for (size_t i = 0; i < all.size(); ++i) {
    auto v = all[i]->WaitForRound(In(absl::Seconds(5)));
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(*v, version);
    if (fail_one && i == 3) {
      ASSERT_TRUE(all[i]->ReportFailed(version, "NCCL timeout", In(absl::Seconds(5))).ok());
    } else {
      absl::Status s = all[i]->ReportDone(version, {128, 0.001}, In(absl::Seconds(5)));
      // After a failure, later reports learn that the round was aborted.
      if (fail_one && i > 3) {
        EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
        EXPECT_THAT(s.message(), HasSubstr("NCCL timeout"));
      } else {
        ASSERT_TRUE(s.ok()) << s;
      }
    }
  }
}

TEST(RefitServerTest, FullFlowPlanRoundsStatus) {
  Cluster c = Start();
  auto all = All(c);
  std::set<int> global_ranks;
  for (size_t i = 0; i < all.size(); ++i) {
    auto plan = all[i]->AwaitPlan(In(absl::Seconds(5)));
    ASSERT_TRUE(plan.ok()) << plan.status();
    global_ranks.insert(plan->bootstrap().global_rank());
    EXPECT_EQ(plan->bootstrap().global_world(), 5);
    EXPECT_EQ(plan->bootstrap().num_lanes(), 2);
    EXPECT_THAT(plan->bootstrap().kv_prefix(), HasSubstr(plan->fingerprint()));
    // trainer t sends w_t to A rank t and to B: 2 messages; engines A get 1, B 2.
    const int expected = i < 2 ? 2 : (i == 4 ? 2 : 1);
    absl::StatusOr<v1::PlanProto> slice = RefitClient::Slice(*plan);
    ASSERT_TRUE(slice.ok()) << slice.status();
    EXPECT_EQ(slice->messages_size(), expected) << i;
  }
  EXPECT_EQ(global_ranks.size(), 5u);

  RunRound(c, 1);
  for (auto* m : all) EXPECT_TRUE(m->AwaitOutcome(1, In(absl::Seconds(5))).ok());
  auto v = c.engines[0]->GetEngineState("A", In(absl::Seconds(5)));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->committed, 1);

  // Versions must increase.
  EXPECT_EQ(c.trainers[0]->StartRound(1, In(absl::Seconds(5))).code(),
            absl::StatusCode::kOk);  // a late StartRound(1) of another rank
  EXPECT_EQ(c.trainers[0]->StartRound(0, In(absl::Seconds(5))).code(),
            absl::StatusCode::kInvalidArgument);
  // Engines cannot start rounds.
  EXPECT_EQ(c.engines[0]->StartRound(2, In(absl::Seconds(5))).code(),
            absl::StatusCode::kPermissionDenied);

  RunRound(c, 2, /*fail_one=*/true);
  for (auto* m : all) {
    absl::Status s = m->AwaitOutcome(2, In(absl::Seconds(5)));
    EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
    EXPECT_THAT(s.message(), HasSubstr("NCCL timeout"));
    EXPECT_THAT(s.message(), HasSubstr("engine A rank 1"));
  }
  v = c.engines[0]->GetEngineState("A", In(absl::Seconds(5)));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->committed, 1);
  // Round 2 had started on both engines: their buffers may hold part of it.
  for (const char* engine : {"A", "B"}) {
    auto torn = c.trainers[0]->GetEngineState(engine, In(absl::Seconds(5)));
    ASSERT_TRUE(torn.ok()) << torn.status();
    EXPECT_EQ(torn->committed, 1) << engine;
    EXPECT_EQ(torn->torn, 2) << engine;
  }

  RunRound(c, 3);
  for (auto* m : all) EXPECT_TRUE(m->AwaitOutcome(3, In(absl::Seconds(5))).ok());
  auto whole = c.trainers[0]->GetEngineState("A", In(absl::Seconds(5)));
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->committed, 3);
  EXPECT_EQ(whole->torn, 0);

  auto st = c.trainers[0]->GetStatus(In(absl::Seconds(5)));
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->members_size(), 5);
  EXPECT_FALSE(st->plan_fingerprint().empty());
  ASSERT_EQ(st->rounds_size(), 3);
  EXPECT_EQ(st->rounds(0).outcome(), "committed");
  // Bytes: what one engine rank received (each of the 3 reported 128), not
  // the trainers' sends added; over the slowest member's 1 ms.
  EXPECT_EQ(st->rounds(0).bytes(), 128);
  EXPECT_EQ(st->rounds(0).engine_ranks(), 3);
  EXPECT_EQ(st->rounds(0).engine_bytes(), 3 * 128);
  EXPECT_DOUBLE_EQ(st->rounds(0).bytes_per_second(), 128 / 0.001);
  EXPECT_EQ(st->rounds(1).outcome(), "aborted");
  EXPECT_EQ(st->rounds(2).version(), 3);
  ASSERT_EQ(st->engines_size(), 2);
  EXPECT_EQ(st->engines(0).engine_id(), "A");
  EXPECT_EQ(st->engines(0).committed_version(), 3);
  EXPECT_EQ(st->engines(0).torn_version(), 0);
}

TEST(RefitServerTest, RegisterRetryIsIdempotent) {
  auto s = RefitServer::Start(TestOptions());
  ASSERT_TRUE(s.ok());
  auto c = Client((*s)->port());
  auto reg = Reg(v1::SIDE_TRAINER, "", 0, 1, {"w0"});
  auto a = c->Register(reg);
  auto b = c->Register(reg);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  auto st = c->GetStatus(In(absl::Seconds(5)));
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->members_size(), 1);
}

TEST(RefitServerTest, BadRegistrationsNameTheField) {
  auto s = RefitServer::Start(TestOptions());
  ASSERT_TRUE(s.ok());
  auto c = Client((*s)->port());
  // A first member fixes the trainer's world size at 2.
  ASSERT_TRUE(c->Register(Reg(v1::SIDE_TRAINER, "", 1, 2, {"w1"})).ok());
  struct Case {
    std::function<void(v1::Registration&)> mutate;
    std::string field;
  };
  std::vector<Case> cases = {
      {[](v1::Registration& r) { r.mutable_buffers(0)->set_dtype(99); }, "buffers[0] (w0).dtype"},
      {[](v1::Registration& r) { r.mutable_buffers(0)->set_shape(1, -8); }, "buffers[0] (w0).shape[1]"},
      {[](v1::Registration& r) {
         r.mutable_buffers(0)->set_shape(0, int64_t{1} << 40);
         r.mutable_buffers(0)->set_shape(1, int64_t{1} << 40);
       }, "buffers[0] (w0).shape[1]"},
      {[](v1::Registration& r) { r.mutable_identity()->set_rank(2); }, "identity.rank"},
      {[](v1::Registration& r) { r.mutable_identity()->set_rank(-1); }, "identity.rank"},
      {[](v1::Registration& r) { *r.add_buffers() = r.buffers(0); }, "buffers[1] (w0).name"},
      {[](v1::Registration& r) {
         for (int i = 0; i < 20; ++i) r.add_buffers()->set_name(absl::StrCat("x", i));
       }, "buffers: 21 buffers exceed"},
      {[](v1::Registration& r) { r.set_model_config(std::string(5000, 'x')); }, "bytes of metadata"},
      {[](v1::Registration& r) { r.mutable_buffers(0)->set_byte_size(4); }, "buffers[0] (w0).byte_size"},
      {[](v1::Registration& r) { r.mutable_identity()->set_side(v1::SIDE_UNSPECIFIED); }, "identity.side"},
      {[](v1::Registration& r) { r.mutable_identity()->set_transport(static_cast<v1::Transport>(9)); }, "identity.transport: 9"},
      {[](v1::Registration& r) { r.mutable_identity()->set_world_size(3); r.mutable_identity()->set_rank(0); }, "identity.world_size"},
      {[](v1::Registration& r) { r.mutable_buffers(0)->set_dtype(0); }, "buffers[0] (w0).dtype: unknown dtype 0"},
      {[](v1::Registration& r) { r.mutable_buffers(0)->set_shape(0, -1); }, "buffers[0] (w0).shape[0]: negative"},
      {[](v1::Registration& r) {  // elements fit, bytes (x4) overflow
         r.mutable_buffers(0)->clear_shape();
         r.mutable_buffers(0)->add_shape(int64_t{1} << 49);
       }, "buffers[0] (w0).shape: byte size overflows"},
      {[](v1::Registration& r) { r.mutable_identity()->set_rank(7); }, "identity.rank: 7 is outside [0, world_size=2)"},
      {[](v1::Registration& r) { r.mutable_buffers(0)->set_byte_size(256); }, "buffers[0] (w0).byte_size: 256 disagrees"},
      {[](v1::Registration& r) { r.mutable_buffers(0)->set_name(""); }, "buffers[0].name"},
      {[](v1::Registration& r) {
         r.mutable_identity()->set_side(v1::SIDE_ENGINE);
         r.mutable_identity()->clear_engine_id();
       }, "identity.engine_id"},
      {[](v1::Registration& r) { r.mutable_identity()->set_job(""); }, "identity.job"},
  };
  for (const auto& k : cases) {
    auto r = Reg(v1::SIDE_TRAINER, "", 0, 2, {"w0"});
    k.mutate(r);
    auto id = c->Register(r);
    EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument) << k.field;
    EXPECT_THAT(id.status().message(), HasSubstr(k.field));
  }
}

// A client library from another refit release is refused before it can
// receive a slice it might misread; nothing of it is registered.
TEST(RefitServerTest, OtherProtocolVersionIsRefusedNamingBoth) {
  auto s = RefitServer::Start(TestOptions());
  ASSERT_TRUE(s.ok());
  auto c = Client((*s)->port());
  auto r = Reg(v1::SIDE_ENGINE, "A", 1, 2, {"w1"});
  r.set_protocol_version(kProtocolVersion + 1);
  auto id = c->Register(r);
  EXPECT_EQ(id.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(id.status().message(),
              HasSubstr(absl::StrCat("protocol_version: member engine A rank 1 "
                                     "speaks refit protocol ",
                                     kProtocolVersion + 1, ", this refitd speaks ",
                                     kProtocolVersion)));
  auto st = c->GetStatus(In(absl::Seconds(5)));
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->members_size(), 0);
  EXPECT_EQ(st->protocol_version(), kProtocolVersion);
  // Unset, the client library fills in its own version and the member joins.
  r.clear_protocol_version();
  ASSERT_TRUE(c->Register(r).ok());
}

// Colocated trainer and engine (one GPU, two processes) cannot use NCCL:
// the plan fails for everyone at once, naming both members and the GPU,
// instead of NCCL's "Duplicate GPU detected" at the first round.
TEST(RefitServerTest, TwoMembersOnOneGpuGetAPlanErrorNamingBoth) {
  auto s = RefitServer::Start(TestOptions());
  ASSERT_TRUE(s.ok());
  auto t = Client((*s)->port());
  auto e = Client((*s)->port());
  auto tr = Reg(v1::SIDE_TRAINER, "", 0, 1, {"w0"});
  auto er = Reg(v1::SIDE_ENGINE, "A", 0, 1, {"w0"});
  tr.mutable_identity()->set_device("cuda:0");
  er.mutable_identity()->set_device("cuda:3");  // CUDA_VISIBLE_DEVICES differ
  tr.mutable_identity()->set_device_uuid("GPU-0000aaaa");
  er.mutable_identity()->set_device_uuid("GPU-0000aaaa");
  ASSERT_TRUE(t->Register(tr).ok());
  ASSERT_TRUE(e->Register(er).ok());
  auto plan = e->AwaitPlan(In(absl::Seconds(5)));
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument) << plan.status();
  EXPECT_THAT(plan.status().message(),
              HasSubstr("trainer rank 0 (cuda:0) and engine A rank 0 (cuda:3) on host "
                        "host0 are on the same GPU GPU-0000aaaa"));
  // On distinct GPUs the same members plan.
  er.mutable_identity()->set_device_uuid("GPU-0000bbbb");
  ASSERT_TRUE(e->Register(er).ok());
  plan = e->AwaitPlan(In(absl::Seconds(5)));
  EXPECT_TRUE(plan.ok()) << plan.status();
}

TEST(RefitServerTest, DataPlaneTransportsMustAgreeAndIpcStaysOnOneHost) {
  auto tr = Reg(v1::SIDE_TRAINER, "", 0, 1, {"w0"});
  auto er = Reg(v1::SIDE_ENGINE, "A", 0, 1, {"w0"});
  for (auto* r : {&tr, &er}) {
    r->mutable_identity()->set_device("cuda:0");
    r->mutable_identity()->set_device_uuid("GPU-0000aaaa");
    r->mutable_identity()->set_transport(v1::TRANSPORT_PULL);
  }
  // Colocated on one GPU through CUDA IPC: fine.
  EXPECT_TRUE(CheckDataPlane({tr}, {er}).ok());
  // NCCL on one side, IPC on the other: named.
  er.mutable_identity()->set_transport(v1::TRANSPORT_NCCL);
  absl::Status s = CheckDataPlane({tr}, {er});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("trainer rank 0 uses the pull data plane and "
                                     "engine A rank 0 the nccl one"));
  // Both NCCL on one GPU: the colocation error, which points at ipc.
  tr.mutable_identity()->set_transport(v1::TRANSPORT_NCCL);
  s = CheckDataPlane({tr}, {er});
  EXPECT_THAT(s.message(), HasSubstr("are on the same GPU GPU-0000aaaa"));
  EXPECT_THAT(s.message(), HasSubstr("transport \"pull\""));
  // IPC across hosts: fine here (pairs across hosts go over NCCL, checked
  // per pair after planning: plan_assembly_test).
  tr.mutable_identity()->set_transport(v1::TRANSPORT_PULL);
  er.mutable_identity()->set_transport(v1::TRANSPORT_PULL);
  er.mutable_identity()->set_host_id("host1");
  EXPECT_TRUE(CheckDataPlane({tr}, {er}).ok());
}

TEST(RefitServerTest, MissingProtocolVersionIsNamed) {
  auto r = Reg(v1::SIDE_TRAINER, "", 0, 1, {"w0"});
  absl::Status s = CheckProtocolVersion(r);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("trainer rank 0 speaks no refit protocol version"));
  r.set_protocol_version(kProtocolVersion);
  EXPECT_TRUE(CheckProtocolVersion(r).ok());
}

TEST(RefitServerTest, RegistrationAtTheLimitsIsAccepted) {
  // 16 buffers (the limit) and metadata just under max_metadata_bytes pass;
  // one more buffer or one more byte is refused, naming the limit.
  std::vector<std::string> names;
  for (int i = 0; i < 16; ++i) names.push_back(absl::StrCat("w", i));
  auto reg = Reg(v1::SIDE_TRAINER, "", 0, 1, names);
  EXPECT_TRUE(ValidateRegistration(reg, 16, 4096).ok());
  const int64_t size = static_cast<int64_t>(reg.ByteSizeLong());
  EXPECT_TRUE(ValidateRegistration(reg, 16, size).ok());
  absl::Status s = ValidateRegistration(reg, 16, size - 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("bytes of metadata exceed the limit"));
  s = ValidateRegistration(reg, 15, 4096);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("buffers: 16 buffers exceed the limit of 15"));
}

TEST(RefitServerTest, InvalidPlanIsReportedToEveryMember) {
  auto s = RefitServer::Start(TestOptions());
  ASSERT_TRUE(s.ok());
  auto t = Client((*s)->port());
  auto e = Client((*s)->port());
  ASSERT_TRUE(t->Register(Reg(v1::SIDE_TRAINER, "", 0, 1, {"w0"})).ok());
  ASSERT_TRUE(e->Register(Reg(v1::SIDE_ENGINE, "A", 0, 1, {"w0", "lm_head"})).ok());
  for (auto* m : {t.get(), e.get()}) {
    auto p = m->AwaitPlan(In(absl::Seconds(5)));
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(p.status().message(), HasSubstr("lm_head"));
  }
  EXPECT_EQ(t->StartRound(1, In(absl::Seconds(5))).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(RefitServerTest, AwaitPlanHonoursItsDeadline) {
  auto s = RefitServer::Start(TestOptions());
  ASSERT_TRUE(s.ok());
  auto t = Client((*s)->port());
  ASSERT_TRUE(t->Register(Reg(v1::SIDE_TRAINER, "", 0, 2, {"w0"})).ok());
  const absl::Time begin = absl::Now();
  auto p = t->AwaitPlan(In(absl::Milliseconds(300)));
  EXPECT_EQ(p.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(absl::Now() - begin, absl::Seconds(2));
  auto r = t->WaitForRound(In(absl::Milliseconds(100)));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(RefitServerTest, KvStoreSetGetWait) {
  auto s = RefitServer::Start(TestOptions());
  ASSERT_TRUE(s.ok());
  auto a = Client((*s)->port());
  auto b = Client((*s)->port());
  // Keys are set by members (each owns its keys); members read them.
  ASSERT_TRUE(a->Register(Reg(v1::SIDE_TRAINER, "", 0, 1, {"w0"})).ok());
  ASSERT_TRUE(b->Register(Reg(v1::SIDE_ENGINE, "A", 0, 1, {"w0"})).ok());
  GrpcKvStore ka(a.get(), "p/"), kb(b.get(), "p/");
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(200));
    EXPECT_TRUE(ka.Set("nccl/lane0", std::string("\0id\xff", 4)).ok());
  });
  auto v = kb.Get("nccl/lane0", absl::Seconds(5));  // waits for the setter
  setter.join();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, std::string("\0id\xff", 4));
  const absl::Time begin = absl::Now();
  auto missing = kb.Get("nccl/lane1", absl::Milliseconds(200));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(missing.status().message(), HasSubstr("p/nccl/lane1"));
  EXPECT_LT(absl::Now() - begin, absl::Seconds(2));
}

TEST(RefitServerTest, EngineJoiningAndLeavingBetweenRoundsGetsNewPlan) {
  Cluster c = Start();
  auto all = All(c);
  std::string fp;
  for (auto* m : all) {
    auto p = m->AwaitPlan(In(absl::Seconds(5)));
    ASSERT_TRUE(p.ok());
    fp = p->fingerprint();
  }
  RunRound(c, 1);
  ASSERT_TRUE(c.trainers[0]->AwaitOutcome(1, In(absl::Seconds(5))).ok());

  // Engine C joins.
  auto joiner = Client(c.server->port());
  ASSERT_TRUE(joiner->Register(Reg(v1::SIDE_ENGINE, "C", 0, 1, {"w0", "w1"})).ok());
  auto jp = joiner->AwaitPlan(In(absl::Seconds(5)));
  ASSERT_TRUE(jp.ok()) << jp.status();
  EXPECT_NE(jp->fingerprint(), fp);
  EXPECT_EQ(jp->bootstrap().global_world(), 6);
  EXPECT_EQ(jp->bootstrap().engine_index(), 2);
  const absl::Time until = In(absl::Seconds(5));
  while (!c.trainers[0]->PlanChanged() && absl::Now() < until) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_TRUE(c.trainers[0]->PlanChanged());
  for (auto* m : all) {
    auto p = m->AwaitPlan(In(absl::Seconds(5)));
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p->fingerprint(), jp->fingerprint());
  }
  c.engines.push_back(std::move(joiner));
  RunRound(c, 2);
  ASSERT_TRUE(c.trainers[0]->AwaitOutcome(2, In(absl::Seconds(5))).ok());
  auto cv = c.trainers[0]->GetEngineState("C", In(absl::Seconds(5)));
  ASSERT_TRUE(cv.ok()) << cv.status();
  EXPECT_EQ(cv->committed, 2);

  // Engine C leaves: the plan returns to the original one (cached).
  ASSERT_TRUE(c.engines.back()->Leave(In(absl::Seconds(5))).ok());
  c.engines.pop_back();
  for (auto* m : All(c)) {
    auto p = m->AwaitPlan(In(absl::Seconds(5)));
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p->fingerprint(), fp);
  }
  RunRound(c, 3);
  ASSERT_TRUE(c.trainers[0]->AwaitOutcome(3, In(absl::Seconds(5))).ok());
}

TEST(RefitServerTest, DroppedStreamAbortsTheRoundForEveryone) {
  Cluster c = Start();
  for (auto* m : All(c)) ASSERT_TRUE(m->AwaitPlan(In(absl::Seconds(5))).ok());
  ASSERT_TRUE(c.trainers[0]->StartRound(1, In(absl::Seconds(5))).ok());
  const absl::Time begin = absl::Now();
  c.engines[2].reset();  // engine B's process "dies": stream and heartbeats stop
  for (int i = 0; i < 2; ++i) {
    absl::Status s = c.engines[i]->AwaitOutcome(1, In(absl::Seconds(5)));
    EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
    EXPECT_THAT(s.message(), HasSubstr("engine B rank 0"));
  }
  EXPECT_LT(absl::Now() - begin, absl::Seconds(2));
}

// How many times the plan function runs while engine C joins the cluster
// and leaves again, with the given plan cache budget.
int PlansBuiltWhenAnEngineComesAndGoes(int64_t max_plan_cache_bytes) {
  auto calls = std::make_shared<std::atomic<int>>(0);
  RefitServer::Options o = TestOptions();
  o.coordinator.max_plan_cache_bytes = max_plan_cache_bytes;
  o.coordinator.plan_function = [calls](const std::vector<v1::Registration>& t,
                            const std::vector<v1::Registration>& e) {
    ++*calls;
    return NameMatchingPlan(t, e);
  };
  Cluster c = Start(std::move(o));
  for (auto* m : All(c)) EXPECT_TRUE(m->AwaitPlan(In(absl::Seconds(5))).ok());
  // Counted from here: how many members joined within the settle window
  // while Start registered them (a slow machine plans more) is not the point.
  const int before = calls->load();
  auto joiner = Client(c.server->port());
  EXPECT_TRUE(joiner->Register(Reg(v1::SIDE_ENGINE, "C", 0, 1, {"w0", "w1"})).ok());
  EXPECT_TRUE(joiner->AwaitPlan(In(absl::Seconds(5))).ok());
  EXPECT_TRUE(joiner->Leave(In(absl::Seconds(5))).ok());
  // Leave changed the membership before it returned: this waits for the
  // plan of the membership without C.
  EXPECT_TRUE(c.trainers[0]->AwaitPlan(In(absl::Seconds(5))).ok());
  return calls->load() - before;
}

// A membership seen before gets its cached plan; a cache budget too small
// for two plans keeps only the newest, and the old one is planned again.
TEST(RefitServerTest, PlanCacheIsBoundedByBytes) {
  EXPECT_EQ(PlansBuiltWhenAnEngineComesAndGoes(int64_t{1} << 30), 1);
  EXPECT_EQ(PlansBuiltWhenAnEngineComesAndGoes(1), 2);
}

// Members and status see the plan function's fingerprint of the plan (not
// the registrations' one), and the data-plane keys live under it.
TEST(RefitServerTest, MembersSeeThePlansOwnFingerprint) {
  RefitServer::Options o = TestOptions();
  o.coordinator.plan_function = [](const std::vector<v1::Registration>& t,
                       const std::vector<v1::Registration>& e) {
    absl::StatusOr<BuiltPlan> p = NameMatchingPlan(t, e);
    if (p.ok()) p->fingerprint = "0123456789abcdef0123456789abcdef";
    return p;
  };
  Cluster c = Start(std::move(o));
  for (auto* m : All(c)) {
    auto p = m->AwaitPlan(In(absl::Seconds(5)));
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->fingerprint(), "0123456789abcdef0123456789abcdef");
    EXPECT_THAT(p->bootstrap().kv_prefix(), HasSubstr(p->fingerprint()));
  }
  auto st = c.trainers[0]->GetStatus(In(absl::Seconds(5)));
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->plan_fingerprint(), "0123456789abcdef0123456789abcdef");
}

// A member that stops heart-beating while its process and stream live on (a
// long pause, a partition healed too late) is removed, and learns it at
// once: its round stream ends with the reason.
TEST(RefitServerTest, ExpiredMemberLearnsItWasRemoved) {
  RefitServer::Options o = TestOptions();
  o.coordinator.heartbeat_timeout = absl::Milliseconds(500);
  auto s = RefitServer::Start(std::move(o));
  ASSERT_TRUE(s.ok()) << s.status();
  auto alive = Client((*s)->port());
  ASSERT_TRUE(alive->Register(Reg(v1::SIDE_TRAINER, "", 0, 1, {"w0"})).ok());
  auto paused = Client((*s)->port(), absl::Hours(1));
  ASSERT_TRUE(paused->Register(Reg(v1::SIDE_ENGINE, "A", 0, 1, {"w0"})).ok());
  const absl::Time begin = absl::Now();
  auto v = paused->WaitForRound(In(absl::Seconds(10)));
  EXPECT_EQ(v.status().code(), absl::StatusCode::kUnavailable) << v.status();
  EXPECT_THAT(v.status().message(), HasSubstr("stopped heart-beating"));
  EXPECT_LT(absl::Now() - begin, absl::Seconds(5));
  // The member that kept heart-beating is still there.
  auto st = alive->GetStatus(In(absl::Seconds(5)));
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->members_size(), 1);
}

// refitd keeps nothing across a restart: the members' registrations rebuild
// it. Each member learns at once that refitd went away, Rejoin waits for it
// to come back (bounded), and the next round commits with the same plan.
TEST(RefitServerTest, MembersRejoinARestartedRefitd) {
  // Below the ephemeral range: no other test takes it while refitd is down.
  absl::StatusOr<int> free_port = RestartablePort();
  ASSERT_TRUE(free_port.ok()) << free_port.status();
  RefitServer::Options first = TestOptions();
  first.address = absl::StrCat("127.0.0.1:", *free_port);
  Cluster c = Start(std::move(first));
  auto all = All(c);
  std::string fingerprint;
  for (auto* m : all) {
    auto plan = m->AwaitPlan(In(absl::Seconds(5)));
    ASSERT_TRUE(plan.ok()) << plan.status();
    fingerprint = plan->fingerprint();
  }
  RunRound(c, 1);
  for (auto* m : all) ASSERT_TRUE(m->AwaitOutcome(1, In(absl::Seconds(5))).ok());

  const int port = c.server->port();
  c.server->Shutdown();
  c.server.reset();
  const absl::Time gone = absl::Now();
  for (auto* m : all) {
    auto v = m->WaitForRound(In(absl::Seconds(10)));
    EXPECT_EQ(v.status().code(), absl::StatusCode::kUnavailable) << v.status();
    EXPECT_THAT(v.status().message(), HasSubstr("Rejoin"));
  }
  EXPECT_LT(absl::Now() - gone, absl::Seconds(3));
  // Not back yet: Rejoin gives up at its deadline, naming refitd.
  const absl::Time early = absl::Now();
  absl::Status s = all[0]->Rejoin(In(absl::Milliseconds(700)));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("127.0.0.1:", port)));
  EXPECT_LT(absl::Now() - early, absl::Seconds(3));

  RefitServer::Options o = TestOptions();
  o.address = absl::StrCat("127.0.0.1:", port);
  auto back = RefitServer::Start(std::move(o));
  ASSERT_TRUE(back.ok()) << back.status();
  c.server = std::move(*back);
  for (auto* m : all) {
    ASSERT_TRUE(m->Rejoin(In(absl::Seconds(10))).ok());
    EXPECT_TRUE(m->PlanChanged());
  }
  for (auto* m : all) {
    auto plan = m->AwaitPlan(In(absl::Seconds(5)));
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->fingerprint(), fingerprint);
  }
  RunRound(c, 2);
  for (auto* m : all) EXPECT_TRUE(m->AwaitOutcome(2, In(absl::Seconds(5))).ok());
  auto st = c.trainers[0]->GetStatus(In(absl::Seconds(5)));
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->members_size(), 5);
  ASSERT_EQ(st->rounds_size(), 1);
  EXPECT_EQ(st->rounds(0).version(), 2);
  EXPECT_EQ(st->rounds(0).outcome(), "committed");
}

TEST(RefitServerTest, RejoinNeedsARegistrationAndTakesAnExpiredMemberBack) {
  RefitServer::Options o = TestOptions();
  o.coordinator.heartbeat_timeout = absl::Milliseconds(500);
  auto s = RefitServer::Start(std::move(o));
  ASSERT_TRUE(s.ok()) << s.status();
  auto never = Client((*s)->port());
  EXPECT_EQ(never->Rejoin(In(absl::Seconds(1))).code(),
            absl::StatusCode::kFailedPrecondition);
  auto paused = Client((*s)->port(), absl::Hours(1));
  ASSERT_TRUE(paused->Register(Reg(v1::SIDE_ENGINE, "A", 0, 1, {"w0"})).ok());
  auto v = paused->WaitForRound(In(absl::Seconds(10)));
  ASSERT_EQ(v.status().code(), absl::StatusCode::kUnavailable) << v.status();
  auto st = never->GetStatus(In(absl::Seconds(5)));
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->members_size(), 0);
  ASSERT_TRUE(paused->Rejoin(In(absl::Seconds(5))).ok());
  st = never->GetStatus(In(absl::Seconds(5)));
  ASSERT_TRUE(st.ok());
  ASSERT_EQ(st->members_size(), 1);
  EXPECT_EQ(st->members(0).member_id(), paused->member_id());
}

TEST(RefitServerTest, StartRefusesInsecureNonLoopbackAndMissingPlanner) {
  auto o = TestOptions();
  o.address = "0.0.0.0:0";
  auto s = RefitServer::Start(std::move(o));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("options.address"));
  RefitServer::Options o2;
  EXPECT_EQ(RefitServer::Start(std::move(o2)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace refit

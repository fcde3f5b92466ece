// `refit plan` builds the plan refitd builds: refitd with its default plan
// function on 127.0.0.1:0, members that report their hosts, and the dry run
// given the same hosts (as a file and as the shorthand) agree on the plan
// fingerprint; another placement gives another plan.
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/refit_client.h"
#include "gtest/gtest.h"
#include "mapping/layout_builder.h"
#include "mapping/mapping.h"
#include "mapping/model_config.h"
#include "mapping/parallel_spec.h"
#include "nlohmann/json.hpp"
#include "server/default_plan.h"
#include "server/refit_server.h"
#include "tools/cli/plan_command.h"

namespace refit {
namespace {

constexpr char kModel[] = "tiny-qwen3";
constexpr char kTrainer[] = "megatron:tp=2,dp=2";
constexpr char kEngine[] = "vllm:tp=2,dp=2";

// The registration of a member of `convention` at `rank` on `host`: the
// buffers the mapping expects of it.
v1::Registration Member(bool trainer, const std::string& convention, int rank,
                        const std::string& host) {
  absl::StatusOr<ModelConfig> model = LoadModelConfig(kModel);
  EXPECT_TRUE(model.ok()) << model.status();
  absl::StatusOr<MappedSide> side = BuildSideLayout(*model, trainer, convention);
  EXPECT_TRUE(side.ok()) << side.status();
  v1::Registration r;
  v1::MemberIdentity* id = r.mutable_identity();
  id->set_job("job");
  id->set_side(trainer ? v1::SIDE_TRAINER : v1::SIDE_ENGINE);
  id->set_engine_id(trainer ? "" : "e");
  id->set_rank(rank);
  id->set_world_size(side->layout.world_size);
  id->set_host_id(host);
  id->set_device("cpu");
  r.set_model_config(kModel);
  r.set_convention(convention);
  for (const LocalBuffer& lb : RankBuffers(*side, rank)) {
    v1::LocalBuffer* b = r.add_buffers();
    b->set_name(lb.name);
    for (int64_t d : lb.shape) b->add_shape(d);
    b->set_dtype(static_cast<int32_t>(lb.dtype));
    b->set_byte_size(lb.byte_size);
  }
  return r;
}

// Starts refitd, registers 4 trainer and 4 engine ranks on the given hosts
// and returns the fingerprint of the plan it hands out.
std::string RefitdFingerprint(const std::vector<std::string>& trainer_hosts,
                              const std::vector<std::string>& engine_hosts) {
  RefitServer::Options o;
  o.plan_function = DefaultPlanFunction();
  o.heartbeat_timeout = absl::Seconds(5);
  auto server = RefitServer::Start(std::move(o));
  EXPECT_TRUE(server.ok()) << server.status();
  if (!server.ok()) return "";
  std::vector<std::unique_ptr<RefitClient>> clients;
  for (int side = 0; side < 2; ++side) {
    const auto& hosts = side == 0 ? trainer_hosts : engine_hosts;
    for (int r = 0; r < static_cast<int>(hosts.size()); ++r) {
      RefitClient::Options co;
      co.target = absl::StrCat("127.0.0.1:", (*server)->port());
      co.rpc_timeout = absl::Seconds(10);
      co.connect_timeout = absl::Seconds(10);
      auto c = RefitClient::Connect(co);
      EXPECT_TRUE(c.ok()) << c.status();
      if (!c.ok()) return "";
      auto id = (*c)->Register(
          Member(side == 0, side == 0 ? kTrainer : kEngine, r, hosts[r]));
      EXPECT_TRUE(id.ok()) << id.status();
      clients.push_back(std::move(*c));
    }
  }
  auto plan = clients[0]->AwaitPlan(absl::Now() + absl::Seconds(30));
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? plan->fingerprint() : "";
}

// `refit plan --json` with `opt`'s placement; returns its fingerprint.
std::string DryRunFingerprint(PlanCommandOptions opt) {
  opt.model = kModel;
  opt.trainer = kTrainer;
  opt.engine = kEngine;
  opt.json = true;
  auto out = RunPlanCommand(opt);
  EXPECT_TRUE(out.ok()) << out.status();
  if (!out.ok()) return "";
  auto j = nlohmann::json::parse(*out);
  EXPECT_EQ(j["model"], kModel);
  EXPECT_GT(j["lower_bound_seconds"].get<double>(), 0);
  return j["fingerprint"].get<std::string>();
}

std::string HostsFile(const std::vector<std::string>& trainer,
                      const std::vector<std::string>& engine) {
  const std::string path =
      absl::StrCat(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp",
                   "/hosts_", trainer[0], engine[0], ".txt");
  std::ofstream f(path);
  f << "# rank placement\n";
  for (size_t r = 0; r < trainer.size(); ++r) f << "trainer " << r << " " << trainer[r] << "\n";
  for (size_t r = 0; r < engine.size(); ++r) f << "engine " << r << "  " << engine[r] << "\n";
  return path;
}

TEST(PlanMatchesRefitdTest, SameHostsGiveTheSameFingerprint) {
  // Colocated on two hosts: each trainer and engine replica on one host.
  const std::vector<std::string> trainer = {"gpu-a", "gpu-a", "gpu-b", "gpu-b"};
  const std::vector<std::string> engine = {"gpu-a", "gpu-a", "gpu-b", "gpu-b"};
  const std::string refitd = RefitdFingerprint(trainer, engine);
  ASSERT_FALSE(refitd.empty());

  PlanCommandOptions by_file;
  by_file.hosts_file = HostsFile(trainer, engine);
  EXPECT_EQ(DryRunFingerprint(by_file), refitd);

  PlanCommandOptions shorthand;
  shorthand.link.gpus_per_host = 2;
  shorthand.link.colocated = true;
  EXPECT_EQ(DryRunFingerprint(shorthand), refitd);

  // Replicas crossed over (engine replica 0 on trainer replica 1's host):
  // another plan, and again the same on both.
  const std::vector<std::string> crossed = {"gpu-b", "gpu-b", "gpu-a", "gpu-a"};
  const std::string refitd_crossed = RefitdFingerprint(trainer, crossed);
  EXPECT_NE(refitd_crossed, refitd);
  PlanCommandOptions crossed_file;
  crossed_file.hosts_file = HostsFile(trainer, crossed);
  EXPECT_EQ(DryRunFingerprint(crossed_file), refitd_crossed);
}

TEST(PlanMatchesRefitdTest, HostsFileErrorsNameTheLineOrRank) {
  auto missing = ParseHostsFile("trainer 0 a\nengine 0 a\n", 2, 1);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("trainer rank 1"), std::string::npos);
  auto twice = ParseHostsFile("trainer 0 a\ntrainer 0 b\n", 1, 0);
  EXPECT_NE(twice.status().message().find("line 2"), std::string::npos);
  auto range = ParseHostsFile("engine 3 a\n", 0, 2);
  EXPECT_NE(range.status().message().find("line 1"), std::string::npos);
  auto bad = ParseHostsFile("gpu 0 a\n", 1, 1);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  auto ok = ParseHostsFile("# x\n\ntrainer 0 h1\nengine 0\th2\n", 1, 1);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->trainer_hosts, std::vector<std::string>{"h1"});
  EXPECT_EQ(ok->engine_hosts, std::vector<std::string>{"h2"});
}

}  // namespace
}  // namespace refit

// `refit plan` builds the plan refitd builds: refitd with its default plan
// function on 127.0.0.1:0, members that report their hosts (and GPUs), and
// the dry run given the same hosts and GPUs (as a file and as the
// shorthand) agree on the plan fingerprint; another placement gives another
// plan.
#include <fstream>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/refit_client.h"
#include "gtest/gtest.h"
#include "mapping/layout_builder.h"
#include "mapping/mapping.h"
#include "mapping/model_config.h"
#include "mapping/parallel_spec.h"
#include "nlohmann/json.hpp"
#include "server/default_plan.h"
#include "server/refit_server.h"
#include "cli/plan_command.h"

namespace refit {
namespace {

constexpr char kModel[] = "tiny-qwen3";
constexpr char kTrainer[] = "megatron:tp=2,dp=2";
constexpr char kEngine[] = "vllm:tp=2,dp=2";

// A model with its trainer and engine conventions.
struct Job {
  std::string model = kModel;
  std::string trainer = kTrainer;
  std::string engine = kEngine;
  bool delta = false;  // refitd --delta
};

// The registration of a member of `convention` at `rank` on `host`: the
// buffers the mapping expects of it. With a `gpu` (a device UUID), the
// member is on that GPU and uses the colocated pull path (members sharing a
// GPU are what it is for).
v1::Registration Member(const std::string& model_name, bool trainer,
                        const std::string& convention, int rank, const std::string& host,
                        const std::string& gpu, const std::string& engine_id = "e") {
  absl::StatusOr<ModelConfig> model = LoadModelConfig(model_name);
  EXPECT_TRUE(model.ok()) << model.status();
  absl::StatusOr<MappedSide> side = BuildSideLayout(*model, trainer, convention);
  EXPECT_TRUE(side.ok()) << side.status();
  v1::Registration r;
  v1::MemberIdentity* id = r.mutable_identity();
  id->set_job("job");
  id->set_side(trainer ? v1::SIDE_TRAINER : v1::SIDE_ENGINE);
  id->set_engine_id(trainer ? "" : engine_id);
  id->set_rank(rank);
  id->set_world_size(side->layout.world_size);
  id->set_host_id(host);
  id->set_device(gpu.empty() ? "cpu" : absl::StrCat("cuda:", rank % 2));
  if (!gpu.empty()) {
    id->set_device_uuid(gpu);
    id->set_transport(v1::TRANSPORT_IPC);
  }
  r.set_model_config(model_name);
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

// Starts refitd, registers the trainer and engine ranks on the given hosts
// (and GPUs, when given; one a rank, engines' ranks one engine after the
// other, as in a hosts file) and returns the fingerprint of the plan it
// hands out; `relay`: refitd --relay=on. Several engines (job.engine
// joined by ';') register as engines "e0", "e1", ...
std::string RefitdFingerprint(const std::vector<std::string>& trainer_hosts,
                              const std::vector<std::string>& engine_hosts,
                              const std::vector<std::string>& trainer_gpus = {},
                              const std::vector<std::string>& engine_gpus = {},
                              bool relay = false, const Job& job = Job()) {
  RefitServer::Options o;
  DefaultPlanOptions plan_options;
  plan_options.planner.relay = relay;
  plan_options.planner.delta = job.delta;
  o.coordinator.plan_function = DefaultPlanFunction(plan_options);
  o.coordinator.heartbeat_timeout = absl::Seconds(5);
  auto server = RefitServer::Start(std::move(o));
  EXPECT_TRUE(server.ok()) << server.status();
  if (!server.ok()) return "";
  // (engine id, convention, first global rank) of each engine.
  std::vector<std::tuple<std::string, std::string, int>> engines;
  const std::vector<std::string> specs = absl::StrSplit(job.engine, ';');
  for (size_t k = 0, first = 0; k < specs.size(); ++k) {
    engines.emplace_back(specs.size() == 1 ? "e" : absl::StrCat("e", k), specs[k], first);
    first += ParseEngineSpec(specs[k]).value().world_size();
  }
  std::vector<std::unique_ptr<RefitClient>> clients;
  for (int side = 0; side < 2; ++side) {
    const auto& hosts = side == 0 ? trainer_hosts : engine_hosts;
    const auto& gpus = side == 0 ? trainer_gpus : engine_gpus;
    for (int g = 0; g < static_cast<int>(hosts.size()); ++g) {
      // The engine of global engine rank g, and g's rank in it.
      size_t k = 0;
      while (side == 1 && k + 1 < engines.size() && std::get<2>(engines[k + 1]) <= g) ++k;
      const int r = side == 0 ? g : g - std::get<2>(engines[k]);
      RefitClient::Options co;
      co.target = absl::StrCat("127.0.0.1:", (*server)->port());
      co.rpc_timeout = absl::Seconds(10);
      co.connect_timeout = absl::Seconds(10);
      auto c = RefitClient::Connect(co);
      EXPECT_TRUE(c.ok()) << c.status();
      if (!c.ok()) return "";
      auto id = (*c)->Register(Member(job.model, side == 0,
                                      side == 0 ? job.trainer : std::get<1>(engines[k]), r,
                                      hosts[g], gpus.empty() ? "" : gpus[g],
                                      std::get<0>(engines[k])));
      EXPECT_TRUE(id.ok()) << id.status();
      clients.push_back(std::move(*c));
    }
  }
  auto plan = clients[0]->AwaitPlan(absl::Now() + absl::Seconds(30));
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? plan->fingerprint() : "";
}

// `refit plan --json` of `job` with `opt`'s placement; returns its
// fingerprint, and its JSON in *json when given.
std::string DryRunFingerprint(PlanCommandOptions opt, const Job& job = Job(),
                              nlohmann::json* json = nullptr) {
  opt.model = job.model;
  opt.trainer = job.trainer;
  opt.engine = job.engine;
  opt.json = true;
  auto out = RunPlanCommand(opt);
  EXPECT_TRUE(out.ok()) << out.status();
  if (!out.ok()) return "";
  auto j = nlohmann::json::parse(*out);
  if (json != nullptr) *json = j;
  EXPECT_EQ(j["model"], job.model);
  EXPECT_EQ(j["relay"].get<bool>(), opt.relay);
  EXPECT_GT(j["lower_bound_seconds"].get<double>(), 0);
  return j["fingerprint"].get<std::string>();
}

// Writes a --hosts file (GPUs when given) and returns its path.
std::string HostsFile(const std::vector<std::string>& trainer,
                      const std::vector<std::string>& engine,
                      const std::vector<std::string>& trainer_gpus = {},
                      const std::vector<std::string>& engine_gpus = {}) {
  const std::string path =
      absl::StrCat(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp", "/hosts_",
                   trainer[0], engine[0], trainer_gpus.empty() ? "" : "_gpus", ".txt");
  std::ofstream f(path);
  f << "# rank placement\n";
  for (size_t r = 0; r < trainer.size(); ++r) {
    f << "trainer " << r << " " << trainer[r]
      << (trainer_gpus.empty() ? "" : " " + trainer_gpus[r]) << "\n";
  }
  for (size_t r = 0; r < engine.size(); ++r) {
    f << "engine " << r << "  " << engine[r]
      << (engine_gpus.empty() ? "" : "\t" + engine_gpus[r]) << "\n";
  }
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

  // Replicas crossed over (engine replica 0 on trainer replica 1's host):
  // another plan, and again the same on both.
  const std::vector<std::string> crossed = {"gpu-b", "gpu-b", "gpu-a", "gpu-a"};
  const std::string refitd_crossed = RefitdFingerprint(trainer, crossed);
  EXPECT_NE(refitd_crossed, refitd);
  PlanCommandOptions crossed_file;
  crossed_file.hosts_file = HostsFile(trainer, crossed);
  EXPECT_EQ(DryRunFingerprint(crossed_file), refitd_crossed);

  // refitd --delta and `refit plan --delta`: the plan of delta rounds
  // (waves within half a lane), the same on both and not the dense one.
  Job delta_job;
  delta_job.delta = true;
  const std::string refitd_delta = RefitdFingerprint(trainer, engine, {}, {}, false, delta_job);
  ASSERT_FALSE(refitd_delta.empty());
  EXPECT_NE(refitd_delta, refitd);
  by_file.delta = 0.02;
  EXPECT_EQ(DryRunFingerprint(by_file), refitd_delta);
}

TEST(PlanMatchesRefitdTest, SameHostsAndGpusGiveTheSameFingerprint) {
  // Colocated on two hosts of two GPUs: engine rank r on trainer rank r's
  // GPU, as members on GPUs report them (device UUIDs).
  const std::vector<std::string> hosts = {"node-a", "node-a", "node-b", "node-b"};
  const std::vector<std::string> gpus = {"GPU-0a", "GPU-1a", "GPU-0b", "GPU-1b"};
  const std::string refitd = RefitdFingerprint(hosts, hosts, gpus, gpus);
  ASSERT_FALSE(refitd.empty());
  // The GPUs are part of the plan: without them it is another.
  EXPECT_NE(refitd, RefitdFingerprint(hosts, hosts));

  PlanCommandOptions by_file;
  by_file.hosts_file = HostsFile(hosts, hosts, gpus, gpus);
  EXPECT_EQ(DryRunFingerprint(by_file), refitd);

  // --colocated --gpus-per-host 2 is that placement.
  PlanCommandOptions shorthand;
  shorthand.link.gpus_per_host = 2;
  shorthand.link.colocated = true;
  EXPECT_EQ(DryRunFingerprint(shorthand), refitd);

  // Engine ranks on their host's other GPU: another plan, the same on both.
  const std::vector<std::string> swapped = {"GPU-1a", "GPU-0a", "GPU-1b", "GPU-0b"};
  const std::string refitd_swapped = RefitdFingerprint(hosts, hosts, gpus, swapped);
  EXPECT_NE(refitd_swapped, refitd);
  PlanCommandOptions swapped_file;
  swapped_file.hosts_file = HostsFile(hosts, hosts, gpus, swapped);
  EXPECT_EQ(DryRunFingerprint(swapped_file), refitd_swapped);
}

TEST(PlanMatchesRefitdTest, QuantizedEnginesGiveTheSameFingerprintAndOnePassDecision) {
  // FSDP's flat shards into DeepGEMM's requantized FP8, colocated on one
  // host of four GPUs: the plan records which conversions run in one pass
  // (whole tiles) and which in two (cut tiles); refitd and the dry run
  // build the same plan.
  Job job;
  job.model = "tiny-qwen3-moe-b128";
  job.trainer = "fsdp:dp=4";
  job.engine = "vllm:tp=2,dp=2,quant=fp8,kernel=deepgemm";
  const std::vector<std::string> hosts = {"node-q", "node-q", "node-q", "node-q"};
  const std::vector<std::string> gpus = {"GPU-0q", "GPU-1q", "GPU-2q", "GPU-3q"};
  const std::string refitd = RefitdFingerprint(hosts, hosts, gpus, gpus, false, job);
  ASSERT_FALSE(refitd.empty());
  PlanCommandOptions by_file;
  by_file.hosts_file = HostsFile(hosts, hosts, gpus, gpus);
  nlohmann::json j;
  EXPECT_EQ(DryRunFingerprint(by_file, job, &j), refitd);
  const nlohmann::json& passes = j["conversion_passes"]["fp8_block_requant_ue8m0"];
  EXPECT_GT(passes["one_pass"].get<int>(), 0) << j["conversion_passes"];
  EXPECT_GT(passes["two_passes"].get<int>(), 0) << j["conversion_passes"];
  // Without kernel=deepgemm every cut tile runs in one pass: another plan.
  job.engine = "vllm:tp=2,dp=2,quant=fp8";
  const std::string refitd_fp8 = RefitdFingerprint(hosts, hosts, gpus, gpus, false, job);
  EXPECT_NE(refitd_fp8, refitd);
  EXPECT_EQ(DryRunFingerprint(by_file, job, &j), refitd_fp8);
  EXPECT_EQ(j["conversion_passes"]["fp8_block"]["two_passes"].get<int>(), 0)
      << j["conversion_passes"];
}

TEST(PlanMatchesRefitdTest, RelaysGiveTheSameFingerprint) {
  // Trainer on one host, the two engine replicas on two others: with
  // --relay=on the trainer sends each byte once and one replica forwards
  // it to the other; refitd and the dry run build that same plan.
  const std::vector<std::string> trainer = {"t", "t", "t", "t"};
  const std::vector<std::string> engine = {"e0", "e0", "e1", "e1"};
  const std::string refitd = RefitdFingerprint(trainer, engine, {}, {}, /*relay=*/true);
  ASSERT_FALSE(refitd.empty());
  EXPECT_NE(refitd, RefitdFingerprint(trainer, engine));
  PlanCommandOptions by_file;
  by_file.hosts_file = HostsFile(trainer, engine);
  by_file.relay = true;
  EXPECT_EQ(DryRunFingerprint(by_file), refitd);
  // Delta rounds relay too (refitd --delta --relay=on): the same plan as
  // `refit plan --delta`, its waves within half a lane.
  Job delta_job;
  delta_job.delta = true;
  const std::string refitd_delta =
      RefitdFingerprint(trainer, engine, {}, {}, /*relay=*/true, delta_job);
  ASSERT_FALSE(refitd_delta.empty());
  by_file.delta = 0.02;
  EXPECT_EQ(DryRunFingerprint(by_file), refitd_delta);
  by_file.delta = -1;
  by_file.relay = false;
  EXPECT_NE(DryRunFingerprint(by_file), refitd);
}

TEST(PlanMatchesRefitdTest, SubRegionRelaysGiveTheSameFingerprint) {
  // A TP2 trainer feeding a TP2 replica and two TP4 replicas (two engines),
  // each replica on hosts of its own: with --relay=on the TP2 replica
  // forwards the TP4 ones sub-regions of what it received; refitd and the
  // dry run build that same plan.
  Job job;
  job.trainer = "megatron:tp=2";
  job.engine = "vllm:tp=2;vllm:tp=4,dp=2";
  const std::vector<std::string> trainer = {"t", "t"};
  const std::vector<std::string> engine = {"e0", "e0", "e1", "e1", "e1", "e1",
                                           "e2", "e2", "e2", "e2"};
  const std::string refitd = RefitdFingerprint(trainer, engine, {}, {}, /*relay=*/true, job);
  ASSERT_FALSE(refitd.empty());
  PlanCommandOptions by_file;
  by_file.hosts_file = HostsFile(trainer, engine);
  by_file.relay = true;
  nlohmann::json j;
  EXPECT_EQ(DryRunFingerprint(by_file, job, &j), refitd);
  by_file.relay = false;
  nlohmann::json direct;
  const std::string off = DryRunFingerprint(by_file, job, &direct);
  EXPECT_EQ(off, RefitdFingerprint(trainer, engine, {}, {}, /*relay=*/false, job));
  EXPECT_NE(off, refitd);
  // The trainer sends one copy of the model with relays (each rank its
  // half, to the TP2 replica), three copies without: the TP4 replicas'
  // quarters come from the TP2 replica, not from the trainer.
  EXPECT_LT(j["sent"]["max"].get<double>(), 0.4 * direct["sent"]["max"].get<double>());
}

TEST(PlanMatchesRefitdTest, SeveralEnginesOfDifferentLayoutsRelayRegions) {
  // One TP2 and two TP1 replicas in one --engine: the engines' ranks are
  // numbered one after the other, and with --relay=on the trainer sends
  // less than without, the replicas forwarding regions to each other.
  PlanCommandOptions opt;
  opt.model = kModel;
  opt.trainer = kTrainer;
  opt.engine = "vllm:tp=2;vllm:tp=1,dp=2";
  opt.json = true;
  auto sent_max = [&](bool relay) {
    opt.relay = relay;
    auto out = RunPlanCommand(opt);
    EXPECT_TRUE(out.ok()) << out.status();
    if (!out.ok()) return 0.0;
    auto j = nlohmann::json::parse(*out);
    EXPECT_EQ(j["engine_ranks"].get<int>(), 4);
    EXPECT_EQ(j["engine"].get<std::string>(), "vllm:tp=2,dp=1;vllm:tp=1,dp=2");
    return j["sent"]["max"].get<double>();
  };
  const double relayed = sent_max(true), direct = sent_max(false);
  EXPECT_GT(relayed, 0);
  EXPECT_LT(relayed, direct);
  // A bad spec among them is named.
  opt.engine = "vllm:tp=2;vllm:tp=x";
  auto bad = RunPlanCommand(opt);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("vllm:tp=x"), absl::string_view::npos) << bad.status();
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
  EXPECT_TRUE(ok->trainer_gpus.empty() && ok->engine_gpus.empty());
  auto gpus = ParseHostsFile("trainer 0 h1 GPU-x\ntrainer 1 h1\nengine 0 h1 GPU-x\n", 2, 1);
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  EXPECT_EQ(gpus->trainer_gpus, (std::vector<std::string>{"GPU-x", ""}));
  EXPECT_EQ(gpus->engine_gpus, std::vector<std::string>{"GPU-x"});
  auto extra = ParseHostsFile("trainer 0 h1 g 5\n", 1, 0);
  EXPECT_NE(extra.status().message().find("line 1"), std::string::npos);
}

}  // namespace
}  // namespace refit

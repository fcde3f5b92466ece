// Plan bombs and start-up loops against refitd and `refit` as child
// processes: a config.json whose numbers (65,536 layers, 128 experts) are
// far beyond the 26 buffers registered is refused before planning, naming
// num_hidden_layers; SIGTERM during a long plan build stops refitd within
// seconds; `refit plan` of such a config under an address-space limit ends
// with an error, not an abort; a --flagfile naming itself (a -> b -> a)
// makes refit and refitd exit 2 at once.
#include <signal.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/refit_client.h"
#include "common/file.h"
#include "gtest/gtest.h"
#include "mapping/mapping.h"
#include "mapping/model_config.h"
#include "mapping/plan_size.h"
#include "nlohmann/json.hpp"
#include "proto/protocol_version.h"
#include "testing/refitd_process.h"
#include "testing/test_paths.h"

namespace refit {
namespace {

using ::refit::testing::Runfile;
using ::refit::testing::TmpFile;


// tiny-qwen3-moe's config.json with its layer and expert counts replaced.
std::string MoeConfig(int64_t layers, int64_t experts) {
  absl::StatusOr<std::string> json = BuiltinModelJson("tiny-qwen3-moe");
  if (!json.ok()) return "";
  nlohmann::json j = nlohmann::json::parse(*json);
  j["num_hidden_layers"] = layers;
  j["num_experts"] = experts;
  return j.dump();
}

// A registration of `model_text` whose buffers are tiny-qwen3-moe's real
// ones for rank 0, plus `extra` made-up ones.
v1::Registration Reg(bool trainer, const std::string& model_text, int extra) {
  v1::Registration r;
  r.set_protocol_version(kProtocolVersion);
  auto* id = r.mutable_identity();
  id->set_job("bomb");
  id->set_side(trainer ? v1::SIDE_TRAINER : v1::SIDE_ENGINE);
  id->set_engine_id(trainer ? "" : "e");
  id->set_world_size(1);
  id->set_host_id("h");
  r.set_model_config(model_text);
  r.set_convention(trainer ? "megatron:tp=1" : "vllm:tp=1");
  absl::StatusOr<ModelConfig> model = LoadModelConfig("tiny-qwen3-moe");
  if (!model.ok()) return r;
  absl::StatusOr<MappedSide> side = BuildSideLayout(*model, trainer, r.convention());
  if (!side.ok()) return r;
  for (const LocalBuffer& lb : RankBuffers(*side, 0)) {
    v1::LocalBuffer* b = r.add_buffers();
    b->set_name(lb.name);
    for (int64_t d : lb.shape) b->add_shape(d);
    b->set_dtype(static_cast<int32_t>(lb.dtype));
    b->set_byte_size(lb.byte_size);
  }
  for (int i = 0; i < extra; ++i) {
    v1::LocalBuffer* b = r.add_buffers();
    b->set_name(absl::StrCat("made.up.", i));
    b->add_shape(1);
    b->set_dtype(r.buffers(0).dtype());
    int64_t elements = 1;
    for (int64_t d : r.buffers(0).shape()) elements *= d;
    b->set_byte_size(r.buffers(0).byte_size() / std::max<int64_t>(1, elements));
  }
  return r;
}

std::unique_ptr<RefitClient> Connect(int port) {
  RefitClient::Options o;
  o.target = absl::StrCat("127.0.0.1:", port);
  // A registration of 2^20 buffers takes seconds to send, read and check
  // on a loaded machine (more than the default 10 s with 4 tests at once),
  // and this test's own process, busy building and sending one, may miss
  // the default keepalive (2 s).
  o.rpc_timeout = absl::Seconds(60);
  o.refitd_timeout = absl::Seconds(60);
  o.keepalive_timeout = absl::Seconds(20);
  auto c = RefitClient::Connect(o);
  return c.ok() ? std::move(*c) : nullptr;
}

TEST(PlanBombTest, ConfigNumbersBeyondTheRegisteredBuffersAreRefusedBeforePlanning) {
  RefitdProcess refitd;
  ASSERT_TRUE(refitd.Start(Runfile("server/refitd"), {"--plan_settle_ms=5"},
                           TmpFile("bomb.log"), absl::Seconds(20))
                  .ok());
  const std::string config = MoeConfig(65536, 128);
  ASSERT_FALSE(config.empty());
  auto t = Connect(refitd.port()), e = Connect(refitd.port());
  ASSERT_TRUE(t != nullptr && e != nullptr);
  const v1::Registration tr = Reg(true, config, 0);
  std::printf("registration: %zu bytes, %d buffers\n", tr.ByteSizeLong(), tr.buffers_size());
  ASSERT_TRUE(t->Register(tr).ok());
  ASSERT_TRUE(e->Register(Reg(false, config, 0)).ok());
  const absl::Time start = absl::Now();
  absl::StatusOr<v1::AwaitPlanResponse> plan = t->AwaitPlan(absl::Now() + absl::Seconds(60));
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  std::printf("65536 layers x 128 experts: refused in %.2f s, refitd peak RSS %.1f MiB: %s\n",
              seconds, refitd.PeakRssKib() / 1024.0, plan.status().ToString().c_str());
  EXPECT_FALSE(plan.ok());
  EXPECT_TRUE(absl::StrContains(plan.status().message(), "num_hidden_layers"))
      << plan.status();
  EXPECT_LT(seconds, 5.0);
  EXPECT_LT(refitd.PeakRssKib(), 256 * 1024);
}

TEST(PlanBombTest, SigtermDuringAPlanBuildStopsRefitdWithinSeconds) {
  RefitdProcess refitd;
  ASSERT_TRUE(refitd.Start(Runfile("server/refitd"), {"--plan_settle_ms=5"},
                           TmpFile("sigterm.log"), absl::Seconds(20))
                  .ok());
  // Enough made-up buffers that the cheap checks pass: the build itself
  // (per-expert layouts of 4,096 layers x 128 experts) takes many seconds.
  const std::string config = MoeConfig(4096, 128);
  auto t = Connect(refitd.port()), e = Connect(refitd.port());
  ASSERT_TRUE(t != nullptr && e != nullptr);
  absl::StatusOr<std::string> tid = t->Register(Reg(true, config, 13000));
  ASSERT_TRUE(tid.ok()) << tid.status();
  absl::StatusOr<std::string> eid = e->Register(Reg(false, config, 13000));
  ASSERT_TRUE(eid.ok()) << eid.status();
  absl::SleepFor(absl::Seconds(1));
  absl::StatusOr<v1::StatusResponse> status = t->GetStatus(absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_TRUE(status->plan_fingerprint().empty() &&
              !absl::StrContains(status->plan_error(), "building the plan"))
      << "the build ended before SIGTERM: " << status->plan_error();
  const int64_t rss_kib = refitd.PeakRssKib();
  const absl::Time sent = absl::Now();
  kill(refitd.pid(), SIGTERM);
  while (refitd.Alive() && absl::Now() - sent < absl::Seconds(30)) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - sent);
  std::printf("SIGTERM during a plan build: refitd gone after %.2f s (peak RSS %.1f MiB "
              "when signalled)\n",
              seconds, rss_kib / 1024.0);
  EXPECT_LT(seconds, 5.0);
}

// Runs `argv` (with RLIMIT_AS `as_bytes` when > 0), output into `out`,
// its peak resident set into `peak_kib` when given; returns the exit code,
// or 128 + signal.
int RunChild(const std::vector<std::string>& argv, int64_t as_bytes, std::string* out,
             double* seconds, int64_t* peak_kib = nullptr) {
  const std::string path = TmpFile("run.out");
  const absl::Time start = absl::Now();
  std::fflush(stdout);  // else the child prints this process's buffered lines again
  const pid_t pid = fork();
  if (pid == 0) {
    if (as_bytes > 0) {
      const rlimit lim{static_cast<rlim_t>(as_bytes), static_cast<rlim_t>(as_bytes)};
      setrlimit(RLIMIT_AS, &lim);
    }
    if (std::freopen(path.c_str(), "w", stdout) == nullptr) _exit(127);
    dup2(fileno(stdout), 2);
    alarm(60);  // a hang ends as SIGALRM
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  int status = 0;
  rusage usage{};
  wait4(pid, &status, 0, &usage);
  if (peak_kib != nullptr) *peak_kib = usage.ru_maxrss;
  *seconds = absl::ToDoubleSeconds(absl::Now() - start);
  absl::StatusOr<std::string> text = ReadFileToString(path, 1 << 20);
  *out = text.ok() ? *text : "";
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(PlanBombTest, RefitPlanOutOfAddressSpaceIsAnErrorNotAnAbort) {
  // Within the default plan budget (8 experts), but not within 2 GiB.
  const std::string config = TmpFile("bomb-config.json");
  std::ofstream(config) << MoeConfig(65536, 8);
  std::string out;
  double seconds = 0;
  const int rc = RunChild({Runfile("cli/refit"), "plan", absl::StrCat("--model=", config),
                      "--trainer=megatron:tp=1", "--engine=vllm:tp=1"},
                     int64_t{2} << 30, &out, &seconds);
  std::printf("refit plan under a 2 GiB address space: exit %d after %.2f s: %s\n", rc, seconds,
              out.substr(0, 300).c_str());
  EXPECT_EQ(rc, 1) << out;
  EXPECT_TRUE(absl::StrContains(out, "refit plan: error:")) << out;
}

// The plan-size estimate counts experts: `refit plan` of MoE configs peaks
// below the estimate and not far below it, and a config past the budget is
// refused at once naming --max_plan_mib.
TEST(PlanBombTest, RefitPlanPeaksWithinItsEstimate) {
  struct Case {
    int64_t layers, experts;
  };
  for (const Case& c : {Case{1024, 128}, Case{512, 256}, Case{4096, 8}}) {
    const std::string config = TmpFile("moe-config.json");
    std::ofstream(config) << MoeConfig(c.layers, c.experts);
    absl::StatusOr<ModelConfig> model = LoadModelConfigFile(config);
    ASSERT_TRUE(model.ok()) << model.status();
    absl::StatusOr<int64_t> records = EstimatePlanRecords(
        *model, *ParseTrainerSpec("megatron:tp=1"), {*ParseEngineSpec("vllm:tp=1")});
    ASSERT_TRUE(records.ok()) << records.status();
    const double estimate_mib = *records * kPlanBytesPerRecordEstimate / 1048576.0;
    std::string out;
    double seconds = 0;
    int64_t peak_kib = 0;
    const int rc = RunChild({Runfile("cli/refit"), "plan", absl::StrCat("--model=", config),
                             "--trainer=megatron:tp=1", "--engine=vllm:tp=1"},
                            0, &out, &seconds, &peak_kib);
    ASSERT_EQ(rc, 0) << out;
    const double peak_mib = peak_kib / 1024.0;
    std::printf("refit plan, %lld layers x %lld experts: peak RSS %.0f MiB, estimate %.0f MiB "
                "(%.2fx the peak), %.1f s\n",
                static_cast<long long>(c.layers), static_cast<long long>(c.experts), peak_mib,
                estimate_mib, estimate_mib / peak_mib, seconds);
    EXPECT_LE(peak_mib, estimate_mib);
    EXPECT_LE(estimate_mib, 4 * peak_mib);
  }
  const std::string config = TmpFile("moe-bomb.json");
  std::ofstream(config) << MoeConfig(65536, 128);
  std::string out;
  double seconds = 0;
  const int rc = RunChild({Runfile("cli/refit"), "plan", absl::StrCat("--model=", config),
                           "--trainer=megatron:tp=1", "--engine=vllm:tp=1"},
                          0, &out, &seconds);
  std::printf("refit plan, 65536 layers x 128 experts: exit %d after %.2f s: %s\n", rc, seconds,
              out.substr(0, 300).c_str());
  EXPECT_EQ(rc, 1) << out;
  EXPECT_TRUE(absl::StrContains(out, "--max_plan_mib")) << out;
  EXPECT_LT(seconds, 5.0);
}

// The outsider's plan bomb: trainer and engine registrations padded to
// 2^20 buffers (--max_buffers) with made-up ones pass the checks against
// the registered buffers; the plan's estimate for 65,536 layers x 128
// experts (experts counted) is refused before anything is built, and
// refitd's memory stays at what the two registrations cost it (8.2 GiB and
// growing when the plan was built).
TEST(PlanBombTest, PaddedRegistrationsAreRefusedByThePlanBudget) {
  RefitdProcess refitd;
  ASSERT_TRUE(refitd.Start(Runfile("server/refitd"), {"--plan_settle_ms=5"},
                           TmpFile("padded.log"), absl::Seconds(20))
                  .ok());
  const std::string config = MoeConfig(65536, 128);
  const v1::Registration tr = Reg(true, config, (1 << 20) - 1024);
  const v1::Registration er = Reg(false, config, (1 << 20) - 1024);
  std::printf("padded registration: %.1f MiB, %d buffers\n", tr.ByteSizeLong() / 1048576.0,
              tr.buffers_size());
  auto t = Connect(refitd.port()), e = Connect(refitd.port());
  ASSERT_TRUE(t != nullptr && e != nullptr);
  const absl::Time registered = absl::Now();
  absl::StatusOr<std::string> tid = t->Register(tr);
  ASSERT_TRUE(tid.ok()) << tid.status();
  absl::StatusOr<std::string> eid = e->Register(er);
  ASSERT_TRUE(eid.ok()) << eid.status();
  std::printf("both registered in %.2f s\n", absl::ToDoubleSeconds(absl::Now() - registered));
  const absl::Time start = absl::Now();
  absl::StatusOr<v1::AwaitPlanResponse> plan = t->AwaitPlan(absl::Now() + absl::Seconds(60));
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  std::printf("65536 layers x 128 experts, padded: refused in %.2f s, refitd peak RSS %.1f MiB: "
              "%s\n",
              seconds, refitd.PeakRssKib() / 1024.0, plan.status().ToString().c_str());
  EXPECT_FALSE(plan.ok());
  EXPECT_TRUE(absl::StrContains(plan.status().message(), "--max_plan_mib")) << plan.status();
  EXPECT_LT(seconds, 10.0);
  EXPECT_LT(refitd.PeakRssKib(), 2 * 1024 * 1024);
}

TEST(PlanBombTest, AFlagfileCycleExitsTwoAtOnce) {
  const std::string a = TmpFile("a.flags"), b = TmpFile("b.flags"), self = TmpFile("self.flags");
  std::ofstream(a) << "--flagfile=" << b << "\n";
  std::ofstream(b) << "--log_level=info\n--flagfile=" << a << "\n";
  std::ofstream(self) << "--flagfile=" << self << "\n";
  const std::vector<std::vector<std::string>> commands = {
      {Runfile("server/refitd"), absl::StrCat("--flagfile=", a)},
      {Runfile("server/refitd"), absl::StrCat("--flagfile=", self)},
      {Runfile("cli/refit"), "status", absl::StrCat("--flagfile=", a)},
      {Runfile("cli/refit"), "plan", "--flagfile", self},
  };
  for (const auto& argv : commands) {
    std::string out;
    double seconds = 0;
    EXPECT_EQ(RunChild(argv, 0, &out, &seconds), 2) << argv[0] << ": " << out;
    EXPECT_TRUE(absl::StrContains(out, "includes itself")) << out;
    EXPECT_LT(seconds, 5.0);
  }
}

}  // namespace
}  // namespace refit

// refit_gpu_bench: the data plane measured on 4 GPUs of one host (built
// here, run there from the bundle). One process per GPU (forked), GPUs 0-1
// are the trainer (Megatron TP2), GPUs 2-3 the engine.
//
//   refit_gpu_bench [--model=qwen3-8b] [--iters=5] [--scenarios=tp2,dp2,small]
//                   [--staging_mib=512] [--direct_mib=8] [--round_mib=0]
//                   [--lanes=2,1,4] [--message_mib=-1,128,64]
//
// Scenarios:
//   tp2    model --model from megatron:tp=2 to vllm:tp=2 (fused qkv/gate_up)
//   dp2    the same to vllm:tp=1,dp=2 (each engine GPU holds the whole model)
//   small  2048 tensors of 1 MiB, Shard(0) on the trainer, Shard(1) on the
//          engine: thousands of small strided pieces (coalescing at work)
// For each: the refit (plan + executor + NCCL transport) with the default
// settings (2 lanes asked for; the planner may take 4 for many small
// pieces, and the transport has the plan's lanes), with K = 1 and 4 lanes
// fixed (--lanes), and with K=2 fixed once more per --message_mib value
// (messages and waves of at most that many MiB; -1: the per-lane budget);
// every engine byte checked after each; the raw NCCL
// time of the same bytes between the same GPU pairs, pre-packed, one
// message per pair (the physical limit); for tp2/dp2 the broadcast refit
// most RL frameworks do (the trainer's rank 0 holds the full tensors and
// broadcasts them in 1 GiB buckets to every engine rank, which keeps its
// slice; per bucket the gather to rank 0 and then the broadcast; printed
// also without the gather, as measured before);
// for small, the same pieces sent one NCCL message per piece (no
// coalescing); and the plan's K=2 rounds with no copies (where the time
// goes: round structure vs pack/unpack). Times are per refit, the slowest GPU's mean over --iters
// back-to-back runs after one warm-up. The last lines are one table.
// Exit 1 if any check fails; SKIP (exit 0) with fewer than 4 GPUs.
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "exec/cuda/cuda_copier.h"
#include "exec/cuda/cuda_status.h"
#include "exec/transport/cuda/nccl_status.h"
#include "exec/transport/cuda/nccl_transport.h"
#include "exec/executor.h"
#include "exec/program/plan_side.h"
#include "layout/mesh.h"
#include "layout/sharding.h"
#include "mapping/layout_builder.h"
#include "mapping/mapping.h"
#include "mapping/model_config.h"
#include "mapping/parallel_spec.h"
#include "plan/planner.h"
#include "testing/dir_kv_store.h"
#include "testing/flags.h"
#include "testing/gpu_pattern.h"
#include "bench/refit_gpu_baselines.h"

namespace refit {
namespace {

using gpu_bench::Broadcast;
using gpu_bench::CountPairs;
using gpu_bench::PairBytes;
using gpu_bench::RawNccl;
using gpu_bench::RoundsOnly;

// GPUs used (--gpus, default min(4, available), even): the first half are
// the trainer, the second half the engine.
int kWorld = 4;
int kTrainer = 2;


#define CK(x) REFIT_RETURN_IF_CUDA_ERROR(x)
#define NK(x) REFIT_RETURN_IF_ERROR(NcclStatus((x), #x))

// The two sides of a scenario (every worker builds them; deterministic).
absl::StatusOr<std::pair<SideLayout, SideLayout>> Layouts(
    const std::string& scenario, const std::string& model_name) {
  if (scenario == "small") {
    SideLayout src, dst;
    src.world_size = kTrainer;
    dst.world_size = kWorld - kTrainer;
    REFIT_ASSIGN_OR_RETURN(Mesh tmesh, Mesh::Make({"tp"}, {kTrainer}));
    REFIT_ASSIGN_OR_RETURN(Mesh emesh, Mesh::Make({"tp"}, {kWorld - kTrainer}));
    for (int i = 0; i < 2048; ++i) {
      TensorSpec t;
      t.name = absl::StrCat("small.", i, ".weight");
      t.shape = {512, 1024};
      t.dtype = DType::kBF16;
      REFIT_ASSIGN_OR_RETURN(int32_t ts, AddTensor(src, t));
      REFIT_ASSIGN_OR_RETURN(int32_t td, AddTensor(dst, t));
      REFIT_RETURN_IF_ERROR(
          AddDenseShards(src, ts, tmesh, {Placement::Shard(0)}).status());
      REFIT_RETURN_IF_ERROR(
          AddDenseShards(dst, td, emesh, {Placement::Shard(1)}).status());
    }
    return std::make_pair(std::move(src), std::move(dst));
  }
  REFIT_ASSIGN_OR_RETURN(ModelConfig model, LoadModelConfig(model_name));
  const int e = kWorld - kTrainer;
  REFIT_ASSIGN_OR_RETURN(TrainerSpec ts,
                         ParseTrainerSpec(absl::StrCat("megatron:tp=", kTrainer)));
  REFIT_ASSIGN_OR_RETURN(
      EngineSpec es,
      ParseEngineSpec(scenario == "tp2" ? absl::StrCat("vllm:tp=", e)
                                        : absl::StrCat("vllm:tp=1,dp=", e)));
  REFIT_ASSIGN_OR_RETURN(MappedSide src, BuildTrainerLayout(model, ts));
  REFIT_ASSIGN_OR_RETURN(MappedSide dst, BuildEngineLayout(model, es));
  return std::make_pair(std::move(src.layout), std::move(dst.layout));
}

struct Results {
  std::map<std::string, std::string> kv;
  void Put(const std::string& k, double v) { kv[k] = absl::StrCat(v); }
  void Put(const std::string& k, const std::string& v) { kv[k] = v; }
};

struct BenchOptions {
  int iters = 5;
  int64_t staging_mib = 512;
  int64_t direct_mib = -1;  // -1: the planner's default
  int64_t round_mib = 0;
  std::vector<int> lanes = {2, 1, 4};  // K=2 first (its plan is the baseline's)
  // Extra K=2 refits, messages and waves of at most this many MiB each
  // (-1: the per-lane budget, the planner's choice before pipelined
  // staging), on the K=2 transport, every engine byte checked.
  std::vector<int64_t> message_mib;
};

absl::Status Worker(const std::string& scenario, const std::string& model,
                    int g, const std::string& dir, const BenchOptions& bo,
                    Results* out) {
  const int iters = bo.iters;
  const int64_t staging_mib = bo.staging_mib;
  CK(cudaSetDevice(g));
  REFIT_ASSIGN_OR_RETURN(auto sides, Layouts(scenario, model));
  const SideLayout& src = sides.first;
  const SideLayout& dst = sides.second;
  const bool trainer = g < kTrainer;
  const int rank = trainer ? g : g - kTrainer;
  const SideLayout& mine = trainer ? src : dst;

  // Buffers: device memory for this rank's buffers, the test pattern
  // filled and checked on the GPU (testing/gpu_pattern.h).
  std::vector<char*> dev(mine.buffers.size(), nullptr);
  int64_t my_bytes = 0, model_bytes = 0;
  for (const TensorSpec& t : mine.tensors) {
    int64_t n = DTypeSize(t.dtype);
    for (int64_t d : t.shape) n *= d;
    model_bytes += n;
  }
  for (size_t b = 0; b < mine.buffers.size(); ++b) {
    if (mine.buffers[b].rank != rank) continue;
    CK(cudaMalloc(&dev[b], std::max<int64_t>(1, mine.buffers[b].byte_size)));
    CK(cudaMemset(dev[b], 0, mine.buffers[b].byte_size));
    my_bytes += mine.buffers[b].byte_size;
  }
  if (trainer) REFIT_RETURN_IF_ERROR(testing::DevicePattern(mine, rank, dev, 1, false));
  CK(cudaDeviceSynchronize());
  const std::vector<char*> before = dev;
  out->Put("model_bytes", static_cast<double>(model_bytes));
  out->Put("rank_bytes", static_cast<double>(my_bytes));

  const Side side = trainer ? Side::kTrainer : Side::kEngine;
  // Engines start every refit measured from zeros, so that every one's
  // bytes are checked.
  auto zero_engine = [&]() -> absl::Status {
    if (trainer) return absl::OkStatus();
    for (size_t b = 0; b < dev.size(); ++b) {
      if (dev[b]) CK(cudaMemset(dev[b], 0, mine.buffers[b].byte_size));
    }
    CK(cudaDeviceSynchronize());
    return absl::OkStatus();
  };
  Plan plan2;
  for (int lanes : bo.lanes) {
    // K=2 is the default: the planner may take more lanes (planner.h), and
    // the transport has the plan's (as refitd bootstraps members); K=1 and
    // K=4 are fixed.
    PlannerOptions po;
    po.num_lanes = lanes;
    po.choose_lanes = lanes == 2;
    po.staging_budget_bytes = staging_mib << 20;
    if (bo.direct_mib >= 0) po.direct_min_bytes = bo.direct_mib << 20;
    po.max_wave_bytes = bo.round_mib << 20;
    const absl::Time p0 = absl::Now();
    REFIT_ASSIGN_OR_RETURN(Plan plan, BuildPlan(src, dst, po));
    if (lanes == 2) {
      out->Put("plan_s", absl::ToDoubleSeconds(absl::Now() - p0));
      out->Put("plan_lanes", static_cast<double>(plan.options.num_lanes));
    }
    testing::DirKvStore kv(absl::StrCat(dir, "/lanes", lanes));
    NcclTransportOptions no;
    no.num_lanes = plan.options.num_lanes;
    no.device = g;
    REFIT_ASSIGN_OR_RETURN(std::unique_ptr<NcclTransport> t,
                           NcclTransport::Create(&kv, g, kWorld, no));
    std::unique_ptr<Copier> ce = MakeCudaCopier(t.get());
    ExecutorOptions eo;
    eo.copier = ce.get();
    REFIT_ASSIGN_OR_RETURN(std::unique_ptr<Executor> ex,
                           Executor::Create(plan, side, rank, dev, t.get(), eo));
    REFIT_RETURN_IF_ERROR(zero_engine());
    const absl::Time deadline = absl::Now() + absl::Seconds(120);
    REFIT_ASSIGN_OR_RETURN(RunStats first, ex->Run(deadline));
    RunStats last = first;
    const absl::Time t0 = absl::Now();
    for (int i = 0; i < iters; ++i) {
      REFIT_ASSIGN_OR_RETURN(last, ex->Run(absl::Now() + absl::Seconds(120)));
    }
    const double sec = absl::ToDoubleSeconds(absl::Now() - t0) / iters;
    out->Put(absl::StrCat("refit_s_k", lanes), sec);
    if (lanes == 2) {
      REFIT_ASSIGN_OR_RETURN(double ro, RoundsOnly(plan, side, rank, t.get(), iters));
      out->Put("rounds_only_s", ro);
    }
    // Checked after the timed runs (a check between runs would be timed by
    // the peers waiting for this rank).
    if (!trainer) {
      absl::Status c = testing::DevicePattern(mine, rank, dev, 1, true);
      if (!c.ok() || !out->kv.count("check")) {
        out->Put("check", c.ok() ? "equal"
                                 : absl::StrCat("K=", lanes, ": ",
                                                std::string(c.message()).substr(0, 300)));
      }
    }

    // The message-size sweep on this transport (K=2 only).
    for (const int64_t mib : lanes == 2 ? bo.message_mib : std::vector<int64_t>{}) {
      PlannerOptions so = po;
      so.choose_lanes = false;
      so.max_message_bytes = mib < 0 ? so.staging_budget_bytes / lanes : mib << 20;
      so.max_wave_bytes = mib < 0 ? 0 : mib << 20;
      REFIT_ASSIGN_OR_RETURN(Plan sp, BuildPlan(src, dst, so));
      ExecutorOptions seo = eo;
      seo.num_lanes = lanes;
      REFIT_ASSIGN_OR_RETURN(std::unique_ptr<Executor> sx,
                             Executor::Create(sp, side, rank, dev, t.get(), seo));
      REFIT_RETURN_IF_ERROR(zero_engine());
      REFIT_RETURN_IF_ERROR(sx->Run(absl::Now() + absl::Seconds(120)).status());
      const absl::Time s0 = absl::Now();
      for (int i = 0; i < iters; ++i) {
        REFIT_RETURN_IF_ERROR(sx->Run(absl::Now() + absl::Seconds(120)).status());
      }
      out->Put(absl::StrCat("sweep_s_", mib), absl::ToDoubleSeconds(absl::Now() - s0) / iters);
      out->Put(absl::StrCat("sweep_waves_", mib), static_cast<double>(sp.waves.size()));
      if (!trainer) {
        absl::Status c = testing::DevicePattern(mine, rank, dev, 1, true);
        if (!c.ok() && out->kv["check"] == "equal") {
          out->Put("check", absl::StrCat("K=2, messages of ", mib, " MiB: ",
                                         std::string(c.message()).substr(0, 300)));
        }
      }
    }
    out->Put(absl::StrCat("staging_k", lanes),
             static_cast<double>(last.peak_staging_bytes));
    out->Put(absl::StrCat("recv_k", lanes), static_cast<double>(last.bytes_received));
    if (lanes == 2) {
      out->Put("messages", static_cast<double>(plan.stats.num_messages));
      out->Put("segments", static_cast<double>(plan.stats.num_segments));
      out->Put("rounds", static_cast<double>(plan.waves.size()));
      plan2 = plan;
    }
    ex.reset();
    ce.reset();
    t.reset();
  }
  out->Put("budget", static_cast<double>(staging_mib << 20));
  out->Put("pointers", dev == before ? "unchanged" : "CHANGED");

  // Baselines on a plain communicator.
  testing::DirKvStore kv(absl::StrCat(dir, "/raw"));
  ncclUniqueId id;
  if (g == 0) {
    NK(ncclGetUniqueId(&id));
    REFIT_RETURN_IF_ERROR(kv.Set("id", std::string(id.internal, sizeof(id.internal))));
  } else {
    REFIT_ASSIGN_OR_RETURN(std::string v, kv.Get("id", absl::Seconds(60)));
    std::memcpy(id.internal, v.data(), std::min(v.size(), sizeof(id.internal)));
  }
  ncclComm_t comm;
  NK(ncclCommInitRank(&comm, kWorld, id, g));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  PairBytes pb = CountPairs(plan2);
  std::vector<std::tuple<int, int, int64_t>> pairs;
  for (const auto& [k, n] : pb.pair) pairs.emplace_back(k.first, kTrainer + k.second, n);
  REFIT_ASSIGN_OR_RETURN(double raw, RawNccl(comm, s, g, pairs, iters));
  out->Put("raw_s", raw);
  if (scenario == "small") {
    std::vector<std::tuple<int, int, int64_t>> segs;
    for (const auto& [a, b, n] : pb.segments) segs.emplace_back(a, kTrainer + b, n);
    REFIT_ASSIGN_OR_RETURN(double per, RawNccl(comm, s, g, segs, iters));
    out->Put("per_piece_s", per);
    out->Put("pieces", static_cast<double>(segs.size()));
  } else {
    // {trainer 0, engines} for the broadcast, the trainers for the gather.
    ncclComm_t bcomm = nullptr, tcomm = nullptr;
    const bool member = g == 0 || g >= kTrainer;
    NK(ncclCommSplit(comm, member ? 0 : NCCL_SPLIT_NOCOLOR, g, &bcomm, nullptr));
    NK(ncclCommSplit(comm, g < kTrainer ? 1 : NCCL_SPLIT_NOCOLOR, g, &tcomm, nullptr));
    const int bpos = g == 0 ? 0 : g - kTrainer + 1;
    const double keep = scenario == "tp2" ? 1.0 / (kWorld - kTrainer) : 1.0;
    // Without the gather (the earlier, flattering baseline): trainer
    // ranks other than 0 take no part.
    if (member) {
      REFIT_ASSIGN_OR_RETURN(double bc, Broadcast(bcomm, nullptr, s, bpos, 0, 1,
                                                  model_bytes, keep, iters));
      out->Put("broadcast_nogather_s", bc);
    }
    REFIT_ASSIGN_OR_RETURN(
        double bg, Broadcast(member ? bcomm : nullptr, g < kTrainer ? tcomm : nullptr,
                             s, bpos, g, kTrainer, model_bytes, keep, iters));
    out->Put("broadcast_s", bg);
    if (bcomm != nullptr) NK(ncclCommDestroy(bcomm));
    if (tcomm != nullptr) NK(ncclCommDestroy(tcomm));
  }
  NK(ncclCommDestroy(comm));
  for (char* p : dev) {
    if (p) CK(cudaFree(p));
  }
  return absl::OkStatus();
}

std::map<std::string, std::string> ReadResults(const std::string& path) {
  std::map<std::string, std::string> kv;
  std::ifstream f(path);
  std::string k, v;
  while (f >> k && std::getline(f, v)) kv[k] = v.empty() ? v : v.substr(1);
  return kv;
}

double D(const std::map<std::string, std::string>& m, const std::string& k) {
  double v = 0;
  auto it = m.find(k);
  if (it != m.end()) (void)absl::SimpleAtod(it->second, &v);
  return v;
}

}  // namespace
}  // namespace refit

int main(int argc, char** argv) {
  using namespace refit;
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  const std::string model = testing::FlagValue(argc, argv, "model", "qwen3-8b");
  BenchOptions bo;
  (void)absl::SimpleAtoi(testing::FlagValue(argc, argv, "iters", "5"), &bo.iters);
  (void)absl::SimpleAtoi(testing::FlagValue(argc, argv, "staging_mib", "512"), &bo.staging_mib);
  (void)absl::SimpleAtoi(testing::FlagValue(argc, argv, "direct_mib", "-1"), &bo.direct_mib);
  (void)absl::SimpleAtoi(testing::FlagValue(argc, argv, "round_mib", "0"), &bo.round_mib);
  bo.lanes.clear();
  for (absl::string_view v : absl::StrSplit(testing::FlagValue(argc, argv, "lanes", "2,1,4"), ',')) {
    int k = 0;
    if (absl::SimpleAtoi(v, &k) && (k == 1 || k == 2 || k == 4)) bo.lanes.push_back(k);
  }
  if (bo.lanes.empty() || bo.lanes[0] != 2) {
    std::printf("--lanes: a list of 1, 2 and 4 starting with 2\n");
    return 2;
  }
  for (absl::string_view v :
       absl::StrSplit(testing::FlagValue(argc, argv, "message_mib", ""), ',', absl::SkipEmpty())) {
    int64_t m = 0;
    if (!absl::SimpleAtoi(v, &m) || m < -1 || m == 0) {
      std::printf("--message_mib: MiB above 0, or -1 for the per-lane budget\n");
      return 2;
    }
    bo.message_mib.push_back(m);
  }
  const int iters = bo.iters;
  const int64_t staging_mib = bo.staging_mib;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
  int gpus = std::min(count, 4);
  (void)absl::SimpleAtoi(testing::FlagValue(argc, argv, "gpus", std::to_string(gpus)), &gpus);
  gpus -= gpus % 2;
  kWorld = gpus;
  kTrainer = gpus / 2;
  if (argc >= 2 && std::string(argv[1]) == "--worker") {
    // --worker SCENARIO G DIR
    const std::string scenario = argv[2];
    const int g = std::atoi(argv[3]);
    const std::string dir = argv[4];
    Results r;
    absl::Status st = Worker(scenario, model, g, dir, bo, &r);
    if (!st.ok()) r.Put("error", std::string(st.message()));
    std::ofstream f(absl::StrCat(dir, "/result.", g));
    for (const auto& [k, v] : r.kv) f << k << " " << v << "\n";
    return st.ok() ? 0 : 1;
  }
  if (gpus < 2 || gpus > count) {
    std::printf("SKIP: refit_gpu_bench needs 2 or 4 GPUs (--gpus=%d), found %d\n",
                gpus, count);
    return 0;
  }
  int nv = 0;
  ncclGetVersion(&nv);
  std::printf("nccl %d, %d GPUs (trainer %d, engine %d), model %s, %d iterations, staging budget %lld MiB\n",
              nv, count, kTrainer, kWorld - kTrainer, model.c_str(), iters, static_cast<long long>(staging_mib));
  std::fflush(stdout);
  bool ok = true;
  std::vector<std::string> table;
  for (absl::string_view sc :
       absl::StrSplit(testing::FlagValue(argc, argv, "scenarios", "tp2,dp2,small"), ',')) {
    const std::string scenario(sc);
    char tmpl[] = "/tmp/refit_gpu_bench.XXXXXX";
    const std::string dir = mkdtemp(tmpl);
    for (const char* sub : {"/lanes1", "/lanes2", "/lanes4", "/raw"}) {
      mkdir((dir + sub).c_str(), 0755);
    }
    std::vector<pid_t> pids;
    for (int g = 0; g < kWorld; ++g) {
      pid_t pid = fork();
      if (pid == 0) {
        std::vector<std::string> args = {argv[0], "--worker", scenario,
                                         std::to_string(g), dir};
        for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
        std::vector<char*> av;
        for (auto& a : args) av.push_back(a.data());
        av.push_back(nullptr);
        execv("/proc/self/exe", av.data());
        _exit(127);
      }
      pids.push_back(pid);
    }
    // Bounded wait: a worker stuck past 400 s is killed.
    const absl::Time until = absl::Now() + absl::Seconds(400);
    std::vector<int> status(kWorld, -1);
    int left = kWorld;
    std::vector<bool> done(kWorld, false);
    while (left > 0 && absl::Now() < until) {
      for (int g = 0; g < kWorld; ++g) {
        if (!done[g] && waitpid(pids[g], &status[g], WNOHANG) == pids[g]) {
          done[g] = true;
          --left;
        }
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
    for (int g = 0; g < kWorld; ++g) {
      if (!done[g]) {
        kill(pids[g], SIGKILL);
        waitpid(pids[g], &status[g], 0);
        std::printf("%s: GPU %d timed out\n", scenario.c_str(), g);
        ok = false;
      }
    }
    std::vector<std::map<std::string, std::string>> r(kWorld);
    for (int g = 0; g < kWorld; ++g) {
      r[g] = ReadResults(absl::StrCat(dir, "/result.", g));
      if (r[g].count("error")) {
        std::printf("%s: GPU %d error: %s\n", scenario.c_str(), g, r[g]["error"].c_str());
        ok = false;
      }
    }
    auto slowest = [&](const std::string& k) {
      double m = 0;
      for (int g = 0; g < kWorld; ++g) m = std::max(m, D(r[g], k));
      return m;
    };
    double peak_staging = 0;
    for (int g = 0; g < kWorld; ++g) {
      for (const char* k : {"staging_k1", "staging_k2", "staging_k4"}) {
        peak_staging = std::max(peak_staging, D(r[g], k));
      }
    }
    const double refit = slowest("refit_s_k2");
    const double raw = slowest("raw_s");
    double recv_per_engine = 0;
    for (int g = kTrainer; g < kWorld; ++g) recv_per_engine += D(r[g], "recv_k2");
    recv_per_engine /= (kWorld - kTrainer);
    std::string check = "equal";
    for (int g = kTrainer; g < kWorld; ++g) {
      if (r[g]["check"] != "equal") {
        check = "FAIL";
        ok = false;
        std::printf("%s: GPU %d check: %s\n", scenario.c_str(), g, r[g]["check"].c_str());
      }
      if (r[g]["pointers"] != "unchanged") ok = false;
    }
    std::printf(
        "%s: %.2f GB model, plan %.3f s (%s messages, %s segments, %s rounds, "
        "%.0f lanes); refit K=1/2 (the default: the plan's lanes)/4: %.2f / %.2f / "
        "%.2f ms; the plan's default rounds without "
        "copies %.2f ms; raw NCCL %.2f ms; %s%s; "
        "peak staging %.0f MiB (budget %.0f MiB); engine bytes %s, pointers %s\n",
        scenario.c_str(), D(r[0], "model_bytes") / 1e9, D(r[0], "plan_s"),
        r[0]["messages"].c_str(), r[0]["segments"].c_str(), r[0]["rounds"].c_str(),
        D(r[0], "plan_lanes"),
        slowest("refit_s_k1") * 1e3, refit * 1e3, slowest("refit_s_k4") * 1e3,
        slowest("rounds_only_s") * 1e3, raw * 1e3,
        scenario == "small" ? "one message per piece " : "broadcast ",
        scenario == "small"
            ? absl::StrCat(slowest("per_piece_s") * 1e3, " ms (", r[0]["pieces"], " pieces)").c_str()
            : absl::StrCat(slowest("broadcast_s") * 1e3, " ms with the gather to trainer 0, ",
                           slowest("broadcast_nogather_s") * 1e3, " ms without").c_str(),
        peak_staging / 1048576, D(r[0], "budget") / 1048576, check.c_str(),
        r[kTrainer]["pointers"].c_str());
    for (const int64_t mib : bo.message_mib) {
      const double sw = slowest(absl::StrCat("sweep_s_", mib));
      std::printf("%s: K=2, messages and waves of at most %s: %.2f ms (raw / refit %.2f), "
                  "%.0f waves\n",
                  scenario.c_str(),
                  mib < 0 ? "the per-lane budget" : absl::StrCat(mib, " MiB").c_str(), sw * 1e3,
                  sw > 0 ? raw / sw : 0.0, D(r[0], absl::StrCat("sweep_waves_", mib)));
    }
    std::fflush(stdout);
    const double base = scenario == "small" ? slowest("per_piece_s") : slowest("broadcast_s");
    table.push_back(absl::StrFormat(
        "%-6s %10.2f %12.1f %10.2f %8.2f %12.2f %8.2f %9.2f %9.2f %8.0f/%-5.0f %s",
        scenario, refit * 1e3, refit > 0 ? recv_per_engine / refit / 1e9 : 0.0,
        raw * 1e3, refit > 0 ? raw / refit : 0.0, base * 1e3,
        refit > 0 ? base / refit : 0.0, slowest("refit_s_k1") * 1e3,
        slowest("refit_s_k4") * 1e3, peak_staging / 1048576,
        D(r[0], "budget") / 1048576, check.c_str()));
  }
  std::printf("\n%-6s %10s %12s %10s %8s %12s %8s %9s %9s %14s %s\n", "case",
              "refit ms", "GB/s/engine", "raw ms", "raw/ref", "baseline ms",
              "speedup", "K=1 ms", "K=4 ms", "staging MiB", "bytes");
  for (const std::string& l : table) std::printf("%s\n", l.c_str());
  std::printf("(baseline: for tp2/dp2, trainer rank 0 gathers each 1 GiB "
              "bucket from the trainer ranks and broadcasts it to every engine "
              "rank; for small, one NCCL message per piece; refit ms: the "
              "default settings, 2 lanes asked for, the plan's lanes taken)\n");
  return ok ? 0 : 1;
}

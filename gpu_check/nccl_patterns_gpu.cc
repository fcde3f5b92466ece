// GPU test program: the data-plane patterns over NCCL, one process per GPU,
// or with --transport=pull on the colocated pull path (exec/pull/cuda/pull_runner.h:
// every receiver copies straight out of its senders' buffers), rank g on GPU
// g mod N (so ranks share GPUs, as a colocated trainer and engine do, and
// every pattern runs on one GPU too), or with --transport=nccl-hosts over
// NCCL with every worker a host of its own to NCCL (NCCL_HOSTID per worker;
// sockets on the loopback interface between "hosts"), rank g on GPU g mod
// N: on fewer GPUs than ranks every NCCL pattern, relays included, runs
// through NCCL's network path (NCCL refuses two ranks of one host on one
// GPU; the per-worker host id is what lets them share it).
//
//   nccl_patterns_gpu [--gpus=N] [--pattern=NAME] [--lanes=K]
//                     [--transport=nccl|nccl-hosts|pull] ("ipc" is accepted for pull)
//
// The parent forks one worker per rank of each pattern (over plain NCCL,
// rank g on GPU g; patterns needing more ranks than GPUs print SKIP), with
// NCCL_NVLS_ENABLE=0
// and a KvStore in a temp directory. Each worker runs two refit steps,
// checks every destination byte and that buffer pointers are unchanged, and
// checks that a CUDA graph captured BEFORE the refit (copying destination
// buffer 0 into a snapshot) sees the new weights when replayed after it.
// One line per pattern: PASS / FAIL / SKIP. Exit 1 on any FAIL; with no GPU
// prints SKIP and exits 0.
//
// Then `killed-peer` (2 ranks, the 1to1 plan): after a good first step the
// trainer process exits abruptly; the engine process must fail its second
// step with an error by the step's deadline (5 s) and exit, never hang
// (the parent kills it after 60 s and reports FAIL).
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "exec/composite_runner.h"
#include "exec/cuda/cuda_copier.h"
#include "exec/transport/cuda/nccl_transport.h"
#include "exec/pull/cuda/pull_runner.h"
#include "exec/executor.h"
#include "plan/plan_codec.h"
#include "testing/dir_kv_store.h"
#include "testing/flags.h"
#include "testing/test_patterns.h"

using namespace refit;

namespace {

// How the workers move bytes (see the top comment).
enum class Via { kNccl, kNcclHosts, kPull };

const char* ViaName(Via via) {
  return via == Via::kPull ? "pull" : via == Via::kNcclHosts ? "nccl-hosts" : "nccl";
}

Via ViaOf(const std::string& name) {
  return name == "pull" || name == "ipc" ? Via::kPull
         : name == "nccl-hosts"          ? Via::kNcclHosts
                                         : Via::kNccl;
}

// `full`'s buffers of `rank` (indexed like full), re-indexed like the
// slice's side `slice`.
std::vector<char*> SliceBuffers(const SideLayout& full, const SideLayout& slice, int rank,
                                const std::vector<char*>& dev) {
  std::vector<char*> out(slice.buffers.size(), nullptr);
  for (size_t b = 0; b < slice.buffers.size(); ++b) {
    for (size_t f = 0; f < full.buffers.size(); ++f) {
      if (full.buffers[f].rank == rank && full.buffers[f].name == slice.buffers[b].name) {
        out[b] = dev[f];
      }
    }
  }
  return out;
}

// The rank's data plane: the executor over NCCL, or the pull runner over
// its slice.
absl::StatusOr<std::unique_ptr<RoundRunner>> MakeRunner(const Plan& plan, Side side, int rank,
                                                        int g, int device, int lanes, Via via,
                                                        const std::vector<char*>& dev,
                                                        KvStore* kv) {
  const int world = plan.src.world_size + plan.dst.world_size;
  if (via == Via::kPull) {
    const Plan slice = ExtractSlice(plan, side, rank);
    const bool src = side == Side::kTrainer;
    PullRunnerOptions po;
    po.device = device;
    absl::StatusOr<std::unique_ptr<PullRunner>> e = PullRunner::Create(
        slice, side, rank, SliceBuffers(src ? plan.src : plan.dst, src ? slice.src : slice.dst,
                                        rank, dev),
        kv, po, absl::Now() + absl::Seconds(60));
    if (!e.ok()) return e.status();
    return std::unique_ptr<RoundRunner>(std::move(*e));
  }
  NcclTransportOptions opt;
  opt.num_lanes = lanes;
  opt.device = device;
  absl::StatusOr<std::unique_ptr<NcclTransport>> nt = NcclTransport::Create(kv, g, world, opt);
  if (!nt.ok()) return nt.status();
  std::unique_ptr<Copier> engine = MakeCudaCopier(nt->get());
  ExecutorOptions eo;
  eo.copier = engine.get();
  absl::StatusOr<std::unique_ptr<Executor>> ex =
      Executor::Create(plan, side, rank, dev, nt->get(), eo);
  if (!ex.ok()) return ex.status();
  absl::StatusOr<std::unique_ptr<ExecutorRunner>> r =
      ExecutorRunner::Create(std::move(*nt), std::move(engine), std::move(*ex));
  if (!r.ok()) return r.status();
  return std::unique_ptr<RoundRunner>(std::move(*r));
}


#define CK(x)                                                              \
  do {                                                                     \
    cudaError_t e_ = (x);                                                  \
    if (e_ != cudaSuccess) {                                               \
      std::fprintf(stderr, "rank %d: %s: %s\n", g, #x, cudaGetErrorString(e_)); \
      return 2;                                                            \
    }                                                                      \
  } while (0)

// kill_peer: the source rank exits abruptly before step 2; the destination
// expects step 2 to fail by its deadline.
int Worker(const std::string& pattern, int g, const std::string& dir,
           int lanes, bool kill_peer, Via via, int gpus) {
  auto plan = testing::MakePatternPlan(pattern, lanes, 2);
  if (!plan.ok()) return 2;
  const int ws = plan->src.world_size;
  const int world = ws + plan->dst.world_size;
  if (g == 0) {
    int v = 0;
    ncclGetVersion(&v);
    std::printf("  nccl version %d\n", v);
  }
  const int device = via == Via::kNccl ? g : g % gpus;
  if (via == Via::kNcclHosts) {  // before NCCL reads its environment
    setenv("NCCL_HOSTID", ("refit-pattern-rank-" + std::to_string(g)).c_str(), 1);
    setenv("NCCL_SOCKET_IFNAME", "lo", 0);
    setenv("NCCL_IB_DISABLE", "1", 0);
  }
  CK(cudaSetDevice(device));
  (void)world;
  testing::DirKvStore kv(dir);
  const Side side = g < ws ? Side::kTrainer : Side::kEngine;
  const int rank = g < ws ? g : g - ws;
  const SideLayout& layout = g < ws ? plan->src : plan->dst;
  const char fill = static_cast<char>(0xEE);
  auto host = testing::AllocateRankBuffers(layout, rank, fill);
  std::vector<char*> dev(host.size(), nullptr);
  for (size_t b = 0; b < host.size(); ++b) {
    if (host[b].empty()) continue;
    CK(cudaMalloc(&dev[b], host[b].size()));
    CK(cudaMemcpy(dev[b], host[b].data(), host[b].size(), cudaMemcpyHostToDevice));
  }
  const std::vector<char*> before = dev;
  // CUDA graph captured before the refit: snapshot of the first buffer.
  int first = -1;
  for (size_t b = 0; b < dev.size(); ++b) {
    if (dev[b] != nullptr) {
      first = static_cast<int>(b);
      break;
    }
  }
  char* snap = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaStream_t cs;
  CK(cudaStreamCreate(&cs));
  if (side == Side::kEngine && first >= 0) {
    CK(cudaMalloc(&snap, host[first].size()));
    cudaGraph_t graph;
    CK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal));
    CK(cudaMemcpyAsync(snap, dev[first], host[first].size(),
                       cudaMemcpyDeviceToDevice, cs));
    CK(cudaStreamEndCapture(cs, &graph));
    CK(cudaGraphInstantiate(&exec, graph, nullptr, nullptr, 0));
  }
  absl::StatusOr<std::unique_ptr<RoundRunner>> runner =
      MakeRunner(*plan, side, rank, g, device, lanes, via, dev, &kv);
  if (!runner.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", g, runner.status().ToString().c_str());
    return 2;
  }
  for (int step = 1; step <= 2; ++step) {
    if (kill_peer && step == 2 && side == Side::kTrainer) {
      std::fflush(stdout);
      _exit(0);  // a trainer process that dies between refits
    }
    if (side == Side::kTrainer) {
      testing::FillRecords(layout, rank, step, &host);
      for (size_t b = 0; b < host.size(); ++b) {
        if (dev[b]) CK(cudaMemcpy(dev[b], host[b].data(), host[b].size(),
                                  cudaMemcpyHostToDevice));
      }
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto st = (*runner)->Run(absl::Now() + absl::Seconds(kill_peer ? 5 : 60));
    if (kill_peer && step == 2) {
      const double secs = std::chrono::duration<double>(
                              std::chrono::steady_clock::now() - t0).count();
      if (st.ok()) {
        std::fprintf(stderr, "rank %d: step 2 succeeded without its peer\n", g);
        return 1;
      }
      std::printf("  engine rank failed after %.1f s, as it should: %s\n", secs,
                  st.status().ToString().c_str());
      std::fflush(stdout);
      // Cleaning up after the abort (staging cudaFree, streams, comms, the
      // mappings of the dead peer's memory) must not hang either.
      const auto t1 = std::chrono::steady_clock::now();
      runner->reset();
      const double clean = std::chrono::duration<double>(
                               std::chrono::steady_clock::now() - t1).count();
      std::printf("  engine rank cleaned up in %.1f s\n", clean);
      std::fflush(stdout);
      return secs < 15 && clean < 15 ? 0 : 1;
    }
    if (!st.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", g, st.status().ToString().c_str());
      return 3;
    }
    if (side == Side::kEngine) {
      for (size_t b = 0; b < host.size(); ++b) {
        if (dev[b]) CK(cudaMemcpy(host[b].data(), dev[b], host[b].size(),
                                  cudaMemcpyDeviceToHost));
      }
      std::string c = testing::CheckRecords(layout, rank, step, fill, host);
      if (!c.empty()) {
        std::fprintf(stderr, "rank %d step %d: %s\n", g, step, c.c_str());
        return 1;
      }
      if (exec != nullptr) {
        CK(cudaGraphLaunch(exec, cs));
        CK(cudaStreamSynchronize(cs));
        std::vector<char> s(host[first].size());
        CK(cudaMemcpy(s.data(), snap, s.size(), cudaMemcpyDeviceToHost));
        if (s != host[first]) {
          std::fprintf(stderr, "rank %d: graph captured before the refit "
                       "does not see the new weights\n", g);
          return 1;
        }
      }
    }
  }
  if (dev != before) return 1;
  runner->reset();
  return 0;
}

// Forks one worker per rank (rank g on GPU g) and waits for all of them, at
// most 120 s (60 s for killed-peer), then kills them. True if every worker
// exited with 0.
bool RunWorkers(const char* argv0, const std::string& pattern, int world,
                int lanes, bool kill_peer, Via via, int gpus) {
  const int limit_s = kill_peer ? 60 : 120;
  char tmpl[] = "/tmp/refit_nccl_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  std::vector<pid_t> pids;
  for (int g = 0; g < world; ++g) {
    pid_t pid = fork();
    if (pid == 0) {
      execl("/proc/self/exe", argv0, "--worker", pattern.c_str(),
            std::to_string(g).c_str(), dir.c_str(), std::to_string(lanes).c_str(),
            kill_peer ? "kill" : "run", ViaName(via),
            std::to_string(gpus).c_str(), (char*)nullptr);
      _exit(127);
    }
    pids.push_back(pid);
  }
  bool ok = true;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(limit_s);
  std::vector<bool> done(world, false);
  for (int left = world; left > 0;) {
    for (int g = 0; g < world; ++g) {
      int st = 0;
      if (done[g] || waitpid(pids[g], &st, WNOHANG) != pids[g]) continue;
      done[g] = true;
      --left;
      if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) ok = false;
    }
    if (left > 0 && std::chrono::steady_clock::now() > until) {
      for (int g = 0; g < world; ++g) {
        if (done[g]) continue;
        std::fprintf(stderr, "%s: rank %d still running after %d s: killed\n",
                     pattern.c_str(), g, limit_s);
        kill(pids[g], SIGKILL);
        waitpid(pids[g], nullptr, 0);
      }
      return false;
    }
    if (left > 0) usleep(20000);
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  if (argc >= 2 && std::string(argv[1]) == "--worker") {
    return Worker(argv[2], std::atoi(argv[3]), argv[4], std::atoi(argv[5]),
                  argc >= 7 && std::string(argv[6]) == "kill",
                  ViaOf(argc >= 8 ? argv[7] : "nccl"),
                  argc >= 9 ? std::max(1, std::atoi(argv[8])) : 1);
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("SKIP nccl_patterns_gpu: no CUDA device\n");
    return 0;
  }
  const int gpus = std::atoi(testing::FlagValue(argc, argv, "gpus", std::to_string(count)).c_str());
  const int lanes = std::atoi(testing::FlagValue(argc, argv, "lanes", "2").c_str());
  const std::string only = testing::FlagValue(argc, argv, "pattern", "");
  // The pull path ("ipc" is its earlier name, still accepted).
  const Via via = ViaOf(testing::FlagValue(argc, argv, "transport", "nccl"));
  const char* via_note = via == Via::kPull        ? ", pull path"
                         : via == Via::kNcclHosts ? ", NCCL, a host per rank"
                                                  : "";
  int failed = 0;
  for (const std::string& p : testing::PatternNames()) {
    if (!only.empty() && p != only) continue;
    if (via == Via::kPull && p == "relay") {  // MakeMemberRunner refuses relays on pulled pairs
      std::printf("SKIP relay: the pull path moves trainer-to-engine pairs only\n");
      continue;
    }
    auto plan = testing::MakePatternPlan(p, lanes, 2);
    const int world = plan->src.world_size + plan->dst.world_size;
    if (world > gpus && via == Via::kNccl) {
      std::printf("SKIP %s: needs %d GPUs, have %d\n", p.c_str(), world, gpus);
      continue;
    }
    const bool ok = RunWorkers(argv[0], p, world, lanes, false, via, gpus);
    std::printf("%s %s (%d ranks on %d GPUs, %d lanes%s)\n", ok ? "PASS" : "FAIL", p.c_str(),
                world, std::min(world, gpus), lanes, via_note);
    std::fflush(stdout);
    if (!ok) ++failed;
  }
  if (only.empty() || only == "killed-peer") {
    if (gpus < 2 && via == Via::kNccl) {
      std::printf("SKIP killed-peer: needs 2 GPUs, have %d\n", gpus);
    } else {
      const bool ok = RunWorkers(argv[0], "1to1", 2, lanes, true, via, gpus);
      std::printf("%s killed-peer (2 ranks, %d lanes%s)\n", ok ? "PASS" : "FAIL",
                  lanes, via_note);
      if (!ok) ++failed;
    }
  }
  return failed ? 1 : 0;
}

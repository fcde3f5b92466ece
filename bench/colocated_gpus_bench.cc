// colocated_gpus_bench: colocated refit across the two GPUs of a host, as RL
// jobs run it: Megatron TP2 on GPUs 0-1 (trainer rank r on GPU r) into vLLM
// on the same two GPUs (engine rank r on GPU r), every member its own
// process, the plan from the planner (ranks placed on their GPUs), the
// pull runner (exec/pull/cuda/pull_runner.h) moving the bytes. Built here, run
// on a 2-GPU host from the bundle.
//
//   colocated_gpus_bench [--cases=tp2,dp2] [--model=qwen3-8b] [--iters=5]
//                        [--tables=copies,rounds] [--peer_copy_streams=4]
//                        (--peer_copy_streams: the copies table's streams)
//
// Cases: tp2 = Megatron TP2 -> vLLM TP2; dp2 = Megatron TP2 -> vLLM TP1 x
// DP2 (each engine GPU holds the whole model, half of it read from the
// other GPU).
// Tables, per case:
//   copies  one process, both GPUs at once (colocated_gpus_copies.h): the
//           floors (cudaMemcpyPeerAsync of the bytes an engine reads from
//           the other GPU; one device copy of those it reads from its
//           own), the pull kernel and the copy engines over the peer
//           copies, NCCL over the same pairs, and the whole engine's
//           copies by one kernel and by kernel || copy engines. The engine
//           bytes are checked after one run of each whole way.
//   rounds  4 processes (2 trainers, 2 engines): the pull runner (every
//           copy from its own GPU in its kernel, the copies from the other
//           GPU on the copy engines over kPeerCopyStreams streams,
//           "kernel+CE"): the
//           refit round (from the
//           last trainer's "weights in place" until both engines are done,
//           mean of --iters rounds after a warm-up) next to the floor (the
//           slowest GPU's local bytes at the measured device-copy rate
//           plus its peer bytes at the measured peer rate, rates from the
//           copies table of the same run) and next to NCCL (NCCL
//           send/recv of the peer bytes plus the local device copy).
//           Engine bytes: the pattern checked on the GPU after round 1,
//           later rounds (trainers XOR their weights with a new key)
//           checked by a position-dependent checksum of every byte.
// The last lines are one table. Exit 1 if any check fails; SKIP (exit 0)
// with fewer than 2 GPUs.
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "bench/colocated_common.h"
#include "bench/colocated_gpus_common.h"
#include "bench/colocated_gpus_copies.h"
#include "bench/colocated_spawn.h"
#include "common/status_macros.h"
#include "exec/pull/cuda/pull_kernels.h"
#include "exec/pull/cuda/pull_runner.h"
#include "plan/plan_codec.h"
#include "testing/dir_kv_store.h"
#include "testing/flags.h"

namespace refit::bench {
namespace {

constexpr int kTrainers = 2;
constexpr int kMembers = 4;  // trainers 0-1, engines 0-1 (global 2-3)

// Waits until every member wrote its mark for `tag`.
absl::Status Barrier(KvStore* kv, const std::string& tag, int me) {
  REFIT_RETURN_IF_ERROR(kv->Set(absl::StrCat(tag, "/", me), "1"));
  for (int i = 0; i < kMembers; ++i) {
    REFIT_RETURN_IF_ERROR(kv->Get(absl::StrCat(tag, "/", i), absl::Seconds(120)).status());
  }
  return absl::OkStatus();
}

// Member `g` of the rounds table (its own process, on GPU rank).
absl::StatusOr<std::map<std::string, std::string>> RoundMember(const Plan& plan, int g,
                                                              const std::string& dir, int iters) {
  const bool trainer = g < kTrainers;
  const Side side = trainer ? Side::kTrainer : Side::kEngine;
  const int rank = trainer ? g : g - kTrainers;
  CK(cudaSetDevice(rank));
  const SideLayout& full = trainer ? plan.src : plan.dst;
  REFIT_ASSIGN_OR_RETURN(Arena a, Allocate(full, rank, trainer ? 0 : 0xEE));
  if (trainer) REFIT_RETURN_IF_ERROR(Pattern(full, rank, a, 1, false));
  CK(cudaDeviceSynchronize());
  const Plan slice = ExtractSlice(plan, side, rank);
  testing::DirKvStore kv(dir);
  PullRunnerOptions po;
  po.device = rank;
  REFIT_ASSIGN_OR_RETURN(
      std::unique_ptr<PullRunner> e,
      PullRunner::Create(slice, side, rank,
                         SlicePointers(full, trainer ? slice.src : slice.dst, rank, a), &kv, po,
                         absl::Now() + absl::Seconds(120)));
  const std::vector<char*> before = a.Pointers();
  double kernel = 0;
  std::vector<std::string> starts, ends;
  unsigned long long sum1 = 0;
  std::string check = "PASS";
  for (int round = 1; round <= iters + 1; ++round) {
    if (trainer && round > 1) {
      CK(static_cast<cudaError_t>(cuda::LaunchXorBytes(
          a.base, a.bytes, static_cast<uint8_t>(Key(round) ^ Key(round - 1)), nullptr)));
      CK(cudaDeviceSynchronize());
    }
    REFIT_RETURN_IF_ERROR(Barrier(&kv, absl::StrCat("barrier", round), g));
    if (trainer) absl::SleepFor(absl::Milliseconds(20));  // the engines wait first
    const absl::Time t0 = absl::Now();
    REFIT_ASSIGN_OR_RETURN(RunStats s, e->Run(absl::Now() + absl::Seconds(60)));
    const absl::Time t1 = absl::Now();
    if (round > 1) {
      starts.push_back(absl::StrCat(absl::ToUnixNanos(t0)));
      ends.push_back(absl::StrCat(absl::ToUnixNanos(t1)));
      kernel += s.device_seconds;
    }
    if (!trainer) {
      if (round == 1) {
        absl::Status ok = Pattern(full, rank, a, 1, true);
        if (!ok.ok()) check = absl::StrCat("FAIL round 1: ", ok.message());
        REFIT_ASSIGN_OR_RETURN(sum1, Checksum(full, rank, a, 0));
      } else {
        REFIT_ASSIGN_OR_RETURN(unsigned long long h, Checksum(full, rank, a, Key(round)));
        if (h != sum1 && check == "PASS") check = absl::StrCat("FAIL round ", round, ": checksum");
      }
    }
  }
  if (a.Pointers() != before) check = "FAIL: buffer addresses changed";
  std::map<std::string, std::string> r;
  if (trainer) {
    r["starts"] = absl::StrJoin(starts, ",");
    r["ends"] = absl::StrJoin(ends, ",");
  }
  r["device_ms"] = absl::StrCat(kernel / iters * 1e3);
  r["check"] = check;
  r["bytes"] = absl::StrCat(e->bytes());
  if (!trainer) {
    r["copy_engine_copies"] = absl::StrCat(e->num_copy_engine_copies());
    r["engine_bytes"] = absl::StrCat(e->copy_engine_bytes());
    r["items"] = absl::StrCat(e->num_items());
  }
  e.reset();
  CK(cudaFree(a.base));
  return r;
}

// --worker MODE CASE INDEX DIR FLAGS (MODE: copies, member).
int Worker(int argc, char** argv) {
  if (argc < 6) return 2;
  const std::string mode = argv[2], case_name = argv[3], dir = argv[5];
  const int index = std::atoi(argv[4]);
  const int iters = std::atoi(testing::FlagValue(argc, argv, "iters", "5").c_str());
  const std::string model = testing::FlagValue(argc, argv, "model", "qwen3-8b");
  std::vector<std::string> table;
  absl::StatusOr<std::map<std::string, std::string>> r = [&]()
      -> absl::StatusOr<std::map<std::string, std::string>> {
    REFIT_ASSIGN_OR_RETURN(GpusCase c, GpusCaseNamed(case_name));
    const int streams = std::atoi(testing::FlagValue(argc, argv, "peer_copy_streams", "4").c_str());
    if (mode == "copies") {
      REFIT_ASSIGN_OR_RETURN(auto kv, CopiesTable(c, model, iters, streams, &table));
      for (size_t i = 0; i < table.size(); ++i) kv[absl::StrCat("row", i)] = table[i];
      return kv;
    }
    REFIT_ASSIGN_OR_RETURN(Plan plan, GpusCasePlan(c, model));
    return RoundMember(plan, index, dir + "/kv", iters);
  }();
  const std::string out = absl::StrCat(dir, "/result.", index);
  if (!r.ok()) {
    WriteResult(out, {{"error", std::string(r.status().ToString())}});
    return 1;
  }
  WriteResult(out, *r);
  return 0;
}

double D(const std::map<std::string, std::string>& m, const std::string& k) {
  double v = 0;
  auto it = m.find(k);
  if (it != m.end()) (void)absl::SimpleAtod(it->second, &v);
  return v;
}

// The mean round time in ms of the trainers' results: per round, from the
// last trainer's start to the last trainer's end.
double RoundMs(const std::vector<std::map<std::string, std::string>>& res) {
  std::vector<int64_t> start, end;
  for (const auto& r : res) {
    if (!r.count("starts")) continue;
    std::vector<std::string> a = absl::StrSplit(r.at("starts"), ',', absl::SkipEmpty());
    std::vector<std::string> b = absl::StrSplit(r.at("ends"), ',', absl::SkipEmpty());
    start.resize(std::max(start.size(), a.size()), 0);
    end.resize(std::max(end.size(), b.size()), 0);
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      int64_t x = 0, y = 0;
      if (absl::SimpleAtoi(a[i], &x)) start[i] = std::max(start[i], x);
      if (absl::SimpleAtoi(b[i], &y)) end[i] = std::max(end[i], y);
    }
  }
  if (start.empty() || start.size() != end.size()) return 0;
  double sum = 0;
  for (size_t i = 0; i < start.size(); ++i) sum += (end[i] - start[i]) / 1e6;
  return sum / start.size();
}

int Main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--worker") return Worker(argc, argv);
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count < 2) {
    std::printf("SKIP: colocated_gpus_bench needs 2 GPUs, found %d\nREFIT_GPU_SKIP\n", count);
    return 0;
  }
  cudaDeviceProp prop;
  (void)cudaGetDeviceProperties(&prop, 0);
  int p2p = 0;
  (void)cudaDeviceCanAccessPeer(&p2p, 0, 1);
  std::printf("GPUs 0-1: %s, peer access %s\n", prop.name, p2p ? "yes" : "NO");
  std::fflush(stdout);
  const std::string cases = testing::FlagValue(argc, argv, "cases", "tp2,dp2");
  const std::string tables = testing::FlagValue(argc, argv, "tables", "copies,rounds");
  std::vector<std::string> flags;
  for (int i = 1; i < argc; ++i) flags.push_back(argv[i]);
  bool ok = true;
  std::vector<std::string> copies_table, rounds_table;
  for (absl::string_view cn : absl::StrSplit(cases, ',')) {
    const std::string name(cn);
    absl::StatusOr<GpusCase> c = GpusCaseNamed(name);
    if (!c.ok()) {
      std::printf("%s\n", c.status().ToString().c_str());
      return 2;
    }
    auto run = [&](const std::string& mode, int n)
        -> absl::StatusOr<std::vector<std::map<std::string, std::string>>> {
      char tmpl[] = "/tmp/colocated_gpus_bench.XXXXXX";
      const std::string dir = mkdtemp(tmpl);
      (void)system(absl::StrCat("mkdir -p ", dir, "/kv").c_str());
      auto r = Spawn(argv[0], {mode, name}, n, dir, flags);
      (void)system(absl::StrCat("rm -rf ", dir).c_str());
      return r;
    };
    std::printf("== %s: %s -> %s, GPUs 0-1\n", name.c_str(), c->trainer.c_str(),
                c->engine.c_str());
    std::fflush(stdout);
    std::map<std::string, std::string> cp;
    if (absl::StrContains(tables, "copies") || absl::StrContains(tables, "rounds")) {
      auto r = run("copies", 1);
      if (!r.ok()) {
        std::printf("%s copies: %s\n", name.c_str(), r.status().ToString().c_str());
        ok = false;
        continue;
      }
      cp = (*r)[0];
      for (int i = 0; cp.count(absl::StrCat("row", i)); ++i) {
        copies_table.push_back(cp[absl::StrCat("row", i)]);
      }
      std::printf("%s: GPU 0 %s; GPU 1 %s\n", name.c_str(), cp["gpu0"].c_str(),
                  cp["gpu1"].c_str());
      for (const char* k : {"check_kernel", "check_ce", "check_hybrid"}) {
        if (cp[k] != "PASS") {
          std::printf("%s %s: %s\n", name.c_str(), k, cp[k].c_str());
          ok = false;
        }
      }
    }
    if (!absl::StrContains(tables, "rounds")) continue;
    for (const std::string mode : {"member"}) {
      auto r = run(mode, kMembers);
      const std::string way = "kernel+CE";
      if (!r.ok()) {
        std::printf("%s rounds (%s): %s\n", name.c_str(), way.c_str(),
                    r.status().ToString().c_str());
        ok = false;
        continue;
      }
      std::string check = "PASS";
      double device_ms = 0, ce_copies = 0;
      for (const auto& m : *r) {
        if (m.at("check") != "PASS") check = m.at("check");
        device_ms = std::max(device_ms, D(m, "device_ms"));
        ce_copies = std::max(ce_copies, D(m, "copy_engine_copies"));
      }
      if (check != "PASS") {
        ok = false;
        std::printf("%s rounds (%s): %s\n", name.c_str(), way.c_str(), check.c_str());
      }
      const double ms = RoundMs(*r);
      const double floor = D(cp, "floor_ms");
      const double nccl = D(cp, "nccl-peer") + D(cp, "memcpy-local");
      rounds_table.push_back(absl::StrFormat(
          "%-4s %-15s %-9s %9.2f %9.2f %7.3fx %9.2f %7.3fx %9.2f %6.0f  %s", name, c->engine,
          way, ms, floor, floor > 0 ? ms / floor : 0.0, nccl, nccl > 0 ? ms / nccl : 0.0,
          device_ms, ce_copies, check.substr(0, 40)));
      std::printf("%s\n", rounds_table.back().c_str());
      std::fflush(stdout);
    }
  }
  if (!copies_table.empty()) {
    std::printf("\ncase way                       time        rate  vs floor  what\n");
    for (const std::string& l : copies_table) std::printf("%s\n", l.c_str());
  }
  if (!rounds_table.empty()) {
    std::printf("\ncase engine          pull      round ms  floor ms   ratio   NCCL ms   ratio device ms CE ops  bytes\n");
    for (const std::string& l : rounds_table) std::printf("%s\n", l.c_str());
    std::printf("(Megatron TP2 on GPUs 0-1, one process per member; floor = the slowest GPU's\n"
                " local bytes at the device-copy rate + its peer bytes at the peer rate, both\n"
                " measured in this run; NCCL = NCCL send/recv of the peer bytes + the local copy)\n");
  }
  std::printf("%s\n", ok ? "ALL PASS" : "FAILED");
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace refit::bench

int main(int argc, char** argv) { return refit::bench::Main(argc, argv); }

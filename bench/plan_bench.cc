// plan_bench: prints planner figures for DeepSeek-V3- and Kimi-K2-sized
// refits (a program that prints figures, not a timed test).
//
// For each case: mapping time (both sides), BuildPlan time (single-threaded
// wall time, pinned to CPU 0 when possible), peak RSS, ExtractSlice time for
// the busiest and a median engine rank, every rank's slice as refitd hands
// them out, ToProto size, segments, messages,
// waves, a power-of-two message-size histogram, max/mean bytes per rank and
// the fingerprint. Targets (issue 3): plan <= 1 s, peak RSS <= 1 GiB, one
// slice <= 50 ms.
//
//   bazel run -c opt //bench:plan_bench [-- --reps=N] [--relay]
//
// --relay plans with relays (engine replicas forwarding to each other).
#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <numeric>
#include <string>
#include <utility>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/huge_pages.h"
#include "common/status_macros.h"
#include "mapping/mapping.h"
#include "plan/plan_codec.h"
#include "plan/planner.h"

namespace refit {
// The CPUs the bench was started with (before pinning to CPU 0).
cpu_set_t all_cpus;
// --relay: plan with relays (PlannerOptions::relay).
bool relay = false;
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Peak resident set size of this process in MiB (ru_maxrss is KiB on Linux).
double PeakRssMib() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / 1024.0;
}

std::string Bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char buf[64];
  snprintf(buf, sizeof(buf), "%.2f %s", b, units[u]);
  return buf;
}

struct Case {
  const char* title;
  const char* model;
  const char* trainer;
  const char* engine;
  // Weights in bf16 (fp8_block = 0): vLLM TP32 would split DeepSeek-V3's
  // 128x128 FP8 scale blocks (18432 / 32 = 576 rows), which the mapping
  // rightly rejects; RL trainers hand over bf16 weights anyway.
  bool bf16 = false;
};

void PrintImbalance(const char* what, const std::vector<int64_t>& v) {
  if (v.empty()) return;
  const int64_t mx = *std::max_element(v.begin(), v.end());
  const int64_t mn = *std::min_element(v.begin(), v.end());
  const double mean =
      std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  printf("  %-15s max %s  mean %s  min %s  max/mean %.3f\n", what,
         Bytes(mx).c_str(), Bytes(mean).c_str(), Bytes(mn).c_str(),
         mean > 0 ? mx / mean : 0.0);
}

absl::Status RunCase(const Case& c, int reps) {
  printf("=== %s: %s, %s -> %s\n", c.title, c.model, c.trainer, c.engine);
  const auto t0 = Clock::now();
  REFIT_ASSIGN_OR_RETURN(ModelConfig model, LoadModelConfig(c.model));
  if (c.bf16) REFIT_RETURN_IF_ERROR(SetWeightDType(&model, "bf16"));
  REFIT_ASSIGN_OR_RETURN(TrainerSpec ts, ParseTrainerSpec(c.trainer));
  REFIT_ASSIGN_OR_RETURN(EngineSpec es, ParseEngineSpec(c.engine));
  REFIT_ASSIGN_OR_RETURN(MappedSide src, BuildTrainerLayout(model, ts));
  const auto tm = Clock::now();
  REFIT_ASSIGN_OR_RETURN(MappedSide dst, BuildEngineLayout(model, es));
  const auto t1 = Clock::now();
  printf("  mapping         %.1f ms (trainer %.1f ms, engine %.1f ms), peak RSS "
         "%.1f MiB\n", Ms(t0, t1), Ms(t0, tm), Ms(tm, t1), PeakRssMib());
  printf("  layouts         (tensors %zu; trainer %d ranks, %zu "
         "buffers, %zu records; engine %d ranks, %zu buffers, %zu records)\n",
         src.layout.tensors.size(), src.layout.world_size,
         src.layout.buffers.size(), src.layout.records.size(),
         dst.layout.world_size, dst.layout.buffers.size(),
         dst.layout.records.size());

  PlannerOptions options;
  options.relay = relay;
  Plan plan;
  std::vector<double> times;
  // CPU time of the runs: user (the planner's own work) and system (page
  // faults; on a paravirtualized machine first-touching fresh memory is what
  // varies most).
  double user_s = 0, sys_s = 0;
  auto cpu = [](double* u, double* sy) {
    rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    *u = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6;
    *sy = ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
  };
  for (int i = 0; i < reps; ++i) {
    // The planner takes its inputs over (as refitd and the CLI do): copy
    // them outside the timed region.
    SideLayout s = src.layout, d = dst.layout;
    double u0, s0, u1, s1;
    cpu(&u0, &s0);
    const auto a = Clock::now();
    REFIT_ASSIGN_OR_RETURN(Plan p, BuildPlan(std::move(s), std::move(d), options));
    const auto b = Clock::now();
    cpu(&u1, &s1);
    user_s += u1 - u0;
    sys_s += s1 - s0;
    times.push_back(Ms(a, b));
    if (i == 0) plan = std::move(p);
  }
  std::sort(times.begin(), times.end());
  {
    std::string ph;
    for (const auto& [name, sec] : plan.stats.phase_seconds) {
      absl::StrAppend(&ph, " ", name, " ", static_cast<int>(sec * 1e3 + 0.5));
    }
    printf("  phases (ms, first run):%s\n", ph.c_str());
  }
  printf("  BuildPlan       min %.1f ms  median %.1f ms  max %.1f ms  (%d runs)\n",
         times.front(), times[times.size() / 2], times.back(), reps);
  printf("  BuildPlan CPU   user %.1f ms  system %.1f ms  (mean per run)\n",
         user_s * 1e3 / reps, sys_s * 1e3 / reps);
  const PlanStats& st = plan.stats;
  printf("  plan            %s total, %lld segments, %lld messages, %lld waves\n",
         Bytes(st.total_bytes).c_str(), static_cast<long long>(st.num_segments),
         static_cast<long long>(st.num_messages),
         static_cast<long long>(st.num_waves));

  // Message-size histogram, power-of-two buckets [2^k, 2^(k+1)).
  std::map<int, int64_t> hist;
  int64_t contiguous_src = 0, contiguous_dst = 0;
  for (const Message& m : plan.messages) {
    int k = 0;
    while (k < 62 && (int64_t{2} << k) <= m.bytes) ++k;
    ++hist[m.bytes == 0 ? -1 : k];
    contiguous_src += m.src_contiguous;
    contiguous_dst += m.dst_contiguous;
  }
  printf("  zero-copy       %lld messages on the sender, %lld on the receiver\n",
         static_cast<long long>(contiguous_src),
         static_cast<long long>(contiguous_dst));
  printf("  message sizes (power-of-two buckets):\n");
  for (const auto& [k, n] : hist) {
    if (k < 0) {
      printf("    0 B: %lld\n", static_cast<long long>(n));
      continue;
    }
    printf("    [%s, %s): %lld\n", Bytes(static_cast<double>(int64_t{1} << k)).c_str(),
           Bytes(static_cast<double>(int64_t{2} << k)).c_str(),
           static_cast<long long>(n));
  }
  PrintImbalance("sent/trainer", st.bytes_sent);
  PrintImbalance("recv/engine", st.bytes_received);
  PrintImbalance("staging/trainer", st.staging_src);
  PrintImbalance("staging/engine", st.staging_dst);

  // Slices: busiest engine rank (most messages received) and a median one.
  std::vector<int64_t> msgs_of(dst.layout.world_size, 0);
  for (const Message& m : plan.messages) ++msgs_of[m.dst_rank];
  std::vector<int32_t> order(dst.layout.world_size);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return msgs_of[a] != msgs_of[b] ? msgs_of[a] > msgs_of[b] : a < b;
  });
  std::vector<int64_t> smsgs_of(src.layout.world_size, 0);
  for (const Message& m : plan.messages) ++smsgs_of[m.src_rank];
  const int32_t busiest_src = static_cast<int32_t>(
      std::max_element(smsgs_of.begin(), smsgs_of.end()) - smsgs_of.begin());
  struct Pick {
    const char* label;
    Side side;
    int32_t rank;
  };
  const Pick picks[] = {
      {"busiest engine", Side::kEngine, order.front()},
      {"median engine", Side::kEngine, order[order.size() / 2]},
      {"busiest trainer", Side::kTrainer, busiest_src},
  };
  for (const Pick& p : picks) {
    double best = 1e30;
    Plan slice;
    for (int i = 0; i < reps; ++i) {
      const auto a = Clock::now();
      Plan s = ExtractSlice(plan, p.side, p.rank);
      best = std::min(best, Ms(a, Clock::now()));
      if (i == 0) slice = std::move(s);
    }
    const size_t wire = ToProto(slice).ByteSizeLong();
    printf("  slice %-15s rank %3d: %.2f ms, %zu messages, %zu segments, "
           "%zu records, proto %s\n",
           p.label, p.rank, best, slice.messages.size(), slice.segments.size(),
           slice.src.records.size() + slice.dst.records.size(),
           Bytes(wire).c_str());
  }
  // What refitd does once per membership: every rank's slice, on the wire
  // (SerializedSlices, as refitd calls it), on one thread and on every core.
  std::vector<int32_t> src_ranks(src.layout.world_size), dst_ranks(dst.layout.world_size);
  for (int32_t r = 0; r < src.layout.world_size; ++r) src_ranks[r] = r;
  for (int32_t r = 0; r < dst.layout.world_size; ++r) dst_ranks[r] = r;
  const int cores = std::max(1, CPU_COUNT(&all_cpus));
  for (int threads : {1, cores}) {
    if (threads == cores && cores == 1) break;
    // The multi-threaded run may use every CPU the bench was given.
    cpu_set_t pinned;
    sched_getaffinity(0, sizeof(pinned), &pinned);
    if (threads > 1) sched_setaffinity(0, sizeof(all_cpus), &all_cpus);
    const auto a = Clock::now();
    size_t bytes = 0;
    for (const auto* v : {&src_ranks, &dst_ranks}) {
      for (const std::string& p : SerializedSlices(
               plan, v == &src_ranks ? Side::kTrainer : Side::kEngine, *v, threads)) {
        bytes += p.size();
      }
    }
    printf("  all slices      %.1f ms for %d ranks on %d thread%s (ExtractSlice + "
           "ToProto + serialize), %s\n",
           Ms(a, Clock::now()), src.layout.world_size + dst.layout.world_size,
           threads, threads == 1 ? "" : "s", Bytes(static_cast<double>(bytes)).c_str());
    sched_setaffinity(0, sizeof(pinned), &pinned);
  }
  const auto pa = Clock::now();
  const size_t proto_bytes = ToProto(plan).ByteSizeLong();
  printf("  ToProto         %.1f ms, %s\n", Ms(pa, Clock::now()),
         Bytes(proto_bytes).c_str());
  printf("  fingerprint     %s\n", plan.fingerprint.c_str());
  printf("  peak RSS        %.1f MiB (process so far)\n", PeakRssMib());
  return absl::OkStatus();
}

}  // namespace
}  // namespace refit

int main(int argc, char** argv) {
  refit::ReexecWithHugePages(argv);  // first: see common/huge_pages.h
  setvbuf(stdout, nullptr, _IOLBF, 0);
  int reps = 3;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--reps=", 7) == 0) reps = std::max(1, atoi(argv[i] + 7));
    if (std::strcmp(argv[i], "--relay") == 0) refit::relay = true;
  }
  sched_getaffinity(0, sizeof(refit::all_cpus), &refit::all_cpus);
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(0, &set);
  const bool pinned = sched_setaffinity(0, sizeof(set), &set) == 0;
  printf("plan_bench: single-threaded, %s, %d runs per timing\n",
         pinned ? "pinned to CPU 0" : "not pinned", reps);
  {
    // How fast this machine is right now (shared VMs vary several-fold):
    // sorting 4 M pseudo-random int64, and first-touching 256 MiB.
    std::vector<int64_t> v(int64_t{1} << 22);
    uint64_t x = 88172645463325252ULL;
    for (int64_t& e : v) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      e = static_cast<int64_t>(x);
    }
    const auto a = refit::Clock::now();
    std::sort(v.begin(), v.end());
    const auto b = refit::Clock::now();
    std::vector<char> touch(size_t{256} << 20);
    for (size_t i = 0; i < touch.size(); i += 4096) touch[i] = 1;
    const auto c = refit::Clock::now();
    printf("machine: sort of 4 M int64 %.0f ms; first touch of 256 MiB %.0f ms "
           "(%d)\n", refit::Ms(a, b), refit::Ms(b, c), touch[4096]);
  }
  const refit::Case cases[] = {
      {"DeepSeek-V3", "deepseek-v3", "megatron:tp=1,pp=16,ep=16,etp=1,dp=16",
       "vllm:tp=32,dp=8", /*bf16=*/true},
      {"Kimi-K2", "kimi-k2", "megatron:tp=1,pp=16,ep=16,etp=1,dp=16",
       "vllm:tp=16,dp=8"},
  };
  int rc = 0;
  for (const refit::Case& c : cases) {
    absl::Status s = refit::RunCase(c, reps);
    if (!s.ok()) {
      fprintf(stderr, "%s: %s\n", c.title, s.ToString().c_str());
      rc = 1;
    }
  }
  return rc;
}

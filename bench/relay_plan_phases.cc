// relay_plan_phases: the planner's phases with relays on and off, runs
// alternating in one process (the layouts mapped once), per phase the
// median and the least of the runs: what relays add to planning a model.
//
//   bazel run -c opt //bench:relay_plan_phases -- [--reps=N] [--model=kimi-k2]
//       [--trainer=megatron:tp=8,pp=16,ep=16,etp=1,dp=2]
//       [--engine=vllm:tp=16,dp=8,quant=fp8]
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/huge_pages.h"
#include "common/status_macros.h"
#include "job/job_plan.h"
#include "mapping/model_config.h"
#include "mapping/parallel_spec.h"

namespace refit {
namespace {

struct Args {
  int reps = 7;
  std::string model = "kimi-k2";
  std::string trainer = "megatron:tp=8,pp=16,ep=16,etp=1,dp=2";
  std::string engine = "vllm:tp=16,dp=8,quant=fp8";
};

// Returns this thread's CPU seconds (user and system).
double CpuSeconds() {
  rusage ru;
  getrusage(RUSAGE_THREAD, &ru);
  return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec +
         ru.ru_stime.tv_usec * 1e-6;
}

// Returns the median of `v` (sorted here).
double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

absl::Status Run(const Args& a) {
  REFIT_ASSIGN_OR_RETURN(ModelConfig model, LoadModelConfig(a.model));
  REFIT_RETURN_IF_ERROR(SetWeightDType(&model, "bf16"));  // as `refit plan`
  REFIT_ASSIGN_OR_RETURN(TrainerSpec ts, ParseTrainerSpec(a.trainer));
  REFIT_ASSIGN_OR_RETURN(EngineSpec es, ParseEngineSpec(a.engine));
  const std::vector<JobEngine> engines = {JobEngine{"engine", es}};
  REFIT_ASSIGN_OR_RETURN(const JobLayouts layouts, MapJob(model, ts, engines));
  const JobPlacement placement = ShorthandPlacement(ts.world_size(), es.world_size(), 8, false);
  // Per mode (off, on): per phase its times; "planner": the whole build.
  std::map<std::string, std::vector<double>> times[2];
  std::vector<std::string> order[2];
  std::string fingerprint[2];
  for (int i = 0; i < a.reps; ++i) {
    for (int relay = 0; relay < 2; ++relay) {
      PlannerOptions po;
      po.relay = relay == 1;
      JobLayouts copy = layouts;
      const double c0 = CpuSeconds();
      const auto t0 = std::chrono::steady_clock::now();
      REFIT_ASSIGN_OR_RETURN(Plan plan, PlanJob(std::move(copy), engines, placement, po));
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      times[relay]["planner"].push_back(s);
      times[relay]["planner_cpu"].push_back(CpuSeconds() - c0);
      for (const auto& [phase, sec] : plan.stats.phase_seconds) {
        if (times[relay].count(phase) == 0) order[relay].push_back(phase);
        times[relay][phase].push_back(sec);
      }
      fingerprint[relay] = plan.fingerprint;
    }
  }
  printf("%s %s -> %s, %d runs each (relay off, on alternating)\n", a.model.c_str(),
         a.trainer.c_str(), a.engine.c_str(), a.reps);
  printf("fingerprints: off %s, on %s\n", fingerprint[0].c_str(), fingerprint[1].c_str());
  printf("%-12s %10s %10s %10s %10s\n", "phase (s)", "off med", "off min", "on med", "on min");
  std::vector<std::string> all = {"planner", "planner_cpu"};
  for (int m = 1; m >= 0; --m) {
    for (const std::string& p : order[m]) {
      if (std::find(all.begin(), all.end(), p) == all.end()) all.push_back(p);
    }
  }
  for (const std::string& p : all) {
    printf("%-12s", p.c_str());
    for (int m = 0; m < 2; ++m) {
      const auto it = times[m].find(p);
      if (it == times[m].end()) {
        printf(" %10s %10s", "-", "-");
      } else {
        printf(" %10.4f %10.4f", Median(it->second),
               *std::min_element(it->second.begin(), it->second.end()));
      }
    }
    printf("\n");
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace refit

int main(int argc, char** argv) {
  refit::ReexecWithHugePages(argv);
  refit::Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto value = [&](const char* flag) -> const char* {
      const size_t n = std::strlen(flag);
      return s.compare(0, n, flag) == 0 ? argv[i] + n : nullptr;
    };
    if (const char* v = value("--reps=")) {
      a.reps = std::max(1, atoi(v));
    } else if (const char* v = value("--model=")) {
      a.model = v;
    } else if (const char* v = value("--trainer=")) {
      a.trainer = v;
    } else if (const char* v = value("--engine=")) {
      a.engine = v;
    } else {
      fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  const absl::Status s = refit::Run(a);
  if (!s.ok()) {
    fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}

// placement_bench: prints, for each placed layout of testing/placement_cases.h,
// the plan's predicted refit time, its lower bound, their ratio (target
// <= 1.05), bytes per link class (within one GPU, between GPUs of one host,
// across hosts), and the BuildPlan wall time.
//
//   bazel run -c opt //bench:placement_bench [-- --small]
#include <chrono>
#include <cstdio>
#include <cstring>

#include "testing/placement_cases.h"

int main(int argc, char** argv) {
  const bool small = argc > 1 && std::strcmp(argv[1], "--small") == 0;
  std::printf("%-48s %10s %10s %7s %10s %10s %10s %9s\n", "layout", "predicted",
              "bound", "ratio", "GPU GiB", "host GiB", "inter GiB", "plan s");
  int worst = 0;
  for (const refit::PlacementCase& c : refit::PlacementCases()) {
    if (small && c.large) continue;
    const auto t0 = std::chrono::steady_clock::now();
    auto plan = refit::PlanPlacementCase(c);
    const double sec = std::chrono::duration<double>(
                           std::chrono::steady_clock::now() - t0).count();
    if (!plan.ok()) {
      std::printf("%-48s error: %s\n", c.name.c_str(),
                  std::string(plan.status().message()).c_str());
      worst = 1;
      continue;
    }
    const refit::PlanStats& s = plan->stats;
    const double ratio = s.lower_bound_seconds > 0
                             ? s.predicted_seconds / s.lower_bound_seconds
                             : 0;
    std::printf("%-48s %8.2fms %8.2fms %7.3f %10.2f %10.2f %10.2f %9.3f%s\n",
                c.name.c_str(), s.predicted_seconds * 1e3,
                s.lower_bound_seconds * 1e3, ratio, s.same_gpu_bytes / 1073741824.0,
                s.intra_host_bytes / 1073741824.0, s.inter_host_bytes / 1073741824.0,
                sec, ratio > 1.05 ? "  ABOVE TARGET" : "");
  }
  return worst;
}

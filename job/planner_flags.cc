// The planner's flags (see planner_flags.h).
#include "job/planner_flags.h"

#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "job/job_plan.h"
#include "plan/host_delta.h"
#include "plan/plan.h"

ABSL_FLAG(int64_t, staging_mib, 512, "planner staging budget per rank, in MiB");
ABSL_FLAG(int64_t, lanes, 2, "planner lanes: waves in flight at once (at most 64)");
ABSL_FLAG(int64_t, max_plan_mib, 16384,
          "refuse a plan whose estimated size (one record per tensor per rank)\n"
          "is over this many MiB, before building it");
ABSL_FLAG(std::string, relay, refit::kRelayFlagDefault, refit::kRelayFlagHelp);
ABSL_FLAG(double, host_link_gbps, 0,
          "GB/s the links between members on host memory (no GPU) carry, within\n"
          "and between hosts (0: Gloo over TCP, 1 within a host, 1.25 between);\n"
          "their rounds are predicted at it, and delta rounds run dense where it is\n"
          "above the host delta codec's rate (docs/delta.md)");
ABSL_FLAG(double, host_codec_gbps, refit::HostDeltaModel().codec_gbps,
          "GB/s of message bytes one host member's delta codec handles");

namespace refit {

absl::Status CheckPlannerFlags(int64_t staging_mib, int64_t lanes, int64_t max_plan_mib) {
  if (staging_mib < 1 || staging_mib > kMaxStagingMib) {
    return absl::InvalidArgumentError(
        absl::StrCat("--staging_mib ", staging_mib, ": must be 1..", kMaxStagingMib));
  }
  if (lanes < 1 || lanes > kMaxLanes) {
    return absl::InvalidArgumentError(absl::StrCat("--lanes ", lanes, ": must be 1..", kMaxLanes));
  }
  if (max_plan_mib < 1 || max_plan_mib > kMaxStagingMib) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_plan_mib ", max_plan_mib, ": must be 1..", kMaxStagingMib));
  }
  return absl::OkStatus();
}

}  // namespace refit

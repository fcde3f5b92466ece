// The planner's flags, declared once for refitd and the `refit` command so
// that a dry run reads them as refitd does: --staging_mib (the staging
// budget per rank, MiB), --lanes (waves in flight at once, at most 64) and
// --max_plan_mib (refuse a plan whose estimated size is above it, MiB) and
// --relay (engine ranks forward bytes to other replicas: on or off;
// job/job_plan.h ParseRelayFlag), --host_link_gbps and --host_codec_gbps
// (members on host memory: their links and delta codec, plan/host_delta.h
// HostDeltaFromFlags).
// CheckPlannerFlags checks the ranges of the first three for both programs,
// naming the flag that is wrong.
#ifndef REFIT_JOB_PLANNER_FLAGS_H_
#define REFIT_JOB_PLANNER_FLAGS_H_

#include <cstdint>
#include <string>

#include "absl/flags/declare.h"
#include "absl/status/status.h"

ABSL_DECLARE_FLAG(int64_t, staging_mib);
ABSL_DECLARE_FLAG(int64_t, lanes);
ABSL_DECLARE_FLAG(int64_t, max_plan_mib);
ABSL_DECLARE_FLAG(std::string, relay);
ABSL_DECLARE_FLAG(double, host_link_gbps);
ABSL_DECLARE_FLAG(double, host_codec_gbps);

namespace refit {

// The most staging (and plan budget) a flag may name, in MiB: 1 TiB.
inline constexpr int64_t kMaxStagingMib = int64_t{1} << 20;

// Returns OK when --staging_mib, --lanes and --max_plan_mib (their values
// given) are in range (1..kMaxStagingMib, 1..kMaxLanes of plan/plan.h,
// 1..kMaxStagingMib); else INVALID_ARGUMENT "--<flag> <value>: must be
// <range>".
absl::Status CheckPlannerFlags(int64_t staging_mib, int64_t lanes, int64_t max_plan_mib);

}  // namespace refit

#endif  // REFIT_JOB_PLANNER_FLAGS_H_

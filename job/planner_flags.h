// The planner's flags, declared once for refitd and the `refit` command so
// that a dry run reads them as refitd does: --staging_mib (the staging
// budget per rank, MiB), --lanes (waves in flight at once, at most 64) and
// --max_plan_mib (refuse a plan whose estimated size is above it, MiB) and
// --relay (engine ranks forward bytes to other replicas: on or off;
// job/job_plan.h ParseRelayFlag), --host_link_gbps and --host_codec_gbps
// (members on host memory: their links and delta codec, plan/host_delta.h
// HostDeltaFromFlags).
// Each program checks their ranges and says which flag is wrong.
#ifndef REFIT_JOB_PLANNER_FLAGS_H_
#define REFIT_JOB_PLANNER_FLAGS_H_

#include <cstdint>
#include <string>

#include "absl/flags/declare.h"

ABSL_DECLARE_FLAG(int64_t, staging_mib);
ABSL_DECLARE_FLAG(int64_t, lanes);
ABSL_DECLARE_FLAG(int64_t, max_plan_mib);
ABSL_DECLARE_FLAG(std::string, relay);
ABSL_DECLARE_FLAG(double, host_link_gbps);
ABSL_DECLARE_FLAG(double, host_codec_gbps);

#endif  // REFIT_JOB_PLANNER_FLAGS_H_

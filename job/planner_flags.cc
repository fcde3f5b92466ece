// The planner's flags (see planner_flags.h).
#include "job/planner_flags.h"

#include <string>

#include "absl/flags/flag.h"
#include "job/job_plan.h"

ABSL_FLAG(int64_t, staging_mib, 512, "planner staging budget per rank, in MiB");
ABSL_FLAG(int64_t, lanes, 2, "planner lanes: waves in flight at once (at most 64)");
ABSL_FLAG(int64_t, max_plan_mib, 16384,
          "refuse a plan whose estimated size (one record per tensor per rank)\n"
          "is over this many MiB, before building it");
ABSL_FLAG(std::string, relay, refit::kRelayFlagDefault, refit::kRelayFlagHelp);

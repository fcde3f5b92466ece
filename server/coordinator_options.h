// CoordinatorOptions: what refitd's coordinator (coordinator.h) is
// configured with; RefitServer::Options nests them and refitd sets each
// from a flag.
#ifndef REFIT_SERVER_COORDINATOR_OPTIONS_H_
#define REFIT_SERVER_COORDINATOR_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "server/kv_table.h"
#include "server/plan_function.h"

namespace refit {

struct CoordinatorOptions {
  PlanFunction plan_function;  // required
  int min_engines = 1;         // complete engines needed for a plan
  int max_buffers_per_member = 1 << 20;
  int64_t max_metadata_bytes = 64 << 20;  // per registration
  // Every member's registration together (serialized bytes); a
  // registration beyond: RESOURCE_EXHAUSTED.
  int64_t max_registration_bytes = int64_t{1} << 30;
  int max_members = 16384;  // a new member beyond: RESOURCE_EXHAUSTED
  // Parked KvGet(wait) calls of members outside the current plan: in all,
  // and of one caller (its address); of any one member; beyond them a
  // KvGet(wait) is answered RESOURCE_EXHAUSTED at once. A plan member's
  // waits count only against its own bound, so no one else exhausts them.
  int max_kv_waits = 16384;
  int max_kv_waits_per_caller = 1024;
  int max_kv_waits_per_member = 256;
  absl::Duration heartbeat_timeout = absl::Seconds(10);
  absl::Duration round_timeout = absl::Minutes(30);
  // A new plan is built once the membership was unchanged for plan_settle,
  // or plan_settle_max after the first change not yet planned.
  absl::Duration plan_settle = absl::Milliseconds(20);
  absl::Duration plan_settle_max = absl::Milliseconds(500);
  // Plans kept for memberships seen before (an engine that leaves and
  // comes back gets its old plan without planning again): at most 16, and
  // at most this many serialized slice bytes in all (a DeepSeek-V3
  // 256 -> 256 plan is ~0.7 GB). The current plan is kept regardless.
  int64_t max_plan_cache_bytes = int64_t{2} << 30;
  int rounds_kept = 64;  // round summaries in GetStatus
  // Delta rounds (docs/delta.md): trainers send engines that hold the last
  // committed version only what changed; these rounds are verified.
  bool delta = false;
  // Verify every Nth round that is not a delta round (0: never).
  int32_t verify_every = 0;
  std::string kv_prefix = "refit";
  KvTable::Quota kv_quota;  // key-value bytes per member and in total
  // The job key every registration must carry (empty: none); see
  // member_credentials.h.
  std::string job_key;
  absl::Duration tick = absl::Milliseconds(10);  // housekeeping period
};

}  // namespace refit

#endif  // REFIT_SERVER_COORDINATOR_OPTIONS_H_

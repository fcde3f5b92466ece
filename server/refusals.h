// Refusals: the members that cannot join and said so. A worker whose engine
// holds a layout refit does not write (or whose parameters do not match its
// convention) cannot register; without a word from it, every other member
// would wait for it until its own deadline. Instead it sends refitd a
// refusal (RegisterRequest.refusal) under its identity, and every member of
// its job waiting for a plan fails at once with FAILED_PRECONDITION naming
// it and its reason. A refusal touches only its own job: one under another
// job name (made up or not) fails no member of this one.
//
// A refusal stands until its member registers (the worker restarted with a
// setting refit writes) or `ttl` passes (a job that changed shape does not
// meet it forever). Its reason is kept with control bytes escaped
// (common/printable.h) and cut to kMaxRefusalReasonBytes. At most
// `max_entries` are held in all and kMaxPerJob of one job. When all
// `max_entries` are held, a refusal of a job holding fewer than another
// job replaces that job's oldest, so refusals under other job names never
// keep a job's own out. Not thread-safe: the coordinator's lock guards it.
#ifndef REFIT_SERVER_REFUSALS_H_
#define REFIT_SERVER_REFUSALS_H_

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace refit {

class Refusals {
 public:
  // Members whose refusals are named in one plan error; the rest are counted.
  static constexpr size_t kNamedInError = 4;
  // A plan error's bytes at most (each named reason is cut to a quarter):
  // with gRPC's percent-encoding of non-ASCII bytes it stays within the
  // 8 KiB of metadata a gRPC client accepts.
  static constexpr size_t kMaxErrorBytes = 2048;
  // A refusal's reason is kept up to this many bytes (escaped).
  static constexpr size_t kMaxRefusalReasonBytes = 1024;
  // Refusals of one job at most.
  static constexpr size_t kMaxPerJob = 256;
  // Refusals Describe lists at most; the rest are counted.
  static constexpr size_t kListed = 64;

  explicit Refusals(size_t max_entries) : max_entries_(max_entries) {}

  // Records that member `id` of job `job` (described as `who`, e.g. "engine
  // e0 rank 1") refuses to join, with `reason`. A second refusal of the same
  // member replaces the first. When max_entries are held, the oldest refusal
  // of the job holding the most gives way if that job holds more than `job`.
  // RESOURCE_EXHAUSTED when max_entries others are held and none gives way,
  // or kMaxPerJob others of `job`; INVALID_ARGUMENT when `reason` is empty.
  absl::Status Add(const std::string& id, const std::string& job, const std::string& who,
                   const std::string& reason, absl::Time now);

  // Forgets member `id`'s refusal (it registered). Returns whether it had one.
  bool Clear(const std::string& id);

  // Forgets the refusals older than `ttl` at `now`; returns how many.
  size_t Expire(absl::Time now, absl::Duration ttl);

  bool empty() const { return entries_.empty(); }

  // OK when no member of `job` refused; else FAILED_PRECONDITION "engine
  // e0 rank 1 refused to join: <reason>" (up to kNamedInError members, then
  // "and N more"), at most kMaxErrorBytes.
  absl::Status AsPlanError(const std::string& job) const;

  // "who: reason" per refusal, in member-id order, at most kListed of them
  // and then "and N more refusals" (for GetStatus).
  std::vector<std::string> Describe() const;

 private:
  struct Entry {
    std::string job;
    std::string who;
    std::string reason;
    absl::Time at;
  };
  // Removes the oldest refusal of the job holding the most, when that job
  // holds more than `job`; returns whether it did.
  bool GiveWayTo(const std::string& job);
  // Removes `it`, keeping the per-job counts.
  std::map<std::string, Entry>::iterator Erase(std::map<std::string, Entry>::iterator it);

  size_t max_entries_;
  std::map<std::string, Entry> entries_;
  std::map<std::string, size_t> per_job_;
};

}  // namespace refit

#endif  // REFIT_SERVER_REFUSALS_H_

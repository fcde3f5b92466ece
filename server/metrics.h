// refitd's metrics, kept as figures and written as Prometheus text
// exposition (names prefixed refit_). Thread-safe. The coordinator records
// rounds, reports and plans; the listener records refused calls; members by
// side and state are counted by the caller at scrape time.
#ifndef REFIT_SERVER_METRICS_H_
#define REFIT_SERVER_METRICS_H_

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace refit {

// Why a round aborted: a closed set, the `reason` label of
// refit_rounds_aborted_total.
enum class AbortReason {
  kMemberFailed,   // a member reported failure
  kMemberLeft,     // a participant left
  kMemberExpired,  // a participant stopped heart-beating
  kReregistered,   // a participant re-registered with other metadata
  kTimeout,        // the round ran past --round_timeout_s
  kShutdown,       // refitd is shutting down
};

// Returns the label value of `reason` ("member_failed", ...).
const char* AbortReasonName(AbortReason reason);

class ServerMetrics {
 public:
  // Members by (side, state), counted at scrape time.
  using MemberCounts = std::map<std::pair<std::string, std::string>, int64_t>;

  // A member and one of its figures.
  struct MemberFigure {
    std::string member;  // empty: none
    double value = 0;
  };

  // A round committed after `seconds`, moving `bytes` (as its members
  // reported: sent + received); `slowest` took the longest (seconds) and
  // `peak_staging` held the most staging (bytes).
  void RoundCommitted(double seconds, int64_t bytes, const MemberFigure& slowest,
                      const MemberFigure& peak_staging);

  // A round aborted after `seconds`.
  void RoundAborted(AbortReason reason, double seconds);

  // A member reported success: its bytes and seconds; `transport` is its
  // registered data-plane transport ("nccl", "gloo", "ipc"; "" for none).
  void MemberReported(const std::string& transport, int64_t bytes, double seconds);

  // A plan was built in `seconds`.
  void PlanBuilt(double seconds);

  // The plan cache holds `bytes` now.
  void SetPlanCacheBytes(int64_t bytes);

  // A call was refused for a missing or wrong bearer token. Logs a warning
  // for the first one and then at most one every 10 s, with the count.
  void AuthFailed();

  // Returns the refused calls so far.
  int64_t auth_failures() const;

  // Returns the Prometheus text exposition of every metric, `members`
  // included.
  std::string Exposition(const MemberCounts& members) const;

 private:
  static constexpr std::array<double, 12> kRoundBuckets = {
      0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800};

  mutable absl::Mutex mu_;
  int64_t committed_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, int64_t> aborted_ ABSL_GUARDED_BY(mu_);
  std::array<int64_t, kRoundBuckets.size()> round_buckets_ ABSL_GUARDED_BY(mu_) = {};
  int64_t round_count_ ABSL_GUARDED_BY(mu_) = 0;
  double round_sum_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t bytes_total_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  double last_gbps_ ABSL_GUARDED_BY(mu_) = 0;
  MemberFigure last_slowest_ ABSL_GUARDED_BY(mu_);
  MemberFigure last_peak_staging_ ABSL_GUARDED_BY(mu_);
  struct TransportFigures {
    int64_t reports = 0;
    int64_t bytes = 0;
    double seconds = 0;
  };
  std::map<std::string, TransportFigures> transports_ ABSL_GUARDED_BY(mu_);
  int64_t plans_built_ ABSL_GUARDED_BY(mu_) = 0;
  double plan_seconds_total_ ABSL_GUARDED_BY(mu_) = 0;
  double last_plan_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t plan_cache_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t auth_failures_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t auth_failures_logged_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_auth_log_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace refit

#endif  // REFIT_SERVER_METRICS_H_

// refitd's metrics, kept as figures and written as Prometheus text
// exposition (names prefixed refit_, base units: bytes, seconds). Thread-
// safe. The coordinator records rounds, reports and plans; the listener
// records refused calls; members by side and state and each engine's
// weights are read from the coordinator at scrape time (ServerMetrics::
// State); process_* series come from /proc (process_metrics.h). Labels are
// closed sets (side, state, reason, transport) or engine ids, which last as
// long as the engine: no label changes every round. Every series of a
// closed set is present from the start, at zero.
#ifndef REFIT_SERVER_METRICS_H_
#define REFIT_SERVER_METRICS_H_

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/round_bytes.h"

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

// A histogram with fixed upper bounds (seconds), Prometheus-style
// cumulative buckets.
class SecondsHistogram {
 public:
  explicit SecondsHistogram(std::vector<double> bounds) : bounds_(std::move(bounds)),
                                                          counts_(bounds_.size(), 0) {}
  void Observe(double seconds);
  // Appends the _bucket, _sum and _count lines of `name`.
  void Append(std::string* out, const char* name) const;

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // observations <= bounds_[i]
  int64_t count_ = 0;
  double sum_ = 0;
};

class ServerMetrics {
 public:
  // What the coordinator knows at scrape time.
  struct State {
    // Members by (side, state); every side x state is shown, zero or not.
    std::map<std::pair<std::string, std::string>, int64_t> members;
    // Each engine registered now.
    struct Engine {
      std::string engine_id;
      int64_t committed_version = 0;  // 0: none
      bool torn = false;              // an aborted round wrote part of it
      absl::Time last_commit = absl::InfinitePast();
    };
    std::vector<Engine> engines;
    double round_age_seconds = 0;  // of the round running now (0: none)
  };

  // The member states of refit_members (idle, in_round, reported).
  static const std::vector<std::string>& MemberStates();

  // Returns the `transport` label of a v1::Transport value ("nccl", "gloo",
  // "ipc"; "" for unspecified or unknown).
  static std::string TransportLabel(int transport);

  ServerMetrics();

  // A round committed `duration` seconds after it started; `bytes` from
  // its engine ranks' reports, `seconds` the slowest participant's
  // data-plane time (common/round_bytes.h), `peak_staging` the most staging
  // one member held.
  void RoundCommitted(double duration, const RoundBytes& bytes, double seconds,
                      int64_t peak_staging);

  // A round aborted after `duration` seconds.
  void RoundAborted(AbortReason reason, double duration);

  // A member reported success: its bytes (the larger of sent and received)
  // and seconds; `transport` its registered data-plane transport label
  // ("" for none).
  void MemberReported(const std::string& transport, int64_t bytes, double seconds);

  // A staged engine rank wrote its live buffers from staging in `seconds`
  // (its engine's pause).
  void EnginePaused(double seconds);

  // A plan was built in `seconds`.
  void PlanBuilt(double seconds);

  // A plan build (or a plan taken from the cache) failed.
  void PlanFailed();

  // The plan cache holds `bytes` now.
  void SetPlanCacheBytes(int64_t bytes);

  // A call was refused for a missing or wrong bearer token. Logs a warning
  // for the first one and then at most one every 10 s, with the count.
  void AuthFailed();

  // Returns the refused calls so far.
  int64_t auth_failures() const;

  // Returns the Prometheus text exposition of every metric, `state` and
  // the process's included.
  std::string Exposition(const State& state) const;

 private:
  mutable absl::Mutex mu_;
  int64_t committed_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, int64_t> aborted_ ABSL_GUARDED_BY(mu_);
  SecondsHistogram round_duration_ ABSL_GUARDED_BY(mu_);
  int64_t bytes_total_ ABSL_GUARDED_BY(mu_) = 0;
  double transfer_seconds_total_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  double last_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  double last_bytes_per_second_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_peak_staging_ ABSL_GUARDED_BY(mu_) = 0;
  struct TransportFigures {
    int64_t reports = 0;
    int64_t bytes = 0;
    double seconds = 0;
  };
  std::map<std::string, TransportFigures> transports_ ABSL_GUARDED_BY(mu_);
  SecondsHistogram plan_build_ ABSL_GUARDED_BY(mu_);
  SecondsHistogram engine_pause_ ABSL_GUARDED_BY(mu_);
  int64_t plan_cache_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t plan_failures_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t auth_failures_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t auth_failures_logged_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_auth_log_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace refit

#endif  // REFIT_SERVER_METRICS_H_

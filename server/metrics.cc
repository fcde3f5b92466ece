#include "server/metrics.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "server/log.h"

namespace refit {
namespace {

// Returns `v` escaped for a label value.
std::string Label(const std::string& v) {
  return absl::StrReplaceAll(v, {{"\\", "\\\\"}, {"\"", "\\\""}, {"\n", "\\n"}});
}

void Header(std::string* out, const char* name, const char* type, const char* help) {
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
}

std::string Num(double v) { return absl::StrFormat("%.9g", v); }

}  // namespace

const char* AbortReasonName(AbortReason reason) {
  switch (reason) {
    case AbortReason::kMemberFailed: return "member_failed";
    case AbortReason::kMemberLeft: return "member_left";
    case AbortReason::kMemberExpired: return "member_expired";
    case AbortReason::kReregistered: return "member_reregistered";
    case AbortReason::kTimeout: return "timeout";
    case AbortReason::kShutdown: return "shutdown";
  }
  return "unknown";
}

void ServerMetrics::RoundCommitted(double seconds, int64_t bytes,
                                   const MemberFigure& slowest,
                                   const MemberFigure& peak_staging) {
  absl::MutexLock l(&mu_);
  ++committed_;
  ++round_count_;
  round_sum_ += seconds;
  for (size_t i = 0; i < kRoundBuckets.size(); ++i) {
    if (seconds <= kRoundBuckets[i]) ++round_buckets_[i];
  }
  bytes_total_ += bytes;
  last_bytes_ = bytes;
  last_gbps_ = seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0;
  last_slowest_ = slowest;
  last_peak_staging_ = peak_staging;
}

void ServerMetrics::RoundAborted(AbortReason reason, double seconds) {
  absl::MutexLock l(&mu_);
  ++aborted_[AbortReasonName(reason)];
  ++round_count_;
  round_sum_ += seconds;
  for (size_t i = 0; i < kRoundBuckets.size(); ++i) {
    if (seconds <= kRoundBuckets[i]) ++round_buckets_[i];
  }
}

void ServerMetrics::MemberReported(const std::string& transport, int64_t bytes,
                                   double seconds) {
  absl::MutexLock l(&mu_);
  TransportFigures& t = transports_[transport.empty() ? "unknown" : transport];
  ++t.reports;
  t.bytes += bytes;
  t.seconds += seconds;
}

void ServerMetrics::PlanBuilt(double seconds) {
  absl::MutexLock l(&mu_);
  ++plans_built_;
  plan_seconds_total_ += seconds;
  last_plan_seconds_ = seconds;
}

void ServerMetrics::SetPlanCacheBytes(int64_t bytes) {
  absl::MutexLock l(&mu_);
  plan_cache_bytes_ = bytes;
}

void ServerMetrics::AuthFailed() {
  absl::MutexLock l(&mu_);
  ++auth_failures_;
  const absl::Time now = absl::Now();
  if (now - last_auth_log_ >= absl::Seconds(10)) {
    ServerLog().warn(
        "call refused: missing or wrong bearer token auth_failures={} since_last_log={}",
        auth_failures_, auth_failures_ - auth_failures_logged_);
    last_auth_log_ = now;
    auth_failures_logged_ = auth_failures_;
  }
}

int64_t ServerMetrics::auth_failures() const {
  absl::MutexLock l(&mu_);
  return auth_failures_;
}

std::string ServerMetrics::Exposition(const MemberCounts& members) const {
  std::string out;
  Header(&out, "refit_members", "gauge", "Registered members by side and state.");
  for (const auto& [key, n] : members) {
    absl::StrAppend(&out, "refit_members{side=\"", Label(key.first), "\",state=\"",
                    Label(key.second), "\"} ", n, "\n");
  }
  absl::MutexLock l(&mu_);
  Header(&out, "refit_rounds_committed_total", "counter", "Rounds committed.");
  absl::StrAppend(&out, "refit_rounds_committed_total ", committed_, "\n");
  Header(&out, "refit_rounds_aborted_total", "counter", "Rounds aborted, by reason.");
  for (AbortReason r : {AbortReason::kMemberFailed, AbortReason::kMemberLeft,
                        AbortReason::kMemberExpired, AbortReason::kReregistered,
                        AbortReason::kTimeout, AbortReason::kShutdown}) {
    auto it = aborted_.find(AbortReasonName(r));
    absl::StrAppend(&out, "refit_rounds_aborted_total{reason=\"", AbortReasonName(r),
                    "\"} ", it == aborted_.end() ? 0 : it->second, "\n");
  }
  Header(&out, "refit_round_duration_seconds", "histogram",
         "Seconds from a round's start to its commit or abort.");
  for (size_t i = 0; i < kRoundBuckets.size(); ++i) {
    absl::StrAppend(&out, "refit_round_duration_seconds_bucket{le=\"",
                    Num(kRoundBuckets[i]), "\"} ", round_buckets_[i], "\n");
  }
  absl::StrAppend(&out, "refit_round_duration_seconds_bucket{le=\"+Inf\"} ",
                  round_count_, "\n", "refit_round_duration_seconds_sum ",
                  Num(round_sum_), "\n", "refit_round_duration_seconds_count ",
                  round_count_, "\n");
  Header(&out, "refit_round_bytes_total", "counter",
         "Bytes the members of committed rounds reported (sent + received).");
  absl::StrAppend(&out, "refit_round_bytes_total ", bytes_total_, "\n");
  Header(&out, "refit_last_round_bytes", "gauge",
         "Bytes the members of the last committed round reported.");
  absl::StrAppend(&out, "refit_last_round_bytes ", last_bytes_, "\n");
  Header(&out, "refit_last_round_gbps", "gauge",
         "The last committed round's bytes / its duration, in GB/s (1e9).");
  absl::StrAppend(&out, "refit_last_round_gbps ", Num(last_gbps_), "\n");
  Header(&out, "refit_last_round_slowest_member_seconds", "gauge",
         "The slowest member of the last committed round and its seconds.");
  if (!last_slowest_.member.empty()) {
    absl::StrAppend(&out, "refit_last_round_slowest_member_seconds{member=\"",
                    Label(last_slowest_.member), "\"} ", Num(last_slowest_.value), "\n");
  }
  Header(&out, "refit_last_round_peak_staging_bytes", "gauge",
         "The member of the last committed round that held the most staging and "
         "scratch memory, and its peak bytes.");
  if (!last_peak_staging_.member.empty()) {
    absl::StrAppend(&out, "refit_last_round_peak_staging_bytes{member=\"",
                    Label(last_peak_staging_.member), "\"} ",
                    static_cast<int64_t>(last_peak_staging_.value), "\n");
  }
  Header(&out, "refit_member_reports_total", "counter",
         "Successful member reports, by transport.");
  for (const auto& [t, f] : transports_) {
    absl::StrAppend(&out, "refit_member_reports_total{transport=\"", Label(t), "\"} ",
                    f.reports, "\n");
  }
  Header(&out, "refit_member_bytes_total", "counter",
         "Bytes members reported moving, by transport.");
  for (const auto& [t, f] : transports_) {
    absl::StrAppend(&out, "refit_member_bytes_total{transport=\"", Label(t), "\"} ",
                    f.bytes, "\n");
  }
  Header(&out, "refit_member_seconds_total", "counter",
         "Seconds members reported their rounds took, by transport.");
  for (const auto& [t, f] : transports_) {
    absl::StrAppend(&out, "refit_member_seconds_total{transport=\"", Label(t), "\"} ",
                    Num(f.seconds), "\n");
  }
  Header(&out, "refit_plans_built_total", "counter", "Plans built (not from the cache).");
  absl::StrAppend(&out, "refit_plans_built_total ", plans_built_, "\n");
  Header(&out, "refit_plan_build_seconds_total", "counter", "Seconds spent building plans.");
  absl::StrAppend(&out, "refit_plan_build_seconds_total ", Num(plan_seconds_total_), "\n");
  Header(&out, "refit_last_plan_build_seconds", "gauge", "Seconds the last plan build took.");
  absl::StrAppend(&out, "refit_last_plan_build_seconds ", Num(last_plan_seconds_), "\n");
  Header(&out, "refit_plan_cache_bytes", "gauge", "Serialized bytes of the cached plans.");
  absl::StrAppend(&out, "refit_plan_cache_bytes ", plan_cache_bytes_, "\n");
  Header(&out, "refit_auth_failures_total", "counter",
         "Calls refused for a missing or wrong bearer token.");
  absl::StrAppend(&out, "refit_auth_failures_total ", auth_failures_, "\n");
  return out;
}

}  // namespace refit

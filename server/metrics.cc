#include "server/metrics.h"

#include <algorithm>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "common/version.h"
#include "proto/protocol_version.h"
#include "proto/refit_service.pb.h"
#include "server/log.h"
#include "server/process_metrics.h"

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

// Adds `n` (>= 0; a negative one is ignored) to counter `c`, which stops at
// INT64_MAX instead of wrapping.
void AddToCounter(int64_t n, int64_t* c) {
  if (n <= 0) return;
  *c = n > std::numeric_limits<int64_t>::max() - *c ? std::numeric_limits<int64_t>::max()
                                                     : *c + n;
}

// Round durations: GPU rounds take 8-45 ms, host rounds up to minutes.
std::vector<double> RoundBounds() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
          1,     2.5,    5,     10,   30,    60,   300, 1800};
}

// Plan builds: a few ms for one GPU pair, seconds for 256-rank MoE jobs.
std::vector<double> PlanBounds() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
          1,     2.5,    5,     10,   30,    60,   120};
}

constexpr AbortReason kAbortReasons[] = {
    AbortReason::kMemberFailed, AbortReason::kMemberLeft,   AbortReason::kMemberExpired,
    AbortReason::kReregistered, AbortReason::kTimeout,      AbortReason::kShutdown};

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

void SecondsHistogram::Observe(double seconds) {
  for (size_t i = 0; i < bounds_.size(); ++i) {
    if (seconds <= bounds_[i]) ++counts_[i];
  }
  ++count_;
  sum_ += seconds;
}

void SecondsHistogram::Append(std::string* out, const char* name) const {
  for (size_t i = 0; i < bounds_.size(); ++i) {
    absl::StrAppend(out, name, "_bucket{le=\"", Num(bounds_[i]), "\"} ", counts_[i], "\n");
  }
  absl::StrAppend(out, name, "_bucket{le=\"+Inf\"} ", count_, "\n", name, "_sum ",
                  Num(sum_), "\n", name, "_count ", count_, "\n");
}

const std::vector<std::string>& ServerMetrics::MemberStates() {
  static const std::vector<std::string>* const states =
      new std::vector<std::string>{"idle", "in_round", "reported"};
  return *states;
}

std::string ServerMetrics::TransportLabel(int transport) {
  if (!v1::Transport_IsValid(transport)) return "";
  const std::string full = v1::Transport_Name(static_cast<v1::Transport>(transport));
  absl::string_view name = full;
  absl::ConsumePrefix(&name, "TRANSPORT_");
  return name == "UNSPECIFIED" || name.empty() ? "" : absl::AsciiStrToLower(name);
}

ServerMetrics::ServerMetrics()
    : round_duration_(RoundBounds()), plan_build_(PlanBounds()), engine_pause_(RoundBounds()) {
  absl::MutexLock l(&mu_);
  const google::protobuf::EnumDescriptor* d = v1::Transport_descriptor();
  for (int i = 0; i < d->value_count(); ++i) {
    const std::string t = TransportLabel(d->value(i)->number());
    if (!t.empty()) transports_[t];
  }
}

void ServerMetrics::RoundCommitted(double duration, const RoundBytes& bytes,
                                   double seconds, int64_t peak_staging) {
  absl::MutexLock l(&mu_);
  ++committed_;
  round_duration_.Observe(duration);
  AddToCounter(bytes.per_engine_rank, &bytes_total_);
  transfer_seconds_total_ += seconds;
  last_bytes_ = bytes.per_engine_rank;
  last_seconds_ = seconds;
  last_bytes_per_second_ = RoundBytesPerSecond(bytes, seconds);
  last_peak_staging_ = peak_staging;
}

void ServerMetrics::EnginePaused(double seconds) {
  absl::MutexLock l(&mu_);
  engine_pause_.Observe(seconds);
}

void ServerMetrics::RoundAborted(AbortReason reason, double duration) {
  absl::MutexLock l(&mu_);
  ++aborted_[AbortReasonName(reason)];
  round_duration_.Observe(duration);
}

void ServerMetrics::MemberReported(const std::string& transport, int64_t bytes,
                                   double seconds) {
  absl::MutexLock l(&mu_);
  TransportFigures& t = transports_[transport.empty() ? "unknown" : transport];
  ++t.reports;
  AddToCounter(bytes, &t.bytes);
  t.seconds += seconds;
}

void ServerMetrics::PlanFailed() {
  absl::MutexLock l(&mu_);
  ++plan_failures_;
}

void ServerMetrics::PlanBuilt(double seconds) {
  absl::MutexLock l(&mu_);
  plan_build_.Observe(seconds);
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

std::string ServerMetrics::Exposition(const State& state) const {
  std::string out;
  Header(&out, "refit_build_info", "gauge",
         "Always 1; the labels say refitd's version and wire protocol.");
  absl::StrAppend(&out, "refit_build_info{version=\"", kRefitVersion,
                  "\",protocol_version=\"", kProtocolVersion, "\"} 1\n");
  Header(&out, "refit_members", "gauge", "Registered members by side and state.");
  for (const char* side : {"engine", "trainer"}) {
    for (const std::string& st : MemberStates()) {
      auto it = state.members.find({side, st});
      absl::StrAppend(&out, "refit_members{side=\"", side, "\",state=\"", st, "\"} ",
                      it == state.members.end() ? 0 : it->second, "\n");
    }
  }
  Header(&out, "refit_engine_committed_version", "gauge",
         "The last weight version committed into each registered engine (0: none).");
  for (const State::Engine& e : state.engines) {
    absl::StrAppend(&out, "refit_engine_committed_version{engine=\"", Label(e.engine_id),
                    "\"} ", e.committed_version, "\n");
  }
  Header(&out, "refit_engine_torn", "gauge",
         "1 when a round aborted after it started writing the engine's weights and "
         "none committed since: the engine holds no single version.");
  for (const State::Engine& e : state.engines) {
    absl::StrAppend(&out, "refit_engine_torn{engine=\"", Label(e.engine_id), "\"} ",
                    e.torn ? 1 : 0, "\n");
  }
  Header(&out, "refit_engine_last_commit_timestamp_seconds", "gauge",
         "When the last round committed into the engine ended, Unix seconds (0: none).");
  for (const State::Engine& e : state.engines) {
    absl::StrAppend(&out, "refit_engine_last_commit_timestamp_seconds{engine=\"",
                    Label(e.engine_id), "\"} ",
                    e.last_commit == absl::InfinitePast()
                        ? std::string("0")
                        : absl::StrFormat("%.3f", absl::ToUnixMillis(e.last_commit) / 1e3),
                    "\n");
  }
  absl::MutexLock l(&mu_);
  Header(&out, "refit_rounds_committed_total", "counter", "Rounds committed.");
  absl::StrAppend(&out, "refit_rounds_committed_total ", committed_, "\n");
  Header(&out, "refit_rounds_aborted_total", "counter", "Rounds aborted, by reason.");
  for (AbortReason r : kAbortReasons) {
    auto it = aborted_.find(AbortReasonName(r));
    absl::StrAppend(&out, "refit_rounds_aborted_total{reason=\"", AbortReasonName(r),
                    "\"} ", it == aborted_.end() ? 0 : it->second, "\n");
  }
  Header(&out, "refit_round_duration_seconds", "histogram",
         "Seconds from a round's start to its commit or abort.");
  round_duration_.Append(&out, "refit_round_duration_seconds");
  Header(&out, "refit_round_bytes_total", "counter",
         "Committed rounds' bytes: each round's, what one engine rank received "
         "(the most any did).");
  absl::StrAppend(&out, "refit_round_bytes_total ", bytes_total_, "\n");
  Header(&out, "refit_round_transfer_seconds_total", "counter",
         "Committed rounds' seconds: each round's slowest participant's data-plane "
         "time.");
  absl::StrAppend(&out, "refit_round_transfer_seconds_total ",
                  Num(transfer_seconds_total_), "\n");
  Header(&out, "refit_last_round_bytes", "gauge",
         "The last committed round's bytes: what one engine rank received.");
  absl::StrAppend(&out, "refit_last_round_bytes ", last_bytes_, "\n");
  Header(&out, "refit_last_round_transfer_seconds", "gauge",
         "The last committed round's slowest participant's data-plane seconds.");
  absl::StrAppend(&out, "refit_last_round_transfer_seconds ", Num(last_seconds_), "\n");
  Header(&out, "refit_last_round_bytes_per_second", "gauge",
         "The last committed round's bytes over its transfer seconds.");
  absl::StrAppend(&out, "refit_last_round_bytes_per_second ",
                  Num(last_bytes_per_second_), "\n");
  Header(&out, "refit_last_round_peak_staging_bytes", "gauge",
         "The most staging and scratch memory one member of the last committed "
         "round held (refit status names the member).");
  absl::StrAppend(&out, "refit_last_round_peak_staging_bytes ", last_peak_staging_, "\n");
  Header(&out, "refit_member_reports_total", "counter",
         "Successful member reports, by transport.");
  for (const auto& [t, f] : transports_) {
    absl::StrAppend(&out, "refit_member_reports_total{transport=\"", Label(t), "\"} ",
                    f.reports, "\n");
  }
  Header(&out, "refit_member_bytes_total", "counter",
         "Bytes members reported, each the larger of its sent and received, by "
         "transport.");
  for (const auto& [t, f] : transports_) {
    absl::StrAppend(&out, "refit_member_bytes_total{transport=\"", Label(t), "\"} ",
                    f.bytes, "\n");
  }
  Header(&out, "refit_member_seconds_total", "counter",
         "Data-plane seconds members reported, by transport.");
  for (const auto& [t, f] : transports_) {
    absl::StrAppend(&out, "refit_member_seconds_total{transport=\"", Label(t), "\"} ",
                    Num(f.seconds), "\n");
  }
  Header(&out, "refit_engine_pause_seconds", "histogram",
         "Seconds a staged engine rank took to write its live buffers from "
         "staging (its engine's pause), one per rank per round.");
  engine_pause_.Append(&out, "refit_engine_pause_seconds");
  Header(&out, "refit_plan_build_seconds", "histogram",
         "Seconds each plan build took (plans from the cache not counted).");
  plan_build_.Append(&out, "refit_plan_build_seconds");
  Header(&out, "refit_plan_cache_bytes", "gauge", "Serialized bytes of the cached plans.");
  absl::StrAppend(&out, "refit_plan_cache_bytes ", plan_cache_bytes_, "\n");
  Header(&out, "refit_plan_failures_total", "counter",
         "Plans that failed (refit status says why), built or from the cache.");
  absl::StrAppend(&out, "refit_plan_failures_total ", plan_failures_, "\n");
  Header(&out, "refit_round_age_seconds", "gauge",
         "Seconds since the running round started (0: no round runs).");
  absl::StrAppend(&out, "refit_round_age_seconds ", Num(state.round_age_seconds), "\n");
  Header(&out, "refit_auth_failures_total", "counter",
         "Calls refused for a missing or wrong bearer token.");
  absl::StrAppend(&out, "refit_auth_failures_total ", auth_failures_, "\n");
  out += ProcessMetricsText();
  return out;
}

}  // namespace refit

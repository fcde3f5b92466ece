// refitd: the control-plane sidecar. Its flags are the ABSL_FLAGs below;
// `refitd --help` prints them, `--flagfile=FILE` reads them from a file.
#include <algorithm>
#include <atomic>
#include <memory>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/notification.h"
#include "common/command_line.h"
#include "common/fd_limit.h"
#include "common/file.h"
#include "common/huge_pages.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "job/job_plan.h"
#include "job/planner_flags.h"
#include "plan/plan.h"
#include "proto/protocol_version.h"
#include "server/default_plan.h"
#include "server/log.h"
#include "server/member_credentials.h"
#include "server/metrics_http.h"
#include "server/refit_server.h"

ABSL_FLAG(std::string, address, refit::kDefaultRefitdAddress,
          "listen address HOST:PORT (port 0 picks one, printed as\n"
          "\"refitd listening on port N\")");
ABSL_FLAG(std::string, tls_cert, "", "server certificate chain file (PEM)");
ABSL_FLAG(std::string, tls_key, "", "its private key file (PEM)");
ABSL_FLAG(std::string, tls_client_ca, "",
          "require client certificates signed by this CA (PEM file)");
ABSL_FLAG(std::string, token_file, "",
          "file holding the bearer token every call must carry");
ABSL_FLAG(std::string, job_key_file, "",
          "file holding the job key: only registrations that carry it are "
          "admitted, and one that does takes its member's place (a restarted "
          "process); see docs/reliability.md");
ABSL_FLAG(bool, allow_insecure_non_loopback, false,
          "permit a plaintext listener on a non-loopback address");
ABSL_FLAG(int64_t, min_engines, 1, "complete engines needed before a plan");
ABSL_FLAG(int64_t, max_buffers, 1 << 20, "buffers one member may register");
ABSL_FLAG(int64_t, max_metadata_bytes, 64 << 20,
          "bytes of one member's registration");
ABSL_FLAG(int64_t, max_registration_mib, 1024,
          "MiB of every member's registration together; a registration beyond is refused");
ABSL_FLAG(int64_t, max_members, 16384,
          "members refitd holds; a new member beyond is refused");
ABSL_FLAG(int64_t, max_kv_waits, 16384,
          "KvGet calls waiting for a key, in all; beyond, refused at once");
ABSL_FLAG(int64_t, max_kv_waits_per_caller, 1024,
          "... and from one address (both bound members outside the current plan)");
ABSL_FLAG(int64_t, max_kv_waits_per_member, 256,
          "KvGet calls waiting for a key, of one member (also of the plan's members)");
ABSL_FLAG(int64_t, max_pending_connections, 256,
          "connections held before their first complete request (plaintext\n"
          "listener); a new one closes the oldest of the address holding the most");
ABSL_FLAG(int64_t, first_request_timeout_ms, 10000,
          "a connection that has not sent a complete first request (or, with\n"
          "TLS, finished its handshake) this long after connecting is closed");
ABSL_FLAG(int64_t, heartbeat_timeout_ms, 10000,
          "a member silent this long is removed");
ABSL_FLAG(int64_t, round_timeout_s, 1800,
          "a round not done by then is aborted");
ABSL_FLAG(int64_t, plan_settle_ms, 20,
          "plan once the membership has been unchanged this long");
ABSL_FLAG(int64_t, plan_settle_max_ms, 500,
          "... but at most this long after the first change not yet planned");
ABSL_FLAG(int64_t, plan_cache_mib, 2048,
          "plans kept for memberships seen before, in serialized MiB (the\n"
          "current one is always kept)");
ABSL_FLAG(int64_t, rounds_kept, 64, "finished rounds listed by refit status");
ABSL_FLAG(bool, delta, false,
          "delta rounds: engines holding the last committed version get only the "
          "changed words; verified (docs/delta.md)");
ABSL_FLAG(int64_t, verify_every, 0,
          "verify every Nth round that is not a delta round (0: never)");
ABSL_FLAG(std::string, kv_prefix, "refit",
          "prefix of the data-plane bootstrap keys refitd hands out");
ABSL_FLAG(int64_t, kv_member_mib, 16,
          "bootstrap key-value bytes one member may hold");
ABSL_FLAG(int64_t, kv_total_mib, 512, "bootstrap key-value bytes of all members");
ABSL_FLAG(int64_t, tick_ms, 10,
          "housekeeping period (heartbeat expiry, round timeouts)");
ABSL_FLAG(std::string, log_level, "info",
          "trace, debug, info, warning, error, critical or off (as the logs\n"
          "spell the level; warn is accepted too)");
ABSL_FLAG(std::string, log_format, "text",
          "text, or json: one JSON object a line (ts, level, logger, msg and\n"
          "the event's figures as fields)");
ABSL_FLAG(int64_t, metrics_port, -1,
          "serve Prometheus metrics at http://HOST:PORT/metrics and a health\n"
          "probe at /healthz (200 while serving, 503 once shutting down), HOST\n"
          "the --address host, or --metrics_host (0 picks a port, printed as\n"
          "\"refitd metrics on port N\"); -1: none");
ABSL_FLAG(std::string, metrics_host, "",
          "the address /metrics and /healthz listen on, e.g. 0.0.0.0 for a\n"
          "Prometheus on another host while refitd's gRPC stays on 127.0.0.1;\n"
          "empty: the --address host");
ABSL_FLAG(int64_t, drain_ms, 0,
          "on SIGTERM, report NOT_SERVING to health checks this long before\n"
          "aborting a round in flight and stopping");
ABSL_FLAG(int64_t, slice_threads, refit::DefaultPlanOptions().slice_threads,
          "threads building the members' plan slices (1..1024)");

namespace {

constexpr char kUsage[] =
    R"(refitd: the refit control plane (a sidecar next to the training job).

usage: refitd [--name=value ...] [--flagfile=FILE]

example:
  refitd --address=0.0.0.0:50051 --token_file=/etc/refit/token \
         --tls_cert=cert.pem --tls_key=key.pem --min_engines=2
)";

absl::Notification* g_stop = nullptr;
// Set on SIGTERM/SIGINT: a plan build in progress stops at its next phase.
const std::shared_ptr<std::atomic<bool>> g_cancel_plans =
    std::make_shared<std::atomic<bool>>(false);
void OnSignal(int) {
  if (g_stop != nullptr && !g_stop->HasBeenNotified()) g_stop->Notify();
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "refitd: %s\n", s.ToString().c_str());
  return 2;
}

// Returns the value of a count flag; INVALID_ARGUMENT when it is negative.
absl::StatusOr<int64_t> Count(const absl::Flag<int64_t>& flag,
                              const char* name) {
  const int64_t v = absl::GetFlag(flag);
  if (v < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, ": not a count: ", v));
  }
  return v;
}

// Returns a MiB flag in bytes; INVALID_ARGUMENT when negative or too large.
absl::StatusOr<int64_t> Mib(const absl::Flag<int64_t>& flag,
                            const char* name) {
  absl::StatusOr<int64_t> v = Count(flag, name);
  if (v.ok() && *v > (std::numeric_limits<int64_t>::max() >> 20)) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, ": too large: ", *v));
  }
  if (v.ok()) *v <<= 20;
  return v;
}

// Tokens and PEM files are small: a path naming a device or a huge file
// fails at once (common/file.h).
constexpr int64_t kMaxCredentialFileBytes = 1 << 20;

absl::StatusOr<std::string> ReadPem(const std::string& path) {
  return refit::ReadFileToString(path, kMaxCredentialFileBytes);
}

// Returns the server options the flags describe.
absl::StatusOr<refit::RefitServer::Options> OptionsFromFlags() {
  refit::RefitServer::Options o;
  o.address = absl::GetFlag(FLAGS_address);
  o.allow_insecure_non_loopback = absl::GetFlag(FLAGS_allow_insecure_non_loopback);
  if (!absl::GetFlag(FLAGS_tls_cert).empty() ||
      !absl::GetFlag(FLAGS_tls_key).empty()) {
    o.tls = std::make_unique<refit::TlsOptions>();
    absl::StatusOr<std::string> cert = ReadPem(absl::GetFlag(FLAGS_tls_cert));
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadPem(absl::GetFlag(FLAGS_tls_key));
    if (!key.ok()) return key.status();
    o.tls->cert_chain_pem = *cert;
    o.tls->private_key_pem = *key;
    if (!absl::GetFlag(FLAGS_tls_client_ca).empty()) {
      absl::StatusOr<std::string> ca = ReadPem(absl::GetFlag(FLAGS_tls_client_ca));
      if (!ca.ok()) return ca.status();
      o.tls->client_ca_pem = *ca;
    }
  }
  if (!absl::GetFlag(FLAGS_token_file).empty()) {
    absl::StatusOr<std::string> t =
        ReadPem(absl::GetFlag(FLAGS_token_file));
    if (!t.ok()) return t.status();
    o.bearer_token = std::string(absl::StripAsciiWhitespace(*t));
  }
  if (!absl::GetFlag(FLAGS_job_key_file).empty()) {
    absl::StatusOr<std::string> k = ReadPem(absl::GetFlag(FLAGS_job_key_file));
    if (!k.ok()) return k.status();
    o.coordinator.job_key = std::string(absl::StripAsciiWhitespace(*k));
    if (o.coordinator.job_key.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--job_key_file: ", absl::GetFlag(FLAGS_job_key_file), " is empty"));
    }
    if (o.coordinator.job_key.size() > refit::MemberCredentials::kMaxJobKeyBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--job_key_file: ", absl::GetFlag(FLAGS_job_key_file), " holds ",
          o.coordinator.job_key.size(), " bytes; at most ", refit::MemberCredentials::kMaxJobKeyBytes));
    }
  }
  // The planner's flags, checked as `refit plan` checks them.
  if (absl::Status s = refit::CheckPlannerFlags(absl::GetFlag(FLAGS_staging_mib),
                                                absl::GetFlag(FLAGS_lanes),
                                                absl::GetFlag(FLAGS_max_plan_mib));
      !s.ok()) {
    return s;
  }
  auto min_engines = Count(FLAGS_min_engines, "min_engines");
  auto max_buffers = Count(FLAGS_max_buffers, "max_buffers");
  auto max_meta = Count(FLAGS_max_metadata_bytes, "max_metadata_bytes");
  auto hb = Count(FLAGS_heartbeat_timeout_ms, "heartbeat_timeout_ms");
  auto rt = Count(FLAGS_round_timeout_s, "round_timeout_s");
  auto settle = Count(FLAGS_plan_settle_ms, "plan_settle_ms");
  auto settle_max = Count(FLAGS_plan_settle_max_ms, "plan_settle_max_ms");
  auto cache_bytes = Mib(FLAGS_plan_cache_mib, "plan_cache_mib");
  auto staging = Mib(FLAGS_staging_mib, "staging_mib");
  auto lanes = Count(FLAGS_lanes, "lanes");
  auto drain = Count(FLAGS_drain_ms, "drain_ms");
  auto max_plan = Mib(FLAGS_max_plan_mib, "max_plan_mib");
  auto max_members = Count(FLAGS_max_members, "max_members");
  auto max_registration = Mib(FLAGS_max_registration_mib, "max_registration_mib");
  auto kv_waits = Count(FLAGS_max_kv_waits, "max_kv_waits");
  auto kv_waits_caller = Count(FLAGS_max_kv_waits_per_caller, "max_kv_waits_per_caller");
  auto kv_waits_member = Count(FLAGS_max_kv_waits_per_member, "max_kv_waits_per_member");
  auto pending = Count(FLAGS_max_pending_connections, "max_pending_connections");
  auto first_request = Count(FLAGS_first_request_timeout_ms, "first_request_timeout_ms");
  auto rounds_kept = Count(FLAGS_rounds_kept, "rounds_kept");
  auto kv_member = Mib(FLAGS_kv_member_mib, "kv_member_mib");
  auto kv_total = Mib(FLAGS_kv_total_mib, "kv_total_mib");
  auto tick = Count(FLAGS_tick_ms, "tick_ms");
  auto verify_every = Count(FLAGS_verify_every, "verify_every");
  for (auto* s : {&verify_every, &drain, &min_engines, &max_buffers, &max_meta, &hb, &rt, &settle,
                  &settle_max, &cache_bytes, &staging, &lanes, &max_plan, &rounds_kept,
                  &kv_member, &kv_total, &tick, &max_members, &kv_waits, &kv_waits_caller,
                  &kv_waits_member, &max_registration, &pending, &first_request}) {
    if (!s->ok()) return s->status();
  }
  if (*min_engines > std::numeric_limits<int>::max() ||
      *max_buffers > std::numeric_limits<int>::max() ||
      *lanes > std::numeric_limits<int32_t>::max() ||
      *rounds_kept > std::numeric_limits<int>::max() ||
      *verify_every > std::numeric_limits<int32_t>::max() ||
      *max_members > std::numeric_limits<int>::max() ||
      *kv_waits > std::numeric_limits<int>::max() ||
      *kv_waits_caller > std::numeric_limits<int>::max() ||
      *kv_waits_member > std::numeric_limits<int>::max() ||
      *pending > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(
        "--min_engines, --max_buffers, --lanes, --rounds_kept, --verify_every, --max_members, "
        "--max_kv_waits, --max_kv_waits_per_caller, --max_kv_waits_per_member and "
        "--max_pending_connections must fit "
        "in 32 bits");
  }
  if (*tick < 1) return absl::InvalidArgumentError("--tick_ms: must be at least 1");
  if (*pending < 1 || *first_request < 1) {
    return absl::InvalidArgumentError(
        "--max_pending_connections and --first_request_timeout_ms must be at least 1");
  }
  o.coordinator.max_members = static_cast<int>(*max_members);
  o.coordinator.max_registration_bytes = *max_registration;
  o.coordinator.max_kv_waits = static_cast<int>(*kv_waits);
  o.coordinator.max_kv_waits_per_caller = static_cast<int>(*kv_waits_caller);
  o.coordinator.max_kv_waits_per_member = static_cast<int>(*kv_waits_member);
  o.max_pending_connections = static_cast<int>(*pending);
  o.first_request_timeout = absl::Milliseconds(*first_request);
  o.coordinator.max_plan_cache_bytes = *cache_bytes;
  o.coordinator.plan_settle = absl::Milliseconds(*settle);
  o.coordinator.plan_settle_max = absl::Milliseconds(*settle_max);
  o.coordinator.min_engines = static_cast<int>(*min_engines);
  o.coordinator.max_buffers_per_member = static_cast<int>(*max_buffers);
  o.coordinator.max_metadata_bytes = *max_meta;
  o.coordinator.heartbeat_timeout = absl::Milliseconds(*hb);
  o.coordinator.round_timeout = absl::Seconds(*rt);
  o.coordinator.rounds_kept = static_cast<int>(*rounds_kept);
  o.coordinator.delta = absl::GetFlag(FLAGS_delta);
  o.coordinator.verify_every = static_cast<int32_t>(*verify_every);
  o.coordinator.kv_prefix = absl::GetFlag(FLAGS_kv_prefix);
  o.coordinator.kv_quota.per_owner_bytes = *kv_member;
  o.coordinator.kv_quota.total_bytes = *kv_total;
  o.coordinator.tick = absl::Milliseconds(*tick);
  o.drain = absl::Milliseconds(*drain);
  const int64_t slice_threads = absl::GetFlag(FLAGS_slice_threads);
  if (slice_threads < 1 || slice_threads > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("--slice_threads: must be 1..1024: ", slice_threads));
  }
  absl::StatusOr<bool> relay = refit::ParseRelayFlag(absl::GetFlag(FLAGS_relay));
  if (!relay.ok()) return relay.status();
  refit::DefaultPlanOptions plan_options;
  plan_options.planner.relay = *relay;
  plan_options.planner.delta = o.coordinator.delta;
  plan_options.slice_threads = static_cast<int>(slice_threads);
  plan_options.planner.staging_budget_bytes = *staging;
  plan_options.planner.num_lanes = static_cast<int32_t>(*lanes);
  plan_options.max_plan_bytes = *max_plan;
  plan_options.budget_name = "--max_plan_mib";
  plan_options.cancel = g_cancel_plans;
  absl::StatusOr<refit::HostDeltaModel> host_delta = refit::HostDeltaFromFlags(
      absl::GetFlag(FLAGS_host_link_gbps), absl::GetFlag(FLAGS_host_codec_gbps));
  if (!host_delta.ok()) return host_delta.status();
  plan_options.host_delta = *host_delta;
  o.coordinator.plan_function = refit::DefaultPlanFunction(plan_options);
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  // refitd's own flags and the planner's (job/planner_flags.h), sorted.
  std::vector<std::string> flags = refit::FlagsDefinedIn("server/refitd_main.cc");
  for (const std::string& f : refit::FlagsDefinedIn("job/planner_flags.cc")) flags.push_back(f);
  std::sort(flags.begin(), flags.end());
  absl::StatusOr<refit::CommandLineResult> parsed = refit::ParseCommandLine(
      "refitd", std::vector<std::string>(argv + 1, argv + argc), flags, kUsage);
  if (!parsed.ok()) return Fail(parsed.status());
  if (*parsed == refit::CommandLineResult::kHelpShown) return 0;
  refit::ReexecWithHugePages(argv);  // before any thread: see common/huge_pages.h
  // Three descriptors per plaintext connection (the client's socket and
  // the relay's socket pair, connection_relay.h), one per TLS connection:
  // a soft limit of 1024 is below a job of a few hundred members. A failure leaves the limit as it was (start anyway).
  if (absl::StatusOr<int64_t> fds = refit::RaiseFdLimitToHard(); !fds.ok()) {
    std::fprintf(stderr, "refitd: warning: %s\n", fds.status().ToString().c_str());
  }
  absl::StatusOr<spdlog::level::level_enum> level =
      refit::ParseLogLevel(absl::GetFlag(FLAGS_log_level));
  if (!level.ok()) return Fail(refit::AnnotateStatus(level.status(), "--log_level"));
  absl::StatusOr<refit::LogFormat> format =
      refit::ParseLogFormat(absl::GetFlag(FLAGS_log_format));
  if (!format.ok()) return Fail(refit::AnnotateStatus(format.status(), "--log_format"));
  refit::ConfigureServerLog(*level, *format);
  absl::StatusOr<refit::RefitServer::Options> options = OptionsFromFlags();
  if (!options.ok()) return Fail(options.status());
  const std::string address = options->address;
  auto server = refit::RefitServer::Start(std::move(*options));
  if (!server.ok()) return Fail(server.status());
  std::unique_ptr<refit::MetricsHttpServer> metrics;
  if (absl::GetFlag(FLAGS_metrics_port) >= 0) {
    refit::MetricsHttpServer::Options mo;
    absl::string_view host = address;
    host = host.substr(0, host.rfind(':'));
    absl::ConsumePrefix(&host, "[");
    absl::ConsumeSuffix(&host, "]");
    mo.host = absl::GetFlag(FLAGS_metrics_host).empty() ? std::string(host)
                                                        : absl::GetFlag(FLAGS_metrics_host);
    mo.port = static_cast<int>(std::min<int64_t>(absl::GetFlag(FLAGS_metrics_port), 65536));
    refit::RefitServer* s = server->get();
    mo.render = [s] { return s->MetricsText(); };
    mo.serving = [s] { return s->serving(); };
    absl::StatusOr<std::unique_ptr<refit::MetricsHttpServer>> m =
        refit::MetricsHttpServer::Start(std::move(mo));
    if (!m.ok()) return Fail(refit::AnnotateStatus(m.status(), "--metrics_port"));
    metrics = std::move(*m);
  }
  std::printf("refitd listening on port %d\n", (*server)->port());
  if (metrics != nullptr) std::printf("refitd metrics on port %d\n", metrics->port());
  std::fflush(stdout);
  absl::Notification stop;
  g_stop = &stop;
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  while (!stop.WaitForNotificationWithTimeout(absl::Seconds(1))) {
  }
  g_cancel_plans->store(true);
  (*server)->Shutdown();
  metrics.reset();
  refit::ServerLog().info("stopped");
  return 0;
}

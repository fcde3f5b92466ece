// refitd: the control-plane sidecar. Flags (--name=value); `refitd --help`
// prints them (kUsage below).
#include <csignal>
#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/notification.h"
#include "common/fd_limit.h"
#include "common/file.h"
#include "common/huge_pages.h"
#include "server/default_plan.h"
#include "server/refit_server.h"

namespace {

constexpr char kUsage[] = R"(refitd: the refit control plane (a sidecar next to the training job).

usage: refitd [--name=value ...]

  --address=HOST:PORT            listen address (default 127.0.0.1:50051; port 0
                                 picks one, printed as "refitd listening on port N")
  --tls_cert=PEM                 server certificate chain file
  --tls_key=PEM                  its private key file
  --tls_client_ca=PEM            require client certificates signed by this CA
  --token_file=PATH              bearer token every call must carry
  --allow_insecure_non_loopback  permit a plaintext listener on a non-loopback
                                 address (default: refused)
  --min_engines=N                complete engines needed before a plan (1)
  --max_buffers=N                buffers one member may register
  --max_metadata_bytes=N         bytes of one member's registration
  --heartbeat_timeout_ms=N       a member silent this long is removed (10000)
  --round_timeout_s=N            a round not done by then is aborted (1800)
  --plan_settle_ms=N             plan once the membership has been unchanged
                                 this long (20)
  --plan_settle_max_ms=N         ... but at most this long after the first
                                 change not yet planned (500)
  --plan_cache_mib=N             plans kept for memberships seen before, in
                                 serialized MiB (2048; the current one is
                                 always kept)
  --staging_mib=N                planner staging budget per rank (512)
  --lanes=N                      planner lanes (2; at most 64)
  --max_plan_mib=N               refuse a plan whose estimated size (one
                                 record per tensor per rank) is over N MiB,
                                 before building it (16384)
  --slice_threads=N              threads building the members' plan slices
                                 (this host's cores, at most 16)
  --help                         this text

example:
  refitd --address=0.0.0.0:50051 --token_file=/etc/refit/token \
         --tls_cert=cert.pem --tls_key=key.pem --min_engines=2
)";

// Tokens and PEM files are small: a path naming a device or a huge file
// fails at once (common/file.h).
constexpr int64_t kMaxCredentialFileBytes = 1 << 20;

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  return refit::ReadFileToString(path, kMaxCredentialFileBytes);
}

absl::Notification* g_stop = nullptr;
void OnSignal(int) {
  if (g_stop != nullptr && !g_stop->HasBeenNotified()) g_stop->Notify();
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "refitd: %s\n", s.ToString().c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h" || a == "help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
  }
  refit::ReexecWithHugePages(argv);  // before any thread: see common/huge_pages.h
  // One descriptor per connection: a soft limit of 1024 is below a job of
  // ~1,000 members. A failure leaves the limit as it was (start anyway).
  if (absl::StatusOr<int64_t> fds = refit::RaiseFdLimitToHard(); !fds.ok()) {
    std::fprintf(stderr, "refitd: warning: %s\n", fds.status().ToString().c_str());
  }
  std::map<std::string, std::string> flags;
  // The flags are the ones the help lists ("  --name=..." or "  --name").
  std::set<std::string> known;
  for (absl::string_view line : absl::StrSplit(kUsage, '\n')) {
    if (!absl::ConsumePrefix(&line, "  --")) continue;
    known.insert(std::string(line.substr(0, line.find_first_of("= "))));
  }
  known.erase("help");
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    if (!absl::ConsumePrefix(&a, "--")) return Fail(absl::InvalidArgumentError(absl::StrCat("unexpected argument ", argv[i])));
    size_t eq = a.find('=');
    std::string name(a.substr(0, eq));
    std::string value = eq == absl::string_view::npos ? "true" : std::string(a.substr(eq + 1));
    if (!known.count(name)) return Fail(absl::InvalidArgumentError(absl::StrCat("unknown flag --", name, " (refitd --help lists the flags)")));
    flags[name] = value;
  }
  auto get = [&](const std::string& n, const std::string& d) {
    auto it = flags.find(n);
    return it == flags.end() ? d : it->second;
  };
  auto get_int = [&](const std::string& n, int64_t d) -> absl::StatusOr<int64_t> {
    auto it = flags.find(n);
    if (it == flags.end()) return d;
    int64_t v;
    if (!absl::SimpleAtoi(it->second, &v) || v < 0) {
      return absl::InvalidArgumentError(absl::StrCat("--", n, ": not a count: ", it->second));
    }
    return v;
  };
  // A size in MiB, in bytes (fails rather than overflow).
  auto get_mib = [&](const std::string& n, int64_t d) -> absl::StatusOr<int64_t> {
    absl::StatusOr<int64_t> v = get_int(n, d);
    if (v.ok() && *v > (std::numeric_limits<int64_t>::max() >> 20)) {
      return absl::InvalidArgumentError(absl::StrCat("--", n, ": too large: ", *v));
    }
    if (v.ok()) *v <<= 20;
    return v;
  };

  refit::RefitServer::Options o;
  o.address = get("address", "127.0.0.1:50051");
  o.allow_insecure_non_loopback = get("allow_insecure_non_loopback", "false") == "true";
  if (flags.count("tls_cert") || flags.count("tls_key")) {
    o.tls = std::make_unique<refit::TlsOptions>();
    auto cert = ReadFile(get("tls_cert", ""));
    auto key = ReadFile(get("tls_key", ""));
    if (!cert.ok()) return Fail(cert.status());
    if (!key.ok()) return Fail(key.status());
    o.tls->cert_chain_pem = *cert;
    o.tls->private_key_pem = *key;
    if (flags.count("tls_client_ca")) {
      auto ca = ReadFile(get("tls_client_ca", ""));
      if (!ca.ok()) return Fail(ca.status());
      o.tls->client_ca_pem = *ca;
    }
  }
  if (flags.count("token_file")) {
    auto t = ReadFile(get("token_file", ""));
    if (!t.ok()) return Fail(t.status());
    o.bearer_token = std::string(absl::StripAsciiWhitespace(*t));
  }
  auto min_engines = get_int("min_engines", 1);
  auto max_buffers = get_int("max_buffers", o.max_buffers_per_member);
  auto max_meta = get_int("max_metadata_bytes", o.max_metadata_bytes);
  auto hb = get_int("heartbeat_timeout_ms", 10000);
  auto rt = get_int("round_timeout_s", 1800);
  auto settle = get_int("plan_settle_ms", absl::ToInt64Milliseconds(o.plan_settle));
  auto settle_max =
      get_int("plan_settle_max_ms", absl::ToInt64Milliseconds(o.plan_settle_max));
  auto cache_bytes = get_mib("plan_cache_mib", o.max_plan_cache_bytes >> 20);
  for (auto* s : {&min_engines, &max_buffers, &max_meta, &hb, &rt, &settle,
                  &settle_max, &cache_bytes}) {
    if (!s->ok()) return Fail(s->status());
  }
  o.max_plan_cache_bytes = *cache_bytes;
  o.plan_settle = absl::Milliseconds(*settle);
  o.plan_settle_max = absl::Milliseconds(*settle_max);
  o.min_engines = static_cast<int>(*min_engines);
  o.max_buffers_per_member = static_cast<int>(*max_buffers);
  o.max_metadata_bytes = *max_meta;
  o.heartbeat_timeout = absl::Milliseconds(*hb);
  o.round_timeout = absl::Seconds(*rt);
  auto staging = get_mib("staging_mib", 512);
  auto lanes = get_int("lanes", 2);
  auto max_plan = get_mib("max_plan_mib", 16384);
  for (auto* s : {&staging, &lanes, &max_plan}) {
    if (!s->ok()) return Fail(s->status());
  }
  if (*lanes < 1 || *lanes > refit::kMaxLanes) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--lanes: must be 1..", refit::kMaxLanes, ": ", *lanes)));
  }
  if (*staging < 1) {
    return Fail(absl::InvalidArgumentError("--staging_mib: must be at least 1"));
  }
  refit::DefaultPlanOptions plan_options;
  auto slice_threads = get_int("slice_threads", plan_options.slice_threads);
  if (!slice_threads.ok()) return Fail(slice_threads.status());
  if (*slice_threads < 1 || *slice_threads > 1024) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--slice_threads: must be 1..1024: ", *slice_threads)));
  }
  plan_options.slice_threads = static_cast<int>(*slice_threads);
  plan_options.planner.staging_budget_bytes = *staging;
  plan_options.planner.num_lanes = static_cast<int32_t>(*lanes);
  plan_options.max_plan_bytes = *max_plan;
  plan_options.budget_name = "--max_plan_mib";
  o.plan_function = refit::DefaultPlanFunction(plan_options);

  auto server = refit::RefitServer::Start(std::move(o));
  if (!server.ok()) return Fail(server.status());
  std::printf("refitd listening on port %d\n", (*server)->port());
  std::fflush(stdout);
  absl::Notification stop;
  g_stop = &stop;
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  while (!stop.WaitForNotificationWithTimeout(absl::Seconds(1))) {
  }
  (*server)->Shutdown();
  return 0;
}

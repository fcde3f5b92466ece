// RefitServer: refitd's gRPC service (callback API). Collects member
// registrations, builds and hands out the plan once per membership (cached by
// a fingerprint of the registrations; members see the plan's own
// fingerprint), runs weight-version rounds (start,
// stream notification, done/failed reports, commit/abort), serves the
// data-plane bootstrap key-value store, status and grpc.health.v1.
#ifndef REFIT_SERVER_REFIT_SERVER_H_
#define REFIT_SERVER_REFIT_SERVER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/plan.pb.h"
#include "proto/refit_service.pb.h"
#include "server/credentials.h"

namespace refit {

// What the plan function returns: one slice per member, in the order of the
// registrations it was given, plus the data-plane lane count.
struct BuiltPlan {
  int num_lanes = 1;
  // The plan's own fingerprint (PlanFingerprint), which members and
  // `refit status` see; empty: refitd reports the registrations'
  // fingerprint instead.
  std::string fingerprint;
  // Serialized PlanProtos (SerializeAsString), one per member.
  std::vector<std::string> trainer_slices;  // [trainer rank]
  std::vector<std::string> engine_slices;   // [engine member, input order]
};

// Builds the plan for a complete membership. `trainer` is ordered by rank;
// `engine` by (engine id, rank). An error (e.g. the planner's
// INVALID_ARGUMENT) is reported to every member as the plan outcome.
using PlanFunction = std::function<absl::StatusOr<BuiltPlan>(
    const std::vector<v1::Registration>& trainer,
    const std::vector<v1::Registration>& engine)>;

class RefitServer {
 public:
  struct Options {
    std::string address = "127.0.0.1:0";  // host:port; port 0 picks one
    // Without tls, listening on a non-loopback address needs this.
    bool allow_insecure_non_loopback = false;
    std::unique_ptr<TlsOptions> tls;   // null: insecure listener
    std::string bearer_token;          // when set, checked on every call
    PlanFunction plan_function;        // required
    int min_engines = 1;               // complete engines needed for a plan
    int max_buffers_per_member = 1 << 20;
    int64_t max_metadata_bytes = 64 << 20;  // per Register request
    absl::Duration heartbeat_timeout = absl::Seconds(10);
    absl::Duration round_timeout = absl::Minutes(30);
    absl::Duration max_wait = absl::Minutes(10);  // cap of any server wait
    // A new plan is built once the membership was unchanged for plan_settle,
    // or plan_settle_max after the first change not yet planned.
    absl::Duration plan_settle = absl::Milliseconds(20);
    absl::Duration plan_settle_max = absl::Milliseconds(500);
    // Plans kept for memberships seen before (an engine that leaves and
    // comes back gets its old plan without planning again): at most 16, and
    // at most this many serialized slice bytes in all (a DeepSeek-V3
    // 256 -> 256 plan is ~0.7 GB). The current plan is kept regardless.
    int64_t max_plan_cache_bytes = int64_t{2} << 30;
    int rounds_kept = 64;              // rounds listed in Status
    std::string kv_prefix = "refit";
  };

  // Starts serving. Fails with INVALID_ARGUMENT on bad options (no plan
  // function, insecure non-loopback address without the override, bad TLS
  // material), UNAVAILABLE when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<RefitServer>> Start(Options options);

  ~RefitServer();

  // Returns the bound port.
  int port() const;

  // Stops accepting calls, ends open streams and waits, then returns.
  // Idempotent.
  void Shutdown();

  class Impl;

 private:
  explicit RefitServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Checks that the members can connect their data planes; INVALID_ARGUMENT
// naming two members otherwise: they name different transports
// (identity.transport), or the ipc transport spans hosts, or — on any other
// transport — both are on one physical GPU (identity.device_uuid; NCCL
// connects one rank per GPU). refitd plans no membership that fails it.
absl::Status CheckDataPlane(const std::vector<v1::Registration>& trainer,
                            const std::vector<v1::Registration>& engine);

// OK when the registration's protocol_version is this refitd's
// (proto/protocol_version.h); FAILED_PRECONDITION naming the member and both
// versions otherwise.
absl::Status CheckProtocolVersion(const v1::Registration& reg);

// Checks one registration against the limits; returns INVALID_ARGUMENT
// naming the offending field (e.g. "buffers[3].shape[1]"), OK otherwise.
absl::Status ValidateRegistration(const v1::Registration& reg,
                                  int max_buffers, int64_t max_metadata_bytes);

// A deterministic fingerprint (hex) of a list of registrations.
std::string FingerprintRegistrations(
    const std::vector<const v1::Registration*>& regs);

}  // namespace refit

#endif  // REFIT_SERVER_REFIT_SERVER_H_

// `refit health` (see health_command.h): grpc.health.v1 over a generic stub,
// the reply's one field decoded by hand (HealthCheckResponse.status, field 1,
// a varint: 0 UNKNOWN, 1 SERVING, 2 NOT_SERVING, 3 SERVICE_UNKNOWN).
#include "cli/health_command.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"

namespace refit {
namespace {

const char* ServingStatusName(int v) {
  switch (v) {
    case 0: return "UNKNOWN";
    case 1: return "SERVING";
    case 2: return "NOT_SERVING (refitd is shutting down)";
    case 3: return "SERVICE_UNKNOWN";
  }
  return "an unknown status";
}

}  // namespace

absl::StatusOr<std::string> RunHealthCommand(const HealthCommandOptions& opt) {
  if (opt.server.empty()) return absl::InvalidArgumentError("--server: empty");
  const std::string where = absl::StrCat("refitd ", opt.server);
  RefitClient::Options co;
  co.target = opt.server;
  REFIT_RETURN_IF_ERROR(ApplyClientTls(opt.tls, &co));
  auto channel = RefitClient::NewChannel(co);
  grpc::GenericStub generic(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + opt.timeout));
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1), response;
  absl::Notification done;
  grpc::Status status;
  generic.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request,
                    &response, [&](grpc::Status s) {
                      status = std::move(s);
                      done.Notify();
                    });
  // The call's own deadline ends it; this bound only guards against a stuck
  // channel.
  if (!done.WaitForNotificationWithTimeout(opt.timeout + absl::Seconds(5))) {
    ctx.TryCancel();
    done.WaitForNotification();
  }
  if (!status.ok()) return AnnotateStatus(FromGrpcStatus(status), where);
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (response.Dump(&slices).ok()) {
    for (const grpc::Slice& s : slices) {
      bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
  }
  // An absent field is its zero value, UNKNOWN.
  const int serving = bytes.size() == 2 && bytes[0] == '\x08' ? bytes[1] : 0;
  if (serving != 1) {
    return absl::UnavailableError(
        absl::StrCat(where, ": ", ServingStatusName(serving)));
  }
  return absl::StrCat(where, ": SERVING\n");
}

}  // namespace refit

// A grpc.health.v1 check of a server on 127.0.0.1 without generated stubs,
// for tests of refitd's health service.
#ifndef REFIT_TESTING_HEALTH_CHECK_H_
#define REFIT_TESTING_HEALTH_CHECK_H_

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace refit::testing {

// Calls grpc.health.v1.Health/Check with an empty request (all services)
// and no token, bounded by `deadline`. Returns the call's status (the gRPC
// one translated; DEADLINE_EXCEEDED if it did not return in twice the
// deadline) and, in `serving`, whether the reply says SERVING.
absl::Status CheckHealth(int port, bool* serving,
                         absl::Duration deadline = absl::Seconds(5));

}  // namespace refit::testing

#endif  // REFIT_TESTING_HEALTH_CHECK_H_

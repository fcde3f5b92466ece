// The wire forms (refit_service.proto) of refit's closed sets and back: the
// one place where refit.v1.Side meets layout/side.h's Side and
// refit.v1.Transport meets exec/transport/transport_kind.h's TransportKind.
#ifndef REFIT_EXEC_TRANSPORT_WIRE_ENUMS_H_
#define REFIT_EXEC_TRANSPORT_WIRE_ENUMS_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "exec/transport/transport_kind.h"
#include "layout/side.h"
#include "proto/refit_service.pb.h"

namespace refit {

// Returns SIDE_TRAINER or SIDE_ENGINE.
v1::Side SideToProto(Side side);

// Returns the side `side` names; INVALID_ARGUMENT naming `field` (e.g.
// "identity.side") for SIDE_UNSPECIFIED or a value this build does not know.
absl::StatusOr<Side> SideFromProto(v1::Side side, absl::string_view field);

// Returns TRANSPORT_GLOO, TRANSPORT_NCCL or TRANSPORT_PULL.
v1::Transport TransportToProto(TransportKind kind);

// Returns the kind `transport` names; INVALID_ARGUMENT naming `field` (e.g.
// "identity.transport") for TRANSPORT_UNSPECIFIED or a value this build does
// not know.
absl::StatusOr<TransportKind> TransportFromProto(v1::Transport transport,
                                                 absl::string_view field);

}  // namespace refit

#endif  // REFIT_EXEC_TRANSPORT_WIRE_ENUMS_H_

// The wire forms (refit_service.proto) of refit's closed sets and back: the
// one place where refit.v1.Side and layout/side.h's Side meet.
#ifndef REFIT_EXEC_WIRE_ENUMS_H_
#define REFIT_EXEC_WIRE_ENUMS_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "layout/side.h"
#include "proto/refit_service.pb.h"

namespace refit {

// Returns SIDE_TRAINER or SIDE_ENGINE.
v1::Side SideToProto(Side side);

// Returns the side `side` names; INVALID_ARGUMENT naming `field` (e.g.
// "identity.side") for SIDE_UNSPECIFIED or a value this build does not know.
absl::StatusOr<Side> SideFromProto(v1::Side side, absl::string_view field);

}  // namespace refit

#endif  // REFIT_EXEC_WIRE_ENUMS_H_

// Wire enum conversions (see wire_enums.h).
#include "exec/transport/wire_enums.h"

#include "absl/strings/str_cat.h"

namespace refit {

v1::Side SideToProto(Side side) {
  return side == Side::kTrainer ? v1::SIDE_TRAINER : v1::SIDE_ENGINE;
}

absl::StatusOr<Side> SideFromProto(v1::Side side, absl::string_view field) {
  switch (side) {
    case v1::SIDE_TRAINER:
      return Side::kTrainer;
    case v1::SIDE_ENGINE:
      return Side::kEngine;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": ", static_cast<int>(side),
          " is neither SIDE_TRAINER nor SIDE_ENGINE"));
  }
}

v1::Transport TransportToProto(TransportKind kind) {
  switch (kind) {
    case TransportKind::kGloo:
      return v1::TRANSPORT_GLOO;
    case TransportKind::kNccl:
      return v1::TRANSPORT_NCCL;
    case TransportKind::kPull:
      return v1::TRANSPORT_PULL;
  }
  return v1::TRANSPORT_UNSPECIFIED;
}

absl::StatusOr<TransportKind> TransportFromProto(v1::Transport transport,
                                                 absl::string_view field) {
  switch (transport) {
    case v1::TRANSPORT_GLOO:
      return TransportKind::kGloo;
    case v1::TRANSPORT_NCCL:
      return TransportKind::kNccl;
    case v1::TRANSPORT_PULL:
      return TransportKind::kPull;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": ", static_cast<int>(transport),
          " is none of TRANSPORT_GLOO, TRANSPORT_NCCL, TRANSPORT_PULL"));
  }
}

}  // namespace refit

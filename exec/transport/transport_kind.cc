// Transport kind names (see transport_kind.h).
#include "exec/transport/transport_kind.h"

namespace refit {

absl::string_view TransportKindName(TransportKind kind) {
  switch (kind) {
    case TransportKind::kGloo:
      return "gloo";
    case TransportKind::kNccl:
      return "nccl";
    case TransportKind::kPull:
      return "pull";
  }
  return "?";
}

}  // namespace refit

// TransportKind: which data plane a member's transport is. Members of one
// job must agree on it (refitd checks); //exec/transport:wire_enums converts it to and
// from the wire's refit.v1.Transport.
#ifndef REFIT_EXEC_TRANSPORT_TRANSPORT_KIND_H_
#define REFIT_EXEC_TRANSPORT_TRANSPORT_KIND_H_

#include "absl/strings/string_view.h"

namespace refit {

enum class TransportKind {
  kGloo,  // host buffers, Gloo over TCP
  kNccl,  // device buffers, NCCL
  kPull,  // device buffers of one host, the colocated pull path
};

// Returns "gloo", "nccl" or "pull".
absl::string_view TransportKindName(TransportKind kind);

}  // namespace refit

#endif  // REFIT_EXEC_TRANSPORT_TRANSPORT_KIND_H_

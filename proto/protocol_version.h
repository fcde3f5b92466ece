#ifndef REFIT_PROTO_PROTOCOL_VERSION_H_
#define REFIT_PROTO_PROTOCOL_VERSION_H_

#include <cstdint>

namespace refit {

// The refit wire protocol: what the messages of refit_service.proto and
// plan.proto mean, beyond their encoding (e.g. how a plan slice's copy
// programs are laid out). Every client library sends it in
// Registration.protocol_version; refitd refuses a member that speaks another
// one with FAILED_PRECONDITION naming both, before handing it a slice it
// could misread. Bump it with any change an older peer would misinterpret
// rather than reject.
inline constexpr uint32_t kProtocolVersion = 5;

// The address refitd listens on unless --address says otherwise, and the one
// `refit status` and `refit health` ask unless --server says otherwise.
inline constexpr char kDefaultRefitdAddress[] = "127.0.0.1:50051";

}  // namespace refit

#endif  // REFIT_PROTO_PROTOCOL_VERSION_H_

// Checks of member registrations that need no server state: the protocol
// version, limits and well-formedness of one registration, whether a whole
// membership can connect its data planes; and the names refitd gives members.
#ifndef REFIT_SERVER_REGISTRATION_H_
#define REFIT_SERVER_REGISTRATION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proto/refit_service.pb.h"

namespace refit {

// OK when the registration's protocol_version is this refitd's
// (proto/protocol_version.h); FAILED_PRECONDITION naming the member and both
// versions otherwise.
absl::Status CheckProtocolVersion(const v1::Registration& reg);

// Checks one registration against the limits; returns INVALID_ARGUMENT
// naming the offending field (e.g. "buffers[3].shape[1]"), OK otherwise.
absl::Status ValidateRegistration(const v1::Registration& reg,
                                  int max_buffers, int64_t max_metadata_bytes);

// Checks that the members can connect their data planes; INVALID_ARGUMENT
// naming two members otherwise: they name different transports
// (identity.transport), or — on a transport other than pull — both are on
// one physical GPU (identity.device_uuid; NCCL connects one rank per GPU).
// On pull, pairs across hosts are checked per pair after planning
// (plan_assembly.h). refitd plans no membership that fails it.
absl::Status CheckDataPlane(const std::vector<v1::Registration>& trainer,
                            const std::vector<v1::Registration>& engine);

// Returns a deterministic fingerprint (16 hex digits) of a list of
// registrations.
std::string FingerprintRegistrations(
    const std::vector<const v1::Registration*>& regs);

// Returns the registration's deterministic serialization (equal
// registrations give equal bytes).
std::string SerializeRegistration(const v1::Registration& reg);

// Returns the member id refitd gives a member: "trainer/<job>/<rank>" or
// "engine/<job>/<engine id>/<rank>".
std::string MemberKey(const v1::MemberIdentity& id);

// Returns a member's name for messages: "trainer rank 3", "engine A rank 0".
std::string DescribeMember(const v1::MemberIdentity& id);

}  // namespace refit

#endif  // REFIT_SERVER_REGISTRATION_H_

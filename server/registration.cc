// Registration checks and member names (see registration.h).
#include "server/registration.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "common/hash.h"
#include "common/status_macros.h"
#include "exec/transport/wire_enums.h"
#include "layout/dtype.h"
#include "proto/protocol_version.h"

namespace refit {
namespace {

using v1::Registration;

constexpr int64_t kMaxElements = int64_t{1} << 50;

// "gloo", "nccl", "pull"; the number for a value this build does not know.
std::string WireTransportName(v1::Transport t) {
  absl::StatusOr<TransportKind> k = TransportFromProto(t, "identity.transport");
  return k.ok() ? std::string(TransportKindName(*k)) : absl::StrCat(static_cast<int>(t));
}

}  // namespace

std::string MemberKey(const v1::MemberIdentity& id) {
  if (id.side() == v1::SIDE_TRAINER) {
    return absl::StrCat("trainer/", id.job(), "/", id.rank());
  }
  return absl::StrCat("engine/", id.job(), "/", id.engine_id(), "/", id.rank());
}

std::string DescribeMember(const v1::MemberIdentity& id) {
  if (id.side() == v1::SIDE_TRAINER) return absl::StrCat("trainer rank ", id.rank());
  return absl::StrCat("engine ", id.engine_id(), " rank ", id.rank());
}

std::string SerializeRegistration(const Registration& reg) {
  std::string out;
  google::protobuf::io::StringOutputStream stream(&out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.SetSerializationDeterministic(true);
  reg.SerializeToCodedStream(&coded);
  coded.Trim();
  return out;
}

absl::Status CheckDataPlane(const std::vector<Registration>& trainer,
                            const std::vector<Registration>& engine) {
  std::vector<const v1::MemberIdentity*> all;
  for (const auto* side : {&trainer, &engine}) {
    for (const Registration& r : *side) all.push_back(&r.identity());
  }
  // One transport for everyone: members that disagree would wait for each
  // other on different wires until their deadlines.
  const v1::MemberIdentity* first = nullptr;
  for (const v1::MemberIdentity* id : all) {
    if (id->transport() == v1::TRANSPORT_UNSPECIFIED) continue;
    if (first == nullptr) {
      first = id;
    } else if (id->transport() != first->transport()) {
      return absl::InvalidArgumentError(absl::StrCat(
          DescribeMember(*first), " uses the ", WireTransportName(first->transport()),
          " data plane and ", DescribeMember(*id), " the ",
          WireTransportName(id->transport()),
          " one: every member of a job must use the same transport"));
    }
  }
  // The pull path: several members on one GPU are what it is for; pairs
  // across hosts go over NCCL, checked per pair once the plan says which
  // pairs exchange (RunPlanFunction).
  if (first != nullptr && first->transport() == v1::TRANSPORT_PULL) return absl::OkStatus();
  std::map<std::string, const v1::MemberIdentity*> by_gpu;
  for (const v1::MemberIdentity* id : all) {
    if (id->device_uuid().empty()) continue;
    auto [it, fresh] = by_gpu.emplace(id->device_uuid(), id);
    if (fresh) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        DescribeMember(*it->second), " (", it->second->device(), ") and ", DescribeMember(*id),
        " (", id->device(), ") on host ", id->host_id(), " are on the same GPU ",
        id->device_uuid(),
        ": NCCL connects one rank per GPU, so a trainer and an engine sharing "
        "GPUs (colocated) cannot refit over it; give each member its own GPU, "
        "or use the colocated pull path (transport \"pull\")"));
  }
  return absl::OkStatus();
}

absl::Status CheckProtocolVersion(const Registration& reg) {
  const uint32_t v = reg.protocol_version();
  if (v == kProtocolVersion) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "protocol_version: member ", DescribeMember(reg.identity()), " speaks ",
      v == 0 ? std::string("no refit protocol version (a client library from "
                           "before versions were sent)")
             : absl::StrCat("refit protocol ", v),
      ", this refitd speaks ", kProtocolVersion,
      ": run refitd and the client library from the same refit release"));
}

absl::Status ValidateRegistration(const Registration& reg, int max_buffers,
                                  int64_t max_metadata_bytes) {
  auto bad = [](std::string msg) { return absl::InvalidArgumentError(msg); };
  const int64_t size = static_cast<int64_t>(reg.ByteSizeLong());
  if (size > max_metadata_bytes) {
    return bad(absl::StrCat("registration: ", size,
                            " bytes of metadata exceed the limit of ",
                            max_metadata_bytes, " (--max_metadata_bytes)"));
  }
  const auto& id = reg.identity();
  REFIT_RETURN_IF_ERROR(SideFromProto(id.side(), "identity.side").status());
  if (id.transport() != v1::TRANSPORT_UNSPECIFIED) {
    REFIT_RETURN_IF_ERROR(
        TransportFromProto(id.transport(), "identity.transport").status());
  }
  if (id.job().empty()) return bad("identity.job: empty");
  if (id.side() == v1::SIDE_ENGINE && id.engine_id().empty()) {
    return bad("identity.engine_id: empty for an engine member");
  }
  if (id.world_size() <= 0) {
    return bad(absl::StrCat("identity.world_size: ", id.world_size(),
                            " is not positive"));
  }
  if (id.rank() < 0 || id.rank() >= id.world_size()) {
    return bad(absl::StrCat("identity.rank: ", id.rank(),
                            " is outside [0, world_size=", id.world_size(), ")"));
  }
  if (reg.buffers_size() > max_buffers) {
    return bad(absl::StrCat("buffers: ", reg.buffers_size(),
                            " buffers exceed the limit of ", max_buffers));
  }
  std::set<std::string> names;
  for (int i = 0; i < reg.buffers_size(); ++i) {
    const auto& b = reg.buffers(i);
    const std::string where = absl::StrCat("buffers[", i, "] (", b.name(), ")");
    if (b.name().empty()) return bad(absl::StrCat("buffers[", i, "].name: empty"));
    if (!names.insert(b.name()).second) {
      return bad(absl::StrCat(where, ".name: duplicate buffer name"));
    }
    if (!IsValidDType(b.dtype())) {
      return bad(absl::StrCat(where, ".dtype: unknown dtype ", b.dtype()));
    }
    int64_t elements = 1;
    for (int d = 0; d < b.shape_size(); ++d) {
      const int64_t s = b.shape(d);
      if (s < 0) {
        return bad(absl::StrCat(where, ".shape[", d, "]: negative size ", s));
      }
      if (s > 0 && elements > kMaxElements / s) {
        return bad(absl::StrCat(where, ".shape[", d, "]: shape overflows"));
      }
      elements *= s;
    }
    const int64_t esize = DTypeSize(static_cast<DType>(b.dtype()));
    if (elements > kMaxElements / std::max<int64_t>(esize, 1)) {
      return bad(absl::StrCat(where, ".shape: byte size overflows"));
    }
    if (b.byte_size() != elements * esize) {
      return bad(absl::StrCat(where, ".byte_size: ", b.byte_size(),
                              " disagrees with shape x dtype = ",
                              elements * esize));
    }
  }
  return absl::OkStatus();
}

// Where FingerprintRegistrations starts.
constexpr uint64_t kRegistrationsFingerprintBasis = 1469598103934665603ull;

std::string FingerprintRegistrations(const std::vector<const Registration*>& regs) {
  // FNV-1a (common/hash.h) from this fingerprint's own starting value (not
  // FNV's offset basis: kept so that fingerprints stay what they were), each
  // registration followed by a 0xff step.
  uint64_t h = kRegistrationsFingerprintBasis;
  for (const Registration* r : regs) {
    h = Fnv1a64(SerializeRegistration(*r), h);
    h = Fnv1a64Word(h, 0xff);
  }
  return absl::StrFormat("%016x", h);
}

}  // namespace refit

// Plan codec: Plan <-> refit.v1.PlanProto, and per-rank plan slices.
//
// FromProto treats its input as untrusted (a peer sent it): every index,
// range and size is checked, and a bad plan is INVALID_ARGUMENT, never a
// crash. ExtractSlice cuts the part of a plan one rank executes.
#ifndef REFIT_PLAN_PLAN_CODEC_H_
#define REFIT_PLAN_PLAN_CODEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "layout/side.h"
#include "plan/plan.h"
#include "proto/plan.pb.h"

namespace refit {

// The wire form of `plan` (stats are not sent; FromProto recomputes them).
refit::v1::PlanProto ToProto(const Plan& plan);

// Parses and validates a plan: both sides (ValidateTensorSpec,
// ValidateRecord), tensor matching, every segment (records in range, same
// tensor, box inside both records, bytes), message (ranks, segment ranges,
// contiguous buffers on the right rank and in range), wave (lanes, message
// ranges, message.wave) and options. Fails with INVALID_ARGUMENT naming the
// first bad item.
absl::StatusOr<Plan> FromProto(const refit::v1::PlanProto& proto);

// The part of `plan` that `rank` of `side` takes part in: its messages (as
// sender for kTrainer, receiver for kEngine; an engine rank also the relays
// it sends, a trainer rank those forwarding its bytes: RelayRoots) and
// their segments, the records
// those segments name on both sides and their buffers (renumbered in original
// order), the waves containing them (original order and lanes kept, waves
// without them dropped), all tensors, and the options and fingerprint of the
// whole plan. Stats are those of the slice. A rank outside the side's world
// gives an empty slice.
//
// The peers' buffers keep only their rank and size: a rank never touches a
// peer's memory, and the names (tens of thousands of per-expert trainer
// buffers in an engine rank's slice at DeepSeek-V3 scale) were most of a
// slice's bytes.
Plan ExtractSlice(const Plan& plan, Side side, int rank);

// ToProto(ExtractSlice(plan, side, r)).SerializeAsString() for every r of
// `ranks`, in order, built by up to `threads` threads: what refitd hands its
// members once per membership. Serialized, a slice takes a fraction of the
// parsed proto's memory (DeepSeek-V3, 512 slices: 313 MB). Throws std::bad_alloc
// (on the calling thread) when an allocation fails on any of them.
std::vector<std::string> SerializedSlices(const Plan& plan, Side side,
                                          const std::vector<int32_t>& ranks,
                                          int threads);

}  // namespace refit

#endif  // REFIT_PLAN_PLAN_CODEC_H_

// Fingerprints: 128-bit hex digests of a plan or of one layout, over a
// canonical serialization of their fields. Equal inputs give equal digests.
#ifndef REFIT_PLAN_FINGERPRINT_H_
#define REFIT_PLAN_FINGERPRINT_H_

#include <string>

#include "layout/layout.h"
#include "plan/plan.h"

namespace refit {

// The fingerprint of a plan: a 128-bit hex digest (32 lowercase hex chars)
// over a canonical serialization of every field except `stats`,
// `fingerprint` itself and the waves' plan_bytes and lane_offset (derived
// from the messages, plan/wave_bytes.h). BuildPlan sets plan.fingerprint to this. Never
// fails.
std::string PlanFingerprint(const Plan& plan);

// The same kind of digest over one layout alone: every field of its
// tensors, buffers, records and rank annotations, as PlanFingerprint hashes
// each side. Equal layouts give equal digests (e.g. to check that a change
// to the mapping tables leaves the layouts byte for byte as they were).
// Never fails.
std::string LayoutFingerprint(const SideLayout& layout);

}  // namespace refit

#endif  // REFIT_PLAN_FINGERPRINT_H_

// Shared by refit's fuzz tests: structural mutation of protos (fields set
// to edge values through reflection, repeated elements dropped or
// duplicated, bytes flipped or cut), and the memory-safety property of an
// accepted plan.
#ifndef REFIT_TESTS_FUZZ_FUZZ_UTIL_H_
#define REFIT_TESTS_FUZZ_FUZZ_UTIL_H_

#include <random>
#include <string>

#include "google/protobuf/message.h"
#include "plan/plan.h"

namespace refit {
namespace fuzz {

// 1-3 structural edits of `m`, in place: a scalar leaf anywhere in the tree
// set to an edge value (0, +-1, +-1 of it, x2, /2, int32/int64 extremes,
// 2^40, small random), a bool flipped, a string emptied, or the last element
// of a repeated field dropped / a random one duplicated.
void MutateInPlace(std::mt19937_64& rng, google::protobuf::Message* m);

// `bytes` with a few bits flipped, or cut short.
std::string MutateBytes(std::mt19937_64& rng, std::string bytes);

// "" if every copy the executor would run for `p` — the zero-copy ranges,
// PackProgram and UnpackProgram tasks — stays inside the buffers and the
// message's stream (128-bit arithmetic); else what points outside.
std::string CheckPlanInBounds(const Plan& p);

}  // namespace fuzz
}  // namespace refit

#endif  // REFIT_TESTS_FUZZ_FUZZ_UTIL_H_

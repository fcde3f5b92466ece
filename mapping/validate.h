// Checks what a rank registers against what the layout expects of it.
#ifndef REFIT_MAPPING_VALIDATE_H_
#define REFIT_MAPPING_VALIDATE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "mapping/layout_builder.h"

namespace refit {

// OK if `registered` is exactly RankBuffers(side, rank): same names, each
// with the expected local shape, dtype and byte size. Otherwise
// INVALID_ARGUMENT listing every problem, one per line, each naming the rank
// and the parameter: an unknown parameter name, a shape / dtype / byte-size
// mismatch (expected vs registered), a name registered twice, and the
// expected parameters that are missing. INVALID_ARGUMENT too for a rank
// outside the world.
absl::Status ValidateRankBuffers(const MappedSide& side, int32_t rank,
                                 absl::Span<const LocalBuffer> registered);

}  // namespace refit

#endif  // REFIT_MAPPING_VALIDATE_H_

// Side: which end of a refit a rank is on. The trainer side holds the
// weights a round sends (a plan's src); the engine side receives them (a
// plan's dst). The one C++ spelling of the two sides; //exec:wire_enums
// converts it to and from the wire's refit.v1.Side.
#ifndef REFIT_LAYOUT_SIDE_H_
#define REFIT_LAYOUT_SIDE_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace refit {

enum class Side { kTrainer, kEngine };

// Returns "trainer" or "engine".
absl::string_view SideName(Side side);

// Returns the side named "trainer" or "engine" (as SideName writes it);
// INVALID_ARGUMENT quoting `name` for anything else (callers add the name of
// the option it came from).
absl::StatusOr<Side> ParseSide(absl::string_view name);

}  // namespace refit

#endif  // REFIT_LAYOUT_SIDE_H_

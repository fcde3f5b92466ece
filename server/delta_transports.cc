#include "server/delta_transports.h"

#include "absl/strings/str_cat.h"
#include "server/registration.h"

namespace refit {

absl::Status CheckDeltaTransports(const PlanInput& input) {
  for (const auto* side : {&input.trainer, &input.engine}) {
    for (const v1::Registration& r : *side) {
      if (r.identity().transport() != v1::TRANSPORT_PULL) continue;
      return absl::FailedPreconditionError(absl::StrCat(
          DescribeMember(r.identity()),
          " registered the colocated pull transport, on which delta rounds (refitd --delta) "
          "do not run: a pull round copies each piece once on its GPU, cheaper than comparing "
          "two versions. Run refitd without --delta, or register every member with the "
          "NCCL transport"));
    }
  }
  return absl::OkStatus();
}

}  // namespace refit

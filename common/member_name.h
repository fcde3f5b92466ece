// How refit names a member in messages and logs, everywhere the same.
#ifndef REFIT_COMMON_MEMBER_NAME_H_
#define REFIT_COMMON_MEMBER_NAME_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace refit {

// Returns "trainer rank 3" for a trainer rank, "engine e0 rank 1" for rank
// 1 of engine replica "e0", and "engine rank 1" when `engine_id` is empty
// (an engine-side rank of a layout or a plan, counted over all replicas).
// `engine_id` is ignored for a trainer.
std::string MemberName(bool trainer, absl::string_view engine_id, int32_t rank);

}  // namespace refit

#endif  // REFIT_COMMON_MEMBER_NAME_H_

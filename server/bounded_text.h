// Text from a peer that refitd keeps or sends on (a round's abort reason, a
// plan error) cut to a bound, so one peer cannot make refitd hold or
// broadcast megabytes.
#ifndef REFIT_SERVER_BOUNDED_TEXT_H_
#define REFIT_SERVER_BOUNDED_TEXT_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace refit {

// Bytes kept of a member's failure reason and of a plan error.
inline constexpr size_t kMaxReasonBytes = 4096;

// Returns `text` when it has at most `max_bytes` bytes; else its first bytes
// (cut at a UTF-8 character boundary) followed by " ... [N bytes cut]", at
// most max_bytes + 32 bytes in all.
std::string BoundedText(absl::string_view text, size_t max_bytes = kMaxReasonBytes);

// Returns `status` with its message cut by BoundedText (same code).
absl::Status BoundedStatus(const absl::Status& status,
                           size_t max_bytes = kMaxReasonBytes);

}  // namespace refit

#endif  // REFIT_SERVER_BOUNDED_TEXT_H_

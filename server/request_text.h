// The text a caller sends refitd (names, ids, keys, reasons, model configs)
// travels as `bytes` on the wire; refitd checks that it is UTF-8 here, after
// the caller's credentials were checked, instead of the protobuf library
// doing it while parsing (which logs a line for each bad call).
#ifndef REFIT_SERVER_REQUEST_TEXT_H_
#define REFIT_SERVER_REQUEST_TEXT_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"

namespace refit {

// Returns whether `text` is well-formed UTF-8 (no overlong forms, no
// surrogates, nothing above U+10FFFF).
bool IsUtf8(absl::string_view text);

// Checks every text field of `request` (every string or bytes field, in
// nested messages too, except the binary ones: member_secret,
// KvSetRequest.value and RegisterRequest.job_key). OK when all are UTF-8;
// else INVALID_ARGUMENT naming the first field that is not, as a path
// ("registration.buffers[3].name: not UTF-8 (byte 7 of 12)").
absl::Status CheckRequestText(const google::protobuf::Message& request);

}  // namespace refit

#endif  // REFIT_SERVER_REQUEST_TEXT_H_

// The text a caller sends refitd (names, ids, keys, reasons, model configs)
// travels as `bytes` on the wire; refitd checks that it is UTF-8 and within
// its field's limit here, after the caller's credentials were checked,
// instead of the protobuf library doing it while parsing (which logs a line
// for each bad call). The limits (docs/reliability.md lists them):
//
//   job, engine_id, device, device_uuid      128 bytes
//   host_id, convention                      256 bytes
//   member_id (every request)                512 bytes
//   buffer name (LocalBuffer.name)           1 KiB
//   digest part tensor name                  1 KiB
//   KV key (KvSet, KvGet)                    1 KiB
//   ReportRequest.reason                     64 KiB (kept cut to 4 KiB)
//   model_config (a name or config.json)     1 MiB
//   any other text field                     4 KiB
#ifndef REFIT_SERVER_REQUEST_TEXT_H_
#define REFIT_SERVER_REQUEST_TEXT_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace refit {

// Returns whether `text` is well-formed UTF-8 (no overlong forms, no
// surrogates, nothing above U+10FFFF).
bool IsUtf8(absl::string_view text);

// Returns the most bytes a text field may hold (the table above).
size_t MaxTextBytes(const google::protobuf::FieldDescriptor& field);

// Checks every text field of `request` (every string or bytes field, in
// nested messages too, except the binary ones: member_secret,
// KvSetRequest.value and RegisterRequest.job_key). OK when all are UTF-8 and
// within their limits; else INVALID_ARGUMENT naming the first field that is
// not, as a path ("registration.buffers[3].name: not UTF-8 (byte 7 of 12)",
// "registration.identity.host_id: 62914560 bytes, over its limit of 256").
// A field over its limit is refused without reading its bytes.
absl::Status CheckRequestText(const google::protobuf::Message& request);

}  // namespace refit

#endif  // REFIT_SERVER_REQUEST_TEXT_H_

// Reading a whole small file (a config.json, a token, a PEM, an index) with
// a size cap: what a path from a flag or an option is read with, so that a
// device (/dev/zero), a FIFO or a huge file fails at once with a clear
// error instead of reading forever or filling memory.
#ifndef REFIT_COMMON_FILE_H_
#define REFIT_COMMON_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace refit {

// Returns the contents of the regular file at `path`. Fails, naming the
// path, with NOT_FOUND when it does not exist; PERMISSION_DENIED when it
// may not be read; INVALID_ARGUMENT when it is not a regular file (a
// directory, a device, a FIFO, a socket) or holds more than `max_bytes`
// bytes (naming the cap); INTERNAL for another open or read error (naming
// the system's reason). Never blocks on a FIFO or reads past the cap.
absl::StatusOr<std::string> ReadFileToString(const std::string& path,
                                             int64_t max_bytes);

}  // namespace refit

#endif  // REFIT_COMMON_FILE_H_

// Reading a whole file with a size cap (see file.h).
#include "common/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace refit {
namespace {

absl::Status OpenError(const std::string& path, int err) {
  const std::string why = absl::StrCat("cannot read ", path, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(why);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(why);
    default:
      return absl::InternalError(why);
  }
}

absl::Status TooLarge(const std::string& path, int64_t max_bytes) {
  return absl::InvalidArgumentError(absl::StrCat(
      path, " holds more than ", max_bytes, " bytes, the most read from it"));
}

// Closes the descriptor it holds when it goes out of scope.
struct Fd {
  int fd;
  ~Fd() { close(fd); }
};

}  // namespace

absl::StatusOr<std::string> ReadFileToString(const std::string& path,
                                             int64_t max_bytes) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer (fstat refuses it
  // next); it changes nothing for a regular file.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return OpenError(path, errno);
  Fd closer{fd};
  struct stat st;
  if (fstat(fd, &st) != 0) return OpenError(path, errno);
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, " is not a regular file (a directory, a device or a pipe)"));
  }
  if (st.st_size > max_bytes) return TooLarge(path, max_bytes);
  // The size may change while it is read: read until EOF, but never past
  // the cap.
  std::string out;
  out.resize(static_cast<size_t>(std::max<int64_t>(st.st_size, 0)) + 1);
  size_t used = 0;
  while (true) {
    if (used == out.size()) {
      if (static_cast<int64_t>(used) > max_bytes) return TooLarge(path, max_bytes);
      out.resize(std::min<size_t>(out.size() * 2, static_cast<size_t>(max_bytes) + 1));
    }
    const ssize_t n = read(fd, &out[used], out.size() - used);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(
          absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
    }
    if (n == 0) break;
    used += static_cast<size_t>(n);
  }
  if (static_cast<int64_t>(used) > max_bytes) return TooLarge(path, max_bytes);
  out.resize(used);
  return out;
}

}  // namespace refit

// RefitdProcess (see refitd_process.h).
#include "testing/refitd_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/file.h"

namespace refit {

RefitdProcess::~RefitdProcess() {
  if (pid_ > 0 && !reaped_) {
    kill(pid_, SIGCONT);
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

absl::Status RefitdProcess::Start(const std::string& binary,
                                  const std::vector<std::string>& flags,
                                  const std::string& log_path, absl::Duration timeout,
                                  int64_t fd_limit) {
  // Emptied here, not in the child: a port printed into this file by an
  // earlier refitd must not be read as this one's.
  const int log_fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    return absl::UnavailableError(absl::StrCat("cannot create ", log_path));
  }
  close(log_fd);
  pid_ = fork();
  if (pid_ == 0) {
    if (fd_limit > 0) {
      const rlimit lim{static_cast<rlim_t>(fd_limit), static_cast<rlim_t>(fd_limit)};
      if (setrlimit(RLIMIT_NOFILE, &lim) != 0) _exit(126);
    }
    int fd = open(log_path.c_str(), O_WRONLY | O_APPEND);
    dup2(fd, 1);
    dup2(fd, 2);
    std::vector<std::string> args = {binary, "--address=127.0.0.1:0"};
    args.insert(args.end(), flags.begin(), flags.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  const absl::Time deadline = absl::Now() + timeout;
  const std::string key = "listening on port ";
  std::string text;
  while (absl::Now() < deadline) {
    absl::StatusOr<std::string> t = ReadFileToString(log_path, 1 << 20);
    if (t.ok()) text = *t;
    size_t at = text.find(key);
    size_t end = at == std::string::npos ? at : text.find('\n', at);
    if (end != std::string::npos &&
        absl::SimpleAtoi(text.substr(at + key.size(), end - at - key.size()), &port_)) {
      return absl::OkStatus();
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::UnavailableError(absl::StrCat(
      binary, " printed no port within ", absl::FormatDuration(timeout), ": ",
      text.substr(text.size() > 2000 ? text.size() - 2000 : 0)));
}

bool RefitdProcess::Alive() {
  if (pid_ <= 0 || reaped_) return false;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) {
    reaped_ = true;
    return false;
  }
  return true;
}

int64_t RefitdProcess::PeakRssKib() const {
  absl::StatusOr<std::string> s =
      ReadFileToString(absl::StrCat("/proc/", pid_, "/status"), 1 << 16);
  if (!s.ok()) return -1;
  for (absl::string_view line : absl::StrSplit(*s, '\n')) {
    if (!absl::ConsumePrefix(&line, "VmHWM:")) continue;
    int64_t kib = -1;
    line = absl::StripAsciiWhitespace(line);
    absl::ConsumeSuffix(&line, " kB");
    return absl::SimpleAtoi(line, &kib) ? kib : -1;
  }
  return -1;
}

}  // namespace refit

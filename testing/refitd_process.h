// RefitdProcess: the refitd binary as a child process on 127.0.0.1:0, for
// tests that stop (SIGSTOP) or measure it (its peak RSS). Test-only.
#ifndef REFIT_TESTING_REFITD_PROCESS_H_
#define REFIT_TESTING_REFITD_PROCESS_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace refit {

class RefitdProcess {
 public:
  RefitdProcess() = default;
  RefitdProcess(const RefitdProcess&) = delete;
  RefitdProcess& operator=(const RefitdProcess&) = delete;
  // Kills (SIGCONT, then SIGKILL) and reaps the child.
  ~RefitdProcess();

  // Starts `binary` with --address=127.0.0.1:0 and `flags`, its output in
  // `log_path`, and waits up to `timeout` for its port. With `fd_limit` > 0
  // the child's open-file limit (soft and hard) is set to it before exec.
  // UNAVAILABLE naming the log's tail when it did not print a port in time.
  absl::Status Start(const std::string& binary, const std::vector<std::string>& flags,
                     const std::string& log_path, absl::Duration timeout,
                     int64_t fd_limit = 0);

  // Returns whether the child is still running (not exited or killed).
  bool Alive();

  // Returns the child's peak resident set (VmHWM) in KiB; -1 when unknown.
  int64_t PeakRssKib() const;

  pid_t pid() const { return pid_; }
  int port() const { return port_; }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  bool reaped_ = false;
};

}  // namespace refit

#endif  // REFIT_TESTING_REFITD_PROCESS_H_

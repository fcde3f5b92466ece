// Worker processes and their results (see colocated_spawn.h).
#include "bench/colocated_spawn.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace refit::bench {

void WriteResult(const std::string& path, const std::map<std::string, std::string>& kv) {
  std::ofstream f(path);
  for (const auto& [k, v] : kv) f << k << "=" << v << "\n";
}

std::map<std::string, std::string> ReadResult(const std::string& path) {
  std::map<std::string, std::string> kv;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos) kv[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return kv;
}

absl::StatusOr<std::vector<std::map<std::string, std::string>>> Spawn(
    const char* self, const std::vector<std::string>& args, int n, const std::string& dir,
    const std::vector<std::string>& flags) {
  std::vector<pid_t> pids;
  for (int i = 0; i < n; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      std::vector<std::string> a = {self, "--worker"};
      a.insert(a.end(), args.begin(), args.end());
      a.push_back(std::to_string(i));
      a.push_back(dir);
      a.insert(a.end(), flags.begin(), flags.end());
      std::vector<char*> av;
      for (auto& x : a) av.push_back(x.data());
      av.push_back(nullptr);
      execv("/proc/self/exe", av.data());
      _exit(127);
    }
    pids.push_back(pid);
  }
  const absl::Time until = absl::Now() + absl::Seconds(400);
  std::vector<bool> done(n, false);
  int left = n;
  while (left > 0 && absl::Now() < until) {
    for (int i = 0; i < n; ++i) {
      int st = 0;
      if (!done[i] && waitpid(pids[i], &st, WNOHANG) == pids[i]) {
        done[i] = true;
        --left;
      }
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  std::vector<std::map<std::string, std::string>> out;
  for (int i = 0; i < n; ++i) {
    if (!done[i]) {
      kill(pids[i], SIGKILL);
      waitpid(pids[i], nullptr, 0);
      return absl::DeadlineExceededError(absl::StrCat("worker ", i, " timed out"));
    }
    out.push_back(ReadResult(absl::StrCat(dir, "/result.", i)));
    if (out.back().count("error")) return absl::InternalError(out.back()["error"]);
    if (out.back().empty()) return absl::InternalError(absl::StrCat("worker ", i, " crashed"));
  }
  return out;
}

}  // namespace refit::bench

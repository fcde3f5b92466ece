// refit_demo: a whole refit on this machine — refitd plus one process per
// trainer rank and engine rank (refit_demo_member), talking over loopback:
// registration, planning on refitd (mapping tables + planner), plan slices,
// then N rounds of weight versions moved over the host transport with every
// engine byte checked. While the members run it follows refitd's status:
// every second a progress line for a round running longer than a second
// ("round 3: 5/8 members reported, 1.9 s, 1.19 GB per engine rank so far")
// and a final line per round (round_progress.h). Then prints a table per
// round (bytes and GB/s as common/round_bytes.h defines them, from the
// members' own figures) and a final verification line with the achieved
// GB/s; exits 0 only if every round committed and every engine rank holds
// exactly the trainer's bytes.
//
// Flags (--name=value):
//   --refitd=PATH --member=PATH   the two binaries
//   --model=NAME                  built-in model (default qwen3-0.6b)
//   --trainer=SPEC                trainer layout (default megatron:tp=2)
//   --engines=SPEC[;SPEC...]      one engine per spec, ids e0, e1, ...
//                                 (default vllm:tp=1;vllm:tp=2)
//   --rounds=N (3)  --deadline_s=S (300)  --lanes=K (2)  --staging_mib=M (64)
//   --verify                      executor verify mode as well
//   --delta_every=N               refitd --delta, and rounds 2.. change
//                                 about 1/N of the words (50: 2%)
//   --staged                      engines stage each round: received while
//                                 they serve, applied in a pause once every
//                                 engine rank holds it (the table and the
//                                 round lines give the pause)
//   --gpus=N                      member i (trainers first) on GPU i with the
//                                 NCCL transport (--member must be
//                                 refit_demo_member_gpu; needs N >= members)
//   --transport=pull              with --gpus: the colocated pull path, the
//                                 members sharing the N GPUs as RL jobs do
//                                 (trainer rank r on GPU r % N, the k-th
//                                 engine rank, counted over all engines,
//                                 on GPU k % N)
//   --test_round_delay_ms=N       passed to the members (only
//                                 refit_demo_member_slow honours it: tests)
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/refit_client.h"
#include "common/file.h"
#include "mapping/parallel_spec.h"
#include "common/round_bytes.h"
#include "tools/refit_demo/round_progress.h"

namespace {

struct Proc {
  std::string name;
  pid_t pid = -1;
  std::string log;  // path of its stdout+stderr
  int status = -1;  // wait status once exited
  bool done = false;
};

// Starts argv with stdout/stderr to `log`.
bool Spawn(Proc* p, const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    int fd = open(p->log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    setpgid(0, 0);
    execv(argv[0], argv.data());
    std::perror("execv");
    _exit(127);
  }
  p->pid = pid;
  return true;
}

// A process's log, or why it cannot be read.
std::string ReadAll(const std::string& path) {
  absl::StatusOr<std::string> log = refit::ReadFileToString(path, int64_t{64} << 20);
  return log.ok() ? *log : log.status().ToString();
}

void KillAll(std::vector<Proc>& ps) {
  for (Proc& p : ps) {
    if (!p.done && p.pid > 0) kill(p.pid, SIGKILL);
  }
  for (Proc& p : ps) {
    if (!p.done && p.pid > 0) {
      waitpid(p.pid, &p.status, 0);
      p.done = true;
    }
  }
}

// Prints round_progress.h's lines from refitd's status, polled every
// 250 ms; prints nothing when refitd cannot be asked.
class ProgressPrinter {
 public:
  explicit ProgressPrinter(int port) {
    refit::RefitClient::Options o;
    o.target = absl::StrCat("127.0.0.1:", port);
    o.connect_timeout = absl::Seconds(5);
    o.rpc_timeout = absl::Seconds(2);
    absl::StatusOr<std::unique_ptr<refit::RefitClient>> c = refit::RefitClient::Connect(o);
    if (c.ok()) {
      client_ = std::move(*c);
    } else {
      std::fprintf(stderr, "refit_demo: no round progress: %s\n",
                   c.status().ToString().c_str());
    }
  }

  // Asks refitd and prints what is due, at most every 250 ms unless `now`.
  void Poll(bool now = false) {
    if (client_ == nullptr || (!now && absl::Now() < next_)) return;
    next_ = absl::Now() + absl::Milliseconds(250);
    absl::StatusOr<refit::v1::StatusResponse> st =
        client_->GetStatus(absl::Now() + absl::Seconds(2));
    if (!st.ok()) return;
    for (const std::string& line : progress_.Update(*st, absl::Now())) {
      std::printf("%s\n", line.c_str());
    }
    std::fflush(stdout);
  }

 private:
  std::unique_ptr<refit::RefitClient> client_;
  refit::RoundProgress progress_;
  absl::Time next_ = absl::InfinitePast();
};

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> f = {
      {"model", "qwen3-0.6b"},   {"trainer", "megatron:tp=2"},
      {"engines", "vllm:tp=1;vllm:tp=2"}, {"rounds", "3"},
      {"deadline_s", "300"},     {"lanes", "2"},
      {"staging_mib", "64"}};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0) {
      std::fprintf(stderr, "refit_demo: unexpected argument %s\n", a.c_str());
      return 2;
    }
    const size_t eq = a.find('=');
    f[a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2)] =
        eq == std::string::npos ? "" : a.substr(eq + 1);
  }
  if (f["refitd"].empty() || f["member"].empty()) {
    std::fprintf(stderr, "refit_demo: --refitd=PATH and --member=PATH are required\n");
    return 2;
  }
  int64_t rounds = 3, deadline_s = 300;
  if (!absl::SimpleAtoi(f["rounds"], &rounds) || rounds < 1 ||
      !absl::SimpleAtoi(f["deadline_s"], &deadline_s) || deadline_s < 1) {
    std::fprintf(stderr, "refit_demo: --rounds and --deadline_s need positive integers\n");
    return 2;
  }
  auto ts = refit::ParseTrainerSpec(f["trainer"]);
  if (!ts.ok()) {
    std::fprintf(stderr, "refit_demo: --trainer: %s\n", std::string(ts.status().message()).c_str());
    return 2;
  }
  std::vector<std::pair<std::string, refit::EngineSpec>> engines;
  for (absl::string_view spec : absl::StrSplit(f["engines"], ';', absl::SkipEmpty())) {
    auto es = refit::ParseEngineSpec(spec);
    if (!es.ok()) {
      std::fprintf(stderr, "refit_demo: --engines: %s\n", std::string(es.status().message()).c_str());
      return 2;
    }
    engines.push_back({std::string(spec), *es});
  }
  int engine_world = 0;
  for (const auto& e : engines) engine_world += e.second.world_size();
  const bool pull = f["transport"] == "pull";
  if (!f["transport"].empty() && f["transport"] != "pull" && f["transport"] != "nccl") {
    std::fprintf(stderr, "refit_demo: --transport=%s: nccl or pull\n", f["transport"].c_str());
    return 2;
  }
  if (pull && f["gpus"].empty()) {
    std::fprintf(stderr, "refit_demo: --transport=pull needs --gpus=N\n");
    return 2;
  }
  int gpus = 0;
  if (!f["gpus"].empty()) {
    if (!absl::SimpleAtoi(f["gpus"], &gpus) || gpus < 1 ||
        (!pull && gpus < ts->world_size() + engine_world)) {
      std::fprintf(stderr, "refit_demo: --gpus=%s: need one GPU per member (%d)\n",
                   f["gpus"].c_str(), ts->world_size() + engine_world);
      return 2;
    }
  }
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(tmp ? tmp : "/tmp", "/refit_demo.", getpid());
  mkdir(dir.c_str(), 0755);

  std::vector<Proc> procs;
  Proc refitd{"refitd", -1, dir + "/refitd.log"};
  if (!Spawn(&refitd, {f["refitd"], "--address=127.0.0.1:0", "--heartbeat_timeout_ms=5000",
                       absl::StrCat("--lanes=", f["lanes"]),
                       absl::StrCat("--staging_mib=", f["staging_mib"]),
                       absl::StrCat("--min_engines=", engines.size()),
                       f.count("delta_every") ? "--delta" : "--nodelta"})) {
    std::perror("fork");
    return 1;
  }
  int port = 0;
  const absl::Time until = absl::Now() + absl::Seconds(30);
  while (port == 0 && absl::Now() < until) {
    std::string out = ReadAll(refitd.log);
    size_t at = out.find("listening on port ");
    if (at != std::string::npos) {
      size_t end = out.find('\n', at);
      if (end != std::string::npos &&
          !absl::SimpleAtoi(out.substr(at + 18, end - at - 18), &port)) {
        port = -1;
      }
    }
    if (waitpid(refitd.pid, &refitd.status, WNOHANG) == refitd.pid) {
      std::fprintf(stderr, "refitd exited early:\n%s", out.c_str());
      return 1;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  if (port <= 0) {
    std::fprintf(stderr, "refitd did not report its port:\n%s", ReadAll(refitd.log).c_str());
    kill(refitd.pid, SIGKILL);
    return 1;
  }
  const std::string server = absl::StrCat("--server=127.0.0.1:", port);
  std::printf("refitd on 127.0.0.1:%d; model %s; trainer %s (%d ranks); ", port,
              f["model"].c_str(), f["trainer"].c_str(), ts->world_size());
  for (size_t e = 0; e < engines.size(); ++e) {
    std::printf("engine e%zu %s (%d ranks)%s", e, engines[e].first.c_str(),
                engines[e].second.world_size(), e + 1 < engines.size() ? ", " : "\n");
  }
  std::fflush(stdout);

  const std::vector<std::string> common = {
      server, "--model=" + f["model"], "--rounds=" + f["rounds"],
      "--deadline_s=" + f["deadline_s"]};
  auto add = [&](const std::string& name, std::vector<std::string> args) {
    Proc p{name, -1, absl::StrCat(dir, "/", name, ".log")};
    args.insert(args.begin(), f["member"]);
    args.insert(args.end(), common.begin(), common.end());
    if (f.count("verify")) args.push_back("--verify");
    if (f.count("delta_every")) args.push_back("--delta_every=" + f["delta_every"]);
    if (f.count("staged") && name.rfind("engine", 0) == 0) args.push_back("--staged");
    if (f.count("test_round_delay_ms")) {
      args.push_back("--test_round_delay_ms=" + f["test_round_delay_ms"]);
    }
    if (!f["gpus"].empty()) {
      // NCCL: a GPU per member; pull: members share the GPUs.
      int device = static_cast<int>(procs.size());
      if (pull) {
        const int index = device < ts->world_size() ? device : device - ts->world_size();
        device = index % gpus;
        args.push_back("--transport=pull");
      }
      args.push_back(absl::StrCat("--device=cuda:", device));
    }
    if (!Spawn(&p, args)) std::perror("fork");
    procs.push_back(p);
  };
  for (int r = 0; r < ts->world_size(); ++r) {
    std::vector<std::string> a = {"--side=trainer", absl::StrCat("--rank=", r),
                                  "--convention=" + f["trainer"]};
    if (r == 0) a.push_back("--start");
    add(absl::StrCat("trainer", r), a);
  }
  for (size_t e = 0; e < engines.size(); ++e) {
    for (int r = 0; r < engines[e].second.world_size(); ++r) {
      add(absl::StrCat("engine_e", e, "_", r),
          {"--side=engine", absl::StrCat("--engine_id=e", e),
           absl::StrCat("--rank=", r), "--convention=" + engines[e].first});
    }
  }

  // Wait for every member; after the first failure the others get the
  // deadline to fail by themselves (they must not hang), then are killed.
  // Meanwhile show the rounds' progress from refitd's status.
  ProgressPrinter progress(port);
  const absl::Time hard = absl::Now() + absl::Seconds(deadline_s + 30);
  bool failed = false;
  size_t left = procs.size();
  while (left > 0 && absl::Now() < hard) {
    progress.Poll();
    for (Proc& p : procs) {
      if (p.done) continue;
      if (waitpid(p.pid, &p.status, WNOHANG) == p.pid) {
        p.done = true;
        --left;
        if (!WIFEXITED(p.status) || WEXITSTATUS(p.status) != 0) failed = true;
      }
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  const bool hung = left > 0;
  progress.Poll(/*now=*/true);  // the last rounds' final lines
  KillAll(procs);
  kill(refitd.pid, SIGTERM);
  waitpid(refitd.pid, &refitd.status, 0);

  // Per round: the engine ranks' received bytes and the slowest member's
  // data-plane time (common/round_bytes.h).
  std::map<int64_t, std::pair<refit::RoundBytes, double>> per_round;
  std::map<int64_t, int> checked;
  std::map<int64_t, double> pause;  // the longest engine pause of each round
  int64_t staging = 0;
  std::string fingerprint;
  for (const Proc& p : procs) {
    std::istringstream in(ReadAll(p.log));
    std::string line;
    while (std::getline(in, line)) {
      long long v = 0, sent = 0, recv = 0, stg = 0;
      double sec = 0;
      char who[128], check[32];
      if (std::sscanf(line.c_str(),
                      "round %lld %127[^:]: sent %lld received %lld bytes in %lf s, "
                      "staging %lld, bytes %31s",
                      &v, who, &sent, &recv, &sec, &stg, check) == 7) {
        if (std::string(who).rfind("engine ", 0) == 0) per_round[v].first.AddEngineRank(recv);
        per_round[v].second = std::max(per_round[v].second, sec);
        if (std::string(check).rfind("equal", 0) == 0) ++checked[v];  // "equal" or "equal,"
        staging = std::max<int64_t>(staging, stg);
        const size_t at = line.find(", pause ");
        double ps = 0;
        if (at != std::string::npos && std::sscanf(line.c_str() + at, ", pause %lf s", &ps) == 1) {
          pause[v] = std::max(pause[v], ps);
        }
      }
      if (fingerprint.empty() && line.rfind("plan ", 0) == 0) {
        size_t c = line.find(": ");
        if (c != std::string::npos) {
          fingerprint = line.substr(c + 2, line.find(' ', c + 2) - c - 2);
        }
      }
    }
  }
  int engine_ranks = 0;
  for (const auto& e : engines) engine_ranks += e.second.world_size();
  std::printf("plan fingerprint %s, peak staging per rank %s\n", fingerprint.c_str(),
              refit::HumanBytes(staging).c_str());
  std::printf("bytes: what one engine rank received; seconds: the slowest member's data "
              "plane; GB/s = bytes / seconds (GB = 1e9)\n");
  const bool staged = f.count("staged") > 0;
  if (staged) {
    std::printf("pause: the longest an engine rank's live buffers took to write from "
                "staging, against the slowest member's data plane\n");
  }
  std::printf("%8s %14s %12s %10s %18s%s\n", "version", "bytes", "seconds", "GB/s",
              "engine ranks equal", staged ? "   pause (ms)  of round" : "");
  int64_t checked_bytes = 0, steady_bytes = 0;
  double secs = 0;
  bool all_checked = static_cast<int64_t>(per_round.size()) == rounds;
  for (const auto& [v, bs] : per_round) {
    std::printf("%8lld %14s %12.4f %10.2f %12d of %d%s\n", static_cast<long long>(v),
                refit::HumanBytes(bs.first.per_engine_rank).c_str(), bs.second,
                refit::RoundBytesPerSecond(bs.first, bs.second) / 1e9, checked[v],
                engine_ranks,
                staged ? absl::StrFormat(" %13.1f %9.3f", pause[v] * 1e3,
                                         bs.second > 0 ? pause[v] / bs.second : 0)
                             .c_str()
                       : "");
    if (checked[v] != engine_ranks) all_checked = false;
    checked_bytes += bs.first.all_engine_ranks;
    if (v > 1 || rounds == 1) {
      steady_bytes += bs.first.per_engine_rank;
      secs += bs.second;
    }
  }
  if (failed || hung || !all_checked) {
    std::printf("FAILED:%s%s%s see the logs below\n", failed ? " a member failed;" : "",
                hung ? " a member did not finish in time;" : "",
                all_checked ? "" : " not every round was checked;");
    for (const Proc& p : procs) {
      std::string log = ReadAll(p.log);
      std::printf("--- %s (exit %d)\n%s", p.name.c_str(),
                  WIFEXITED(p.status) ? WEXITSTATUS(p.status) : -1, log.c_str());
    }
    std::printf("--- refitd\n%s", ReadAll(refitd.log).c_str());
    return 1;
  }
  bool quantized = false;
  for (const auto& e : engines) quantized |= e.second.quant.has_value();
  std::printf(
      "verified: %d engine ranks in %zu engines hold the trainer's bytes exactly%s "
      "after each of %lld rounds (%lld bytes checked); %.2f GB/s over the %s "
      "transport%s\n",
      engine_ranks, engines.size(),
      quantized ? " (FP8 weights and scales as the reference quantizer makes them)" : "",
      static_cast<long long>(rounds),
      static_cast<long long>(checked_bytes),
      refit::RoundBytesPerSecond({steady_bytes, 0, 0}, secs) / 1e9,
      f["gpus"].empty() ? "host (Gloo/TCP)" : pull ? "pull (colocated)" : "NCCL",
      rounds > 1 ? " (rounds 2.., the first warms up connections)" : "");
  return 0;
}

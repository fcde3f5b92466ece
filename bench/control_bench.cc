// control_bench: the control plane's cost on loopback.
//   (a) N members (default 1024) register concurrently, one thread and one
//       RefitClient each: wall time of all registrations, per-call latency,
//       time until every member holds its plan, and refitd's memory.
//   (b) one round with M members (default 64): trainer rank 0 calls
//       StartRound(v) while every member waits in WaitForRound; notify
//       latency = the last member's WaitForRound return - start, and round
//       time = start -> the trainer sees the commit; over R rounds (200).
// refitd (RefitServer with NameMatchingPlan) runs in this process; the
// members run in a forked child (forked before any gRPC use), so
// /proc/self/status VmRSS/VmHWM measured here are refitd's alone.
// Flags: --members=N --round_members=M --rounds=R --liveness_ms=L
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/internal/cycleclock.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/refit_client.h"
#include "server/refit_server.h"
#include "testing/name_matching_plan.h"
#include "testing/process_memory.h"

namespace refit {
namespace {

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * (v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

// Line-based pipe between the two processes.
bool WriteLine(int fd, const std::string& s) {
  std::string l = s + "\n";
  return write(fd, l.data(), l.size()) == static_cast<ssize_t>(l.size());
}
std::string ReadLine(int fd) {
  std::string s;
  char c;
  while (read(fd, &c, 1) == 1 && c != '\n') s.push_back(c);
  return s;
}

v1::Registration MemberReg(bool trainer, int index) {
  v1::Registration r;
  auto* id = r.mutable_identity();
  id->set_job("bench");
  id->set_side(trainer ? v1::SIDE_TRAINER : v1::SIDE_ENGINE);
  if (!trainer) id->set_engine_id(absl::StrCat("e", index));
  id->set_rank(0);
  id->set_world_size(1);
  id->set_host_id("localhost");
  id->set_device("cpu");
  r.set_model_config("bench");
  r.set_convention(trainer ? "megatron:tp=1" : "vllm:tp=1");
  auto* b = r.add_buffers();
  b->set_name("w");
  b->add_shape(256);
  b->set_dtype(3);
  b->set_byte_size(1024);
  return r;
}

// Members' liveness interval (--liveness_ms, 0: the client's defaults):
// keepalive pings and heartbeats that often, a ping answered within twice
// it, refitd answering within six times it. With thousands of member
// threads on a loaded 2-core machine, the defaults (pings every 1 s within
// 2 s, refitd within 10 s) are not met.
absl::Duration liveness = absl::ZeroDuration();

absl::StatusOr<std::unique_ptr<RefitClient>> NewClient(int port) {
  RefitClient::Options o;
  o.heartbeat_interval = absl::Seconds(2);
  if (liveness > absl::ZeroDuration()) {
    o.keepalive_interval = liveness;
    o.keepalive_timeout = 2 * liveness;
    o.heartbeat_interval = liveness;
    o.refitd_timeout = 6 * liveness;
  }
  o.target = absl::StrCat("127.0.0.1:", port);
  o.rpc_timeout = absl::Seconds(60);
  o.connect_timeout = absl::Seconds(60);
  return RefitClient::Connect(o);
}

// (a), in the child. Tells the parent "a-done" (or "a-failed") while every
// member is still connected, so refitd's memory is measured with them.
bool RegisterMany(int port, int n, int to_parent) {
  std::vector<std::unique_ptr<RefitClient>> clients(n);
  std::vector<double> reg_ms(n, -1), plan_ms(n, -1);
  std::vector<std::string> errors(n);
  absl::Mutex mu;
  int connected = 0;
  bool go = false;
  absl::Time t0;
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      auto c = NewClient(port);
      {
        absl::MutexLock l(&mu);
        ++connected;
        mu.Await(absl::Condition(&go));
      }
      if (!c.ok()) {
        errors[i] = c.status().ToString();
        return;
      }
      const absl::Time begin = absl::Now();
      auto id = (*c)->Register(MemberReg(i == 0, i));
      if (!id.ok()) {
        errors[i] = id.status().ToString();
        return;
      }
      reg_ms[i] = Ms(absl::Now() - begin);
      // Wait for the plan of the full membership.
      const absl::Time until = absl::Now() + absl::Seconds(120);
      while (absl::Now() < until) {
        auto p = (*c)->AwaitPlan(until);
        if (!p.ok()) {
          errors[i] = p.status().ToString();
          return;
        }
        if (p->bootstrap().global_world() == n) break;
      }
      plan_ms[i] = Ms(absl::Now() - t0);
      clients[i] = std::move(*c);
    });
  }
  {
    absl::MutexLock l(&mu);
    auto all = [&] { return connected == n; };
    mu.Await(absl::Condition(&all));
    t0 = absl::Now();
    go = true;
  }
  for (auto& t : threads) t.join();
  int failed = 0;
  for (int i = 0; i < n; ++i) {
    if (!errors[i].empty() && failed++ < 5) {
      std::printf("member %d failed: %s\n", i, errors[i].c_str());
    }
  }
  if (failed > 0) {
    std::fflush(stdout);  // the child ends with _exit
    WriteLine(to_parent, "a-failed");
    return false;
  }
  const double wall = *std::max_element(reg_ms.begin(), reg_ms.end());
  std::printf("(a) %d members registering concurrently (1 thread + 1 channel each)\n", n);
  std::printf("    %-34s %9.1f ms\n", "all Register calls returned", wall);
  std::printf("    %-34s %9.1f ms\n", "Register latency p50", Percentile(reg_ms, 0.5));
  std::printf("    %-34s %9.1f ms\n", "Register latency p99", Percentile(reg_ms, 0.99));
  std::printf("    %-34s %9.1f ms\n", "every member holds the plan",
              *std::max_element(plan_ms.begin(), plan_ms.end()));
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  std::printf("    members' CPU %.2f s\n", ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
                                             1e-6 * (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec));
  std::fflush(stdout);
  WriteLine(to_parent, "a-done");
  return true;  // the clients close after the parent measured
}

// Where refitd's time went during (a): CPU seconds per thread (from
// /proc/self/task; threads that ended are left out) and the wait behind
// each contended absl::Mutex (absl's mutex tracer).
std::map<int, std::pair<std::string, double>> ThreadCpu() {
  std::map<int, std::pair<std::string, double>> out;
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return out;
  while (dirent* e = readdir(dir)) {
    int tid = 0;
    if (!absl::SimpleAtoi(e->d_name, &tid)) continue;
    std::ifstream in(absl::StrCat("/proc/self/task/", tid, "/stat"));
    if (!in) continue;
    std::string line;
    std::getline(in, line);
    const size_t open = line.find('('), close = line.rfind(')');
    if (open == std::string::npos || close == std::string::npos) continue;
    std::vector<std::string> f;
    std::string rest = line.substr(close + 2), w;
    for (char ch : rest + " ") {
      if (ch == ' ') { f.push_back(w); w.clear(); } else { w.push_back(ch); }
    }
    if (f.size() < 13) continue;
    double ut = 0, st = 0;
    (void)absl::SimpleAtod(f[11], &ut);
    (void)absl::SimpleAtod(f[12], &st);
    out[tid] = {line.substr(open + 1, close - open - 1), (ut + st) / tick};
  }
  closedir(dir);
  return out;
}

std::mutex contention_mu;
std::map<const void*, std::pair<int64_t, int64_t>>* contention = nullptr;  // cycles, count

void TraceContention(const char*, const void* obj, int64_t wait_cycles) {
  std::lock_guard<std::mutex> l(contention_mu);
  if (contention == nullptr) return;
  auto& c = (*contention)[obj];
  c.first += wait_cycles;
  c.second += 1;
}

void PrintWhereTimeWent(const std::map<int, std::pair<std::string, double>>& before,
                        const std::map<int, std::pair<std::string, double>>& after) {
  std::vector<std::pair<double, std::string>> threads;
  double total = 0;
  for (const auto& [tid, v] : after) {
    auto b = before.find(tid);
    const double s = v.second - (b == before.end() ? 0.0 : b->second.second);
    total += s;
    threads.push_back({s, absl::StrCat(v.first, "/", tid)});
  }
  std::sort(threads.rbegin(), threads.rend());
  std::printf("    refitd CPU during (a) %.2f s (threads alive at the end)\n", total);
  for (size_t i = 0; i < threads.size() && i < 6; ++i) {
    std::printf("      %-24s %6.2f s\n", threads[i].second.c_str(), threads[i].first);
  }
  std::lock_guard<std::mutex> l(contention_mu);
  std::vector<std::pair<int64_t, int64_t>> waits;
  for (const auto& [obj, c] : *contention) waits.push_back(c);
  std::sort(waits.rbegin(), waits.rend());
  const double hz = absl::base_internal::CycleClock::Frequency();
  for (size_t i = 0; i < waits.size() && i < 3; ++i) {
    std::printf("      contended mutex #%zu: %lld waits, %.2f s waited in all\n", i + 1,
                static_cast<long long>(waits[i].second), waits[i].first / hz);
  }
  contention->clear();
}

// (b), in the child.
bool Rounds(int port, int m, int rounds) {
  std::vector<std::unique_ptr<RefitClient>> c(m);
  for (int i = 0; i < m; ++i) {
    auto cl = NewClient(port);
    if (!cl.ok()) {
      std::printf("connect: %s\n", cl.status().ToString().c_str());
      return false;
    }
    c[i] = std::move(*cl);
    auto id = c[i]->Register(MemberReg(i == 0, i));
    if (!id.ok()) {
      std::printf("register %d: %s\n", i, id.status().ToString().c_str());
      return false;
    }
  }
  for (int i = 0; i < m; ++i) {
    while (true) {
      auto p = c[i]->AwaitPlan(absl::Now() + absl::Seconds(30));
      if (!p.ok()) {
        std::printf("plan %d: %s\n", i, p.status().ToString().c_str());
        return false;
      }
      if (p->bootstrap().global_world() == m) break;
    }
  }
  // notified[r][i]: when member i's WaitForRound returned round r + 1.
  std::vector<std::vector<absl::Time>> notified(rounds, std::vector<absl::Time>(m));
  absl::Mutex mu;
  int waiting = 0;  // members about to wait for the next round
  std::atomic<bool> failed{false};
  auto member = [&](int i) {
    for (int r = 0; r < rounds && !failed; ++r) {
      {
        absl::MutexLock l(&mu);
        ++waiting;
      }
      auto v = c[i]->WaitForRound(absl::Now() + absl::Seconds(30));
      const absl::Time now = absl::Now();
      {
        absl::MutexLock l(&mu);
        notified[r][i] = now;
      }
      absl::Status s = v.ok() ? c[i]->ReportDone(*v, {1024, 1e-6},
                                                 absl::Now() + absl::Seconds(30))
                              : v.status();
      if (s.ok()) s = c[i]->AwaitOutcome(*v, absl::Now() + absl::Seconds(30));
      if (!s.ok()) {
        std::printf("member %d round %d: %s\n", i, r + 1, s.ToString().c_str());
        failed = true;
        return;
      }
    }
  };
  std::vector<std::thread> threads;
  for (int i = 1; i < m; ++i) threads.emplace_back(member, i);
  std::vector<double> notify_ms, round_ms, start_rpc_ms;
  for (int r = 0; r < rounds && !failed; ++r) {
    {
      // Every other member is in (or entering) WaitForRound.
      absl::MutexLock l(&mu);
      auto all = [&] { return waiting == (r + 1) * (m - 1) || failed.load(); };
      if (!mu.AwaitWithTimeout(absl::Condition(&all), absl::Seconds(30))) {
        std::printf("round %d: members did not get ready\n", r + 1);
        failed = true;
        break;
      }
    }
    absl::SleepFor(absl::Milliseconds(2));  // let them block in the wait
    const int64_t v = r + 1;
    const absl::Time start = absl::Now();
    absl::Status s = c[0]->StartRound(v, start + absl::Seconds(30));
    start_rpc_ms.push_back(Ms(absl::Now() - start));
    auto got = s.ok() ? c[0]->WaitForRound(absl::Now() + absl::Seconds(30))
                      : absl::StatusOr<int64_t>(s);
    notified[r][0] = absl::Now();
    if (got.ok()) s = c[0]->ReportDone(v, {1024, 1e-6}, absl::Now() + absl::Seconds(30));
    if (got.ok() && s.ok()) s = c[0]->AwaitOutcome(v, absl::Now() + absl::Seconds(30));
    const absl::Time end = absl::Now();
    if (!got.ok() || !s.ok()) {
      std::printf("trainer round %lld: %s\n", static_cast<long long>(v),
                  (got.ok() ? s : got.status()).ToString().c_str());
      failed = true;
      break;
    }
    round_ms.push_back(Ms(end - start));
    // Every member has been notified once the round committed.
    absl::Time last = start;
    {
      absl::MutexLock l(&mu);
      for (const absl::Time& t : notified[r]) last = std::max(last, t);
    }
    notify_ms.push_back(Ms(last - start));
  }
  for (auto& t : threads) t.join();
  if (failed) return false;
  std::printf("(b) one round with %d members on loopback, %d rounds\n", m, rounds);
  std::printf("    %-34s %9s %9s %9s\n", "", "p50 ms", "p99 ms", "max ms");
  auto row = [](const char* name, const std::vector<double>& v) {
    std::printf("    %-34s %9.3f %9.3f %9.3f\n", name, Percentile(v, 0.5),
                Percentile(v, 0.99), *std::max_element(v.begin(), v.end()));
  };
  row("StartRound RPC", start_rpc_ms);
  row("start -> every member notified", notify_ms);
  row("start -> trainer sees commit", round_ms);
  std::string slow;
  for (size_t r = 0; r < notify_ms.size(); ++r) {
    if (notify_ms[r] > 50) absl::StrAppend(&slow, " ", r + 1, "(", static_cast<int>(notify_ms[r]), "ms)");
  }
  std::printf("    rounds notified after > 50 ms:%s\n", slow.empty() ? " none" : slow.c_str());
  std::fflush(stdout);
  return true;
}

int ChildMain(int from_parent, int to_parent, int n, int m, int rounds) {
  int port = 0;
  if (!absl::SimpleAtoi(ReadLine(from_parent), &port)) return 2;
  if (!RegisterMany(port, n, to_parent)) return 1;
  if (!absl::SimpleAtoi(ReadLine(from_parent), &port)) return 2;
  return Rounds(port, m, rounds) ? 0 : 1;
}

int max_pending = 0;  // --max_pending: refitd's --max_pending_connections (0: its default)

std::unique_ptr<RefitServer> StartServer() {
  RefitServer::Options o;
  if (max_pending > 0) o.max_pending_connections = max_pending;
  o.coordinator.plan_function = NameMatchingPlan;
  o.coordinator.heartbeat_timeout = absl::Seconds(60);  // a loaded 2-core box
  auto s = RefitServer::Start(std::move(o));
  if (!s.ok()) {
    std::fprintf(stderr, "refitd: %s\n", s.status().ToString().c_str());
    return nullptr;
  }
  return std::move(*s);
}

int Main(int argc, char** argv) {
  int n = 1024, m = 64, rounds = 200;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto flag = [&](const char* name, int* v) {
      const std::string p = absl::StrCat("--", name, "=");
      if (a.rfind(p, 0) == 0) (void)absl::SimpleAtoi(a.substr(p.size()), v);
    };
    flag("members", &n);
    flag("round_members", &m);
    flag("max_pending", &max_pending);
    flag("rounds", &rounds);
    int liveness_ms = 0;
    flag("liveness_ms", &liveness_ms);
    if (liveness_ms > 0) liveness = absl::Milliseconds(liveness_ms);
  }
  int p2c[2], c2p[2];
  if (pipe(p2c) != 0 || pipe(c2p) != 0) return 2;
  const pid_t child = fork();
  if (child == 0) {
    close(p2c[1]);
    close(c2p[0]);
    _exit(ChildMain(p2c[0], c2p[1], n, m, rounds));
  }
  close(p2c[0]);
  close(c2p[1]);
  auto kill_child = [&] {
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    return 1;
  };

  {
    // Other load skews the tails: say how busy the machine was.
    std::ifstream in("/proc/loadavg");
    std::string load;
    std::getline(in, load);
    std::printf("control_bench on %u CPUs, load average %s\n",
                std::thread::hardware_concurrency(), load.c_str());
    std::fflush(stdout);
  }
  auto server = StartServer();
  if (server == nullptr) return kill_child();
  const testing::ProcessMemory before = testing::ReadProcessMemory();
  {
    std::lock_guard<std::mutex> l(contention_mu);
    contention = new std::map<const void*, std::pair<int64_t, int64_t>>();
  }
  absl::RegisterMutexTracer(TraceContention);
  const auto cpu_before = ThreadCpu();
  WriteLine(p2c[1], absl::StrCat(server->port()));
  const std::string a = ReadLine(c2p[0]);
  const testing::ProcessMemory after = testing::ReadProcessMemory();
  const auto cpu_after = ThreadCpu();
  if (a != "a-done") return kill_child();
  std::printf("    refitd memory (this process)    VmRSS %.1f -> %.1f MiB, VmHWM %.1f MiB"
              " (%.1f KiB per member)\n",
              before.rss_mib, after.rss_mib, after.hwm_mib,
              (after.rss_mib - before.rss_mib) * 1024.0 / n);
  PrintWhereTimeWent(cpu_before, cpu_after);
  std::fflush(stdout);
  server->Shutdown();  // its members' streams end; (b) gets a fresh refitd

  auto server_b = StartServer();
  if (server_b == nullptr) return kill_child();
  WriteLine(p2c[1], absl::StrCat(server_b->port()));
  int status = 0;
  waitpid(child, &status, 0);
  server_b->Shutdown();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::printf("control_bench: the member process failed\n");
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace refit

int main(int argc, char** argv) { return refit::Main(argc, argv); }

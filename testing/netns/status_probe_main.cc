// status_probe: what an operator's `refit status` costs while refitd is
// busy. Calls GetStatus on refitd every --interval_ms for --duration_s (or
// until file --stop exists), each with a 10 s deadline, and prints the
// latency distribution of the answers and the largest membership seen:
//   "getstatus calls=N failed=N p50_ms=X p99_ms=X max_ms=X members_max=N"
// Flags: --server=HOST:PORT --interval_ms=MS (50) --duration_s=S (60)
//   --stop=FILE. Exit 1 when no call succeeded.
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "client/refit_client.h"
#include "testing/netns/dash_flags.h"

int main(int argc, char** argv) {
  std::map<std::string, std::string> f = refit::DashFlags(argc, argv);
  int64_t interval_ms = 50, duration_s = 60;
  if (f.count("interval_ms")) (void)absl::SimpleAtoi(f["interval_ms"], &interval_ms);
  if (f.count("duration_s")) (void)absl::SimpleAtoi(f["duration_s"], &duration_s);
  refit::RefitClient::Options o;
  o.target = f["server"];
  o.connect_timeout = absl::Seconds(10);
  o.rpc_timeout = absl::Seconds(10);
  auto client = refit::RefitClient::Connect(o);
  if (!client.ok()) {
    std::printf("getstatus error: %s\n", client.status().ToString().c_str());
    return 1;
  }
  std::vector<double> ms;
  int failed = 0, members_max = 0;
  const absl::Time end = absl::Now() + absl::Seconds(duration_s);
  while (absl::Now() < end) {
    if (!f["stop"].empty()) {
      if (std::FILE* s = std::fopen(f["stop"].c_str(), "r")) {
        std::fclose(s);
        break;
      }
    }
    const absl::Time t0 = absl::Now();
    auto st = (*client)->GetStatus(t0 + absl::Seconds(10));
    if (st.ok()) {
      ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
      members_max = std::max(members_max, st->members_size());
    } else {
      ++failed;
    }
    absl::SleepFor(absl::Milliseconds(interval_ms));
  }
  std::sort(ms.begin(), ms.end());
  auto pct = [&](double p) {
    return ms.empty() ? 0.0 : ms[std::min(ms.size() - 1, static_cast<size_t>(p * ms.size()))];
  };
  std::printf("getstatus calls=%zu failed=%d p50_ms=%.2f p99_ms=%.2f max_ms=%.2f members_max=%d\n",
              ms.size(), failed, pct(0.50), pct(0.99), ms.empty() ? 0.0 : ms.back(),
              members_max);
  return ms.empty() ? 1 : 0;
}

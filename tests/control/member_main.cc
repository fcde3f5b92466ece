// control_member: one refit member as its own process, for the
// multi-process control-plane tests. Registers, awaits the plan, then takes
// part in rounds, printing one line per outcome:
//   "plan <fingerprint> <global_rank>/<global_world>"
//   "committed <v>" | "aborted <v>: <reason>"
// Flags: --target=HOST:PORT --side=trainer|engine --engine=ID --rank=R
//   --world=W --buffers=a,b --rounds=N (exit 0 after N committed rounds)
//   --start (start rounds 1..N; trainer rank 0) --work_ms=MS (before report)
//   --token=T --deadline_s=S (every wait; default 20)
#include <cstdio>
#include <map>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/refit_client.h"

namespace {

int Die(const std::string& what, const absl::Status& s) {
  std::printf("error %s: %s\n", what.c_str(), s.ToString().c_str());
  std::fflush(stdout);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> f;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0) continue;
    size_t eq = a.find('=');
    f[a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2)] =
        eq == std::string::npos ? "true" : a.substr(eq + 1);
  }
  auto num = [&](const std::string& k, int d) {
    int v = d;
    if (f.count(k)) (void)absl::SimpleAtoi(f[k], &v);
    return v;
  };
  const absl::Duration wait = absl::Seconds(num("deadline_s", 20));
  refit::RefitClient::Options o;
  o.target = f["target"];
  o.bearer_token = f["token"];
  o.heartbeat_interval = absl::Milliseconds(100);
  o.connect_timeout = wait;
  auto client = refit::RefitClient::Connect(o);
  if (!client.ok()) return Die("connect", client.status());
  auto& c = **client;

  refit::v1::Registration reg;
  auto* id = reg.mutable_identity();
  id->set_job("job");
  const bool trainer = f["side"] == "trainer";
  id->set_side(trainer ? refit::v1::SIDE_TRAINER : refit::v1::SIDE_ENGINE);
  id->set_engine_id(f["engine"]);
  id->set_rank(num("rank", 0));
  id->set_world_size(num("world", 1));
  id->set_host_id("localhost");
  id->set_device("cpu");
  reg.set_model_config("tiny-llama");
  reg.set_convention(trainer ? "megatron:tp=1" : "vllm:tp=1");
  for (absl::string_view name : absl::StrSplit(f["buffers"], ',', absl::SkipEmpty())) {
    auto* b = reg.add_buffers();
    b->set_name(std::string(name));
    b->add_shape(16);
    b->set_dtype(3);
    b->set_byte_size(64);
  }
  auto member = c.Register(reg);
  if (!member.ok()) return Die("register", member.status());

  const int rounds = num("rounds", 1);
  const bool start = f.count("start") > 0;
  int committed = 0;
  int64_t next_start = 1;
  while (committed < rounds) {
    auto plan = c.AwaitPlan(absl::Now() + wait);
    if (!plan.ok()) return Die("plan", plan.status());
    std::printf("plan %s %d/%d\n", plan->fingerprint().c_str(),
                plan->bootstrap().global_rank(), plan->bootstrap().global_world());
    std::fflush(stdout);
    int64_t bytes = 0;
    auto slice = refit::RefitClient::Slice(*plan);
    if (!slice.ok()) return Die("plan slice", slice.status());
    for (const auto& m : slice->messages()) bytes += m.bytes();
    while (committed < rounds && !c.PlanChanged()) {
      if (start) {
        absl::Status s;
        const absl::Time until = absl::Now() + wait;
        do {
          s = c.StartRound(next_start, absl::Now() + absl::Seconds(5));
          if (absl::IsUnavailable(s)) absl::SleepFor(absl::Milliseconds(20));
        } while (absl::IsUnavailable(s) && absl::Now() < until);
        if (!s.ok()) return Die("start", s);
        ++next_start;
      }
      auto v = c.WaitForRound(absl::Now() + wait);
      if (!v.ok()) return Die("wait", v.status());
      absl::SleepFor(absl::Milliseconds(num("work_ms", 0)));
      absl::Status r = c.ReportDone(*v, {bytes, 0.001}, absl::Now() + wait);
      // A report to an aborted round is refused; the outcome says why.
      absl::Status out = c.AwaitOutcome(*v, absl::Now() + wait);
      if (out.ok()) {
        ++committed;
        std::printf("committed %lld\n", static_cast<long long>(*v));
      } else if (absl::IsAborted(out)) {
        std::printf("aborted %lld: %s\n", static_cast<long long>(*v),
                    std::string(out.message()).c_str());
      } else {
        return Die(absl::StrCat("outcome ", *v, " (report: ", r.ToString(), ")"), out);
      }
      std::fflush(stdout);
    }
  }
  return 0;
}

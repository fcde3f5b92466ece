// netns_members: the members of one host of a network-namespace test job
// (testing/netns/netns.sh), as threads of one process: each thread is one
// trainer rank or engine worker using the client library as a real member
// does (client/member.h), reporting `--host_id` as its host and moving its
// bytes over the host transport (Gloo/TCP) bound to `--bind`. Members ride
// out faults: an aborted round is run again, a plan change is prepared, a
// refitd that forgot the member (heartbeat expiry, restart) is rejoined.
// Trainers fill weight version v's pattern before round v; engines check
// every byte of theirs after each committed round, from their own layout.
//
// Flags (--name=value):
//   --server=HOST:PORT  refitd             --host_id=NAME  --bind=ADDR
//   --model=NAME|config.json               --trainer=SPEC  --engine=SPEC
//   --members=trainer/0,engine/A/1,...     ranks of this process
//   --until=V           stop once version V committed (default 3)
//   --start             trainer rank 0 (if here) starts rounds 1..V
//   --gate=FILE         the starter starts version v only once FILE holds
//                       a number >= v (tests act between rounds)
//   --deadline_s=S (120) bound of the whole run; --round_s=S (20) of one
//                       round's data plane; --step_s=S (2) of each wait
//   --heartbeat_ms=MS (500)  --refitd_timeout_s=S (5): RefitClient's
//   --control_only      no data plane: members report the bytes of their
//                       slice without moving them (scale runs of refitd)
// Prints one line per event, "<unix seconds> <event> <member> ...":
//   joined M | plan M FP | committed M V SECONDS BYTES_SENT | checked M V |
//   aborted M V: REASON | retry M: STATUS | rejoined M | error M: STATUS |
//   done M committed=N aborted=N last=V
// and at exit "ok|failed K of N members".
// Exit code 0 only if every member committed --until and every check passed.
#include <atomic>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/ascii.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/data_plane.h"
#include "client/member.h"
#include "client/refit_client.h"
#include "common/member_name.h"
#include "testing/member_patterns.h"
#include "testing/netns/dash_flags.h"

namespace refit {
namespace {

struct Flags {
  std::map<std::string, std::string> f;
  std::string Get(const std::string& k, const std::string& d = "") const {
    auto it = f.find(k);
    return it == f.end() ? d : it->second;
  }
  int64_t Int(const std::string& k, int64_t d) const {
    int64_t v = d;
    if (f.count(k) && !absl::SimpleAtoi(f.at(k), &v)) v = d;
    return v;
  }
};

absl::Mutex g_out;
void Say(const std::string& line) {
  absl::MutexLock l(&g_out);
  std::printf("%.3f %s\n", absl::ToUnixMicros(absl::Now()) / 1e6, line.c_str());
  std::fflush(stdout);
}

// The number in file `path` (0 when absent or unreadable).
int64_t GateValue(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return 0;
  char buf[32] = {0};
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  int64_t v = 0;
  return absl::SimpleAtoi(absl::StripAsciiWhitespace(absl::string_view(buf, n)), &v) ? v : 0;
}

struct Spec {
  bool trainer = true;
  std::string engine_id;
  int32_t rank = 0;
};

// One member's life; returns true when it committed `until` and every
// check passed.
bool RunMember(const Flags& fl, const Spec& spec, bool starter) {
  const std::string who = MemberName(spec.trainer, spec.engine_id, spec.rank);
  const absl::Time end = absl::Now() + absl::Seconds(fl.Int("deadline_s", 120));
  const absl::Duration step = absl::Seconds(fl.Int("step_s", 2));
  const absl::Duration round_wait = absl::Seconds(fl.Int("round_s", 20));
  const int64_t until = fl.Int("until", 3);
  const bool control_only = fl.f.count("control_only") > 0;

  MemberOptions o;
  o.connection.target = fl.Get("server");
  o.connection.heartbeat_interval = absl::Milliseconds(fl.Int("heartbeat_ms", 500));
  o.connection.refitd_timeout = absl::Seconds(fl.Int("refitd_timeout_s", 5));
  o.connection.connect_timeout = step;
  o.connection.rpc_timeout = absl::Seconds(10);
  o.job = "netns";
  o.side = spec.trainer ? Side::kTrainer : Side::kEngine;
  o.engine_id = spec.engine_id;
  o.rank = spec.rank;
  o.model = fl.Get("model");
  o.convention = spec.trainer ? fl.Get("trainer") : fl.Get("engine");
  o.host_id = fl.Get("host_id");
  absl::StatusOr<std::vector<LocalBuffer>> want = ExpectedBuffers(o);
  if (!want.ok()) {
    Say(absl::StrCat("error ", who, ": ", want.status().ToString()));
    return false;
  }
  std::vector<std::vector<char>> storage(want->size());
  std::map<std::string, BufferRef> refs;
  for (size_t i = 0; i < want->size(); ++i) {
    storage[i].assign((*want)[i].byte_size, 0);
    refs[(*want)[i].name] = {storage[i].data(), (*want)[i].byte_size};
  }
  DataPlaneOptions dpo;
  dpo.transport = GlooTransportFactory(fl.Get("bind", "127.0.0.1"));
  std::unique_ptr<Member> member;
  while (member == nullptr) {
    // refitd may be unreachable for a while (its namespace cut off).
    absl::StatusOr<std::unique_ptr<Member>> j =
        Member::Join(o, refs, dpo, std::min(end, absl::Now() + absl::Seconds(10)));
    if (j.ok()) {
      member = std::move(*j);
    } else if (absl::Now() + step > end || absl::IsInvalidArgument(j.status())) {
      Say(absl::StrCat("error ", who, ": join: ", j.status().ToString()));
      return false;
    } else {
      Say(absl::StrCat("retry ", who, ": join: ", j.status().ToString()));
      absl::SleepFor(absl::Milliseconds(200));
    }
  }
  Say(absl::StrCat("joined ", who));
  RefitClient& c = member->client();
  bool prepared = false;
  int64_t next_start = 1;
  int64_t last_committed = 0;
  int committed = 0, aborted = 0;
  int64_t slice_bytes = 0;
  auto rejoin = [&](const absl::Status& why) {
    Say(absl::StrCat("retry ", who, ": ", why.ToString()));
    absl::Status r = member->Rejoin(std::min(end, absl::Now() + absl::Seconds(30)));
    if (r.ok()) Say(absl::StrCat("rejoined ", who));
    prepared = false;
  };
  while (last_committed < until && absl::Now() < end) {
    if (!prepared || member->PlanChanged()) {
      absl::Status p;
      if (control_only) {
        absl::StatusOr<v1::AwaitPlanResponse> plan = c.AwaitPlan(absl::Now() + step);
        p = plan.status();
        if (p.ok()) {
          absl::StatusOr<v1::PlanProto> slice = RefitClient::Slice(*plan);
          p = slice.status();
          slice_bytes = 0;
          if (p.ok()) {
            for (const auto& m : slice->messages()) slice_bytes += m.bytes();
            Say(absl::StrCat("plan ", who, " ", plan->fingerprint()));
          }
        }
      } else {
        p = member->Prepare(absl::Now() + step);
        if (p.ok()) Say(absl::StrCat("plan ", who, " ", member->data_plane().fingerprint()));
      }
      if (absl::IsUnavailable(p)) {
        rejoin(p);
        continue;
      }
      if (!p.ok()) {
        if (!absl::IsDeadlineExceeded(p)) Say(absl::StrCat("retry ", who, ": prepare: ", p.ToString()));
        continue;
      }
      prepared = true;
    }
    if (starter && !fl.Get("gate").empty() &&
        GateValue(fl.Get("gate")) < next_start) {
      absl::SleepFor(absl::Milliseconds(50));
      continue;
    }
    if (starter && next_start <= until) {
      absl::Status s = member->StartRound(next_start, absl::Now() + step);
      if (absl::IsFailedPrecondition(s)) {
        prepared = false;
        continue;
      }
      if (!s.ok() && !absl::IsUnavailable(s) && !absl::IsDeadlineExceeded(s)) {
        Say(absl::StrCat("retry ", who, ": start ", next_start, ": ", s.ToString()));
      }
    }
    absl::StatusOr<int64_t> v = c.WaitForRound(absl::Now() + step);
    if (absl::IsUnavailable(v.status())) {
      rejoin(v.status());
      continue;
    }
    if (!v.ok()) continue;  // no round yet: look at the plan, start again
    // The membership changed while this member waited (the round runs the
    // newer plan): prepare it first, or the member refuses the round.
    if (!control_only && member->PlanChanged()) {
      absl::Status p = member->Prepare(absl::Now() + step);
      if (p.ok()) Say(absl::StrCat("plan ", who, " ", member->data_plane().fingerprint()));
    }
    if (spec.trainer) {
      absl::Status s = testing::FillMemberPattern(*member, *v);
      if (!s.ok()) {
        Say(absl::StrCat("error ", who, ": fill ", *v, ": ", s.ToString()));
        return false;
      }
    }
    absl::Status out;
    double seconds = 0;
    int64_t sent = 0;
    if (control_only) {
      absl::Status r = c.ReportDone(*v, {slice_bytes, 0.001}, absl::Now() + round_wait);
      out = c.AwaitOutcome(*v, absl::Now() + round_wait);
      if (!out.ok() && !r.ok() && !absl::IsAborted(out)) out = r;
    } else {
      absl::StatusOr<RunStats> st = member->RunRound(*v, absl::Now() + round_wait);
      out = st.status();
      if (st.ok()) {
        seconds = st->seconds;
        sent = st->bytes_sent;
      }
    }
    if (out.ok()) {
      ++committed;
      last_committed = *v;
      next_start = *v + 1;
      Say(absl::StrCat("committed ", who, " ", *v, " ", seconds, " ", sent));
      if (!spec.trainer && !control_only) {
        absl::Status ok = testing::CheckMemberPattern(*member, *v);
        if (!ok.ok()) {
          Say(absl::StrCat("error ", who, ": check ", *v, ": ", ok.ToString()));
          return false;
        }
        Say(absl::StrCat("checked ", who, " ", *v));
      }
    } else if (absl::IsUnavailable(out)) {
      rejoin(out);
    } else {
      // Aborted (a peer failed, a member expired) or the data plane failed
      // (its error was reported): the version runs again.
      ++aborted;
      next_start = *v;
      Say(absl::StrCat("aborted ", who, " ", *v, ": ", out.ToString()));
      if (absl::IsFailedPrecondition(out)) prepared = false;
    }
  }
  (void)c.Leave(absl::Now() + absl::Seconds(2));
  Say(absl::StrCat("done ", who, " committed=", committed, " aborted=", aborted,
                   " last=", last_committed));
  return last_committed >= until;
}

int Main(const Flags& fl) {
  std::vector<Spec> specs;
  for (absl::string_view m : absl::StrSplit(fl.Get("members"), ',', absl::SkipEmpty())) {
    std::vector<std::string> w = absl::StrSplit(m, '/');
    Spec s;
    s.trainer = w[0] == "trainer";
    if ((s.trainer && w.size() != 2) || (!s.trainer && (w[0] != "engine" || w.size() != 3)) ||
        !absl::SimpleAtoi(w.back(), &s.rank)) {
      std::printf("error --members: '%s' is not trainer/RANK or engine/ID/RANK\n",
                  std::string(m).c_str());
      return 2;
    }
    if (!s.trainer) s.engine_id = w[1];
    specs.push_back(s);
  }
  std::atomic<int> failed{0};
  std::vector<std::thread> threads;
  for (const Spec& s : specs) {
    const bool starter = fl.f.count("start") > 0 && s.trainer && s.rank == 0;
    threads.emplace_back([&, s, starter] {
      if (!RunMember(fl, s, starter)) failed.fetch_add(1);
    });
  }
  for (std::thread& t : threads) t.join();
  std::printf("%s %d of %zu members\n", failed.load() == 0 ? "ok" : "failed",
              static_cast<int>(specs.size()) - failed.load(), specs.size());
  return failed.load() == 0 ? 0 : 1;
}

}  // namespace
}  // namespace refit

int main(int argc, char** argv) {
  refit::Flags fl;
  fl.f = refit::DashFlags(argc, argv);
  return refit::Main(fl);
}

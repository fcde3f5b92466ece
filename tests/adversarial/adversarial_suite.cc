// The standing adversarial suite: hostile classes of requests against a
// refitd child process, each class followed by a liveness check. Prints,
// per class, the requests tried, crashes of refitd (must be 0), refitd's
// peak RSS (VmHWM) after the class, and how long the other members took to
// fail after the fault (where the class has one; for fd exhaustion, how long
// a new connection took to be answered once the idle ones closed). Exits 1 on a crash or an
// unexpected answer.
//
//   adversarial_suite --refitd=PATH [--soak]   (--soak: 20x the requests)
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "client/refit_client.h"
#include "common/file.h"
#include "common/grpc_status.h"
#include "grpcpp/grpcpp.h"
#include "mapping/mapping.h"
#include "proto/protocol_version.h"
#include "testing/refitd_process.h"

namespace refit {
namespace {

struct ClassResult {
  std::string name;
  int64_t tried = 0;
  int crashes = 0;
  int64_t peak_rss_kib = 0;
  double fail_after_s = -1;  // other members' time to fail after the fault
  std::string error;         // an unexpected answer, else empty
};

absl::Time In(absl::Duration d) { return absl::Now() + d; }

// A valid registration of tiny-qwen3 for `convention` at `rank`: the buffers
// the mapping expects of it.
v1::Registration ValidReg(bool trainer, const std::string& convention, int rank,
                          const std::string& job, const std::string& engine_id = "") {
  v1::Registration r;
  r.set_protocol_version(kProtocolVersion);
  auto* id = r.mutable_identity();
  id->set_job(job);
  id->set_side(trainer ? v1::SIDE_TRAINER : v1::SIDE_ENGINE);
  id->set_engine_id(engine_id);
  id->set_rank(rank);
  id->set_world_size(1);
  id->set_host_id("h");
  r.set_model_config("tiny-qwen3");
  r.set_convention(convention);
  absl::StatusOr<ModelConfig> model = LoadModelConfig("tiny-qwen3");
  if (!model.ok()) return r;
  absl::StatusOr<MappedSide> side = BuildSideLayout(*model, trainer, convention);
  if (!side.ok()) return r;
  for (const LocalBuffer& lb : RankBuffers(*side, rank)) {
    v1::LocalBuffer* b = r.add_buffers();
    b->set_name(lb.name);
    for (int64_t d : lb.shape) b->add_shape(d);
    b->set_dtype(static_cast<int32_t>(lb.dtype));
    b->set_byte_size(lb.byte_size);
  }
  return r;
}

std::unique_ptr<RefitClient> Connect(int port) {
  RefitClient::Options o;
  o.target = absl::StrCat("127.0.0.1:", port);
  o.heartbeat_interval = absl::Milliseconds(200);
  o.refitd_timeout = absl::Seconds(2);
  auto c = RefitClient::Connect(o);
  return c.ok() ? std::move(*c) : nullptr;
}

absl::Status RawRegister(RefitClient& c, const v1::Registration& reg) {
  v1::RegisterRequest req;
  *req.mutable_registration() = reg;
  v1::RegisterResponse resp;
  auto ctx = c.MakeContext(In(absl::Seconds(10)));
  return FromGrpcStatus(c.stub()->Register(ctx.get(), req, &resp));
}

void MalformedRegistrations(int port, int n, ClassResult* r) {
  auto c = Connect(port);
  for (int i = 0; i < n; ++i) {
    v1::Registration reg = ValidReg(true, "megatron:tp=1", 0, "mal");
    switch (i % 8) {
      case 0: reg.mutable_identity()->set_world_size(-1); break;
      case 1: reg.mutable_identity()->set_rank(1 << 30); break;
      case 2: reg.mutable_identity()->set_job(""); break;
      case 3: reg.mutable_buffers(0)->set_dtype(999); break;
      case 4: reg.mutable_buffers(0)->add_shape(int64_t{1} << 62); break;
      case 5: reg.set_protocol_version(7); break;
      case 6: *reg.add_buffers() = reg.buffers(0); break;  // duplicate name
      case 7: reg.mutable_identity()->set_side(static_cast<v1::Side>(42)); break;
    }
    ++r->tried;
    if (RawRegister(*c, reg).ok()) r->error = absl::StrCat("malformed registration ", i % 8, " accepted");
  }
}

void HugeSpecs(int port, int n, ClassResult* r) {
  for (int i = 0; i < n; ++i) {
    auto t = Connect(port), e = Connect(port);
    const bool trainer_side = i % 2 == 0;
    // Rank 0's buffers are those of one replica: built for dp=1 (a layout
    // of 2^20 ranks would cost this process gigabytes), then the huge
    // convention claimed.
    v1::Registration tr = ValidReg(true, "megatron:tp=1", 0, "huge");
    v1::Registration er = ValidReg(false, "vllm:tp=1", 0, "huge", "e");
    if (trainer_side) {
      tr.set_convention("megatron:dp=1048576");
    } else {
      er.set_convention("vllm:tp=1,dp=1048576");
    }
    r->tried += 2;
    if (!t->Register(tr).ok() || !e->Register(er).ok()) {
      r->error = "huge spec: registration refused";
      return;
    }
    const absl::Time start = absl::Now();
    absl::StatusOr<v1::AwaitPlanResponse> p = t->AwaitPlan(In(absl::Seconds(20)));
    r->fail_after_s = std::max(r->fail_after_s, absl::ToDoubleSeconds(absl::Now() - start));
    if (p.ok() || !absl::StrContains(p.status().message(), "registered")) {
      r->error = absl::StrCat("huge spec: ", p.status().ToString());
    }
    (void)t->Leave(In(absl::Seconds(5)));
    (void)e->Leave(In(absl::Seconds(5)));
  }
}

void ForgedMemberCalls(int port, int n, ClassResult* r) {
  auto victim = Connect(port), thief = Connect(port);
  absl::StatusOr<std::string> id = victim->Register(ValidReg(true, "megatron:tp=1", 0, "forge"));
  if (!id.ok()) {
    r->error = id.status().ToString();
    return;
  }
  for (int i = 0; i < n; ++i) {
    auto ctx = thief->MakeContext(In(absl::Seconds(5)));
    grpc::Status st;
    if (i % 3 == 0) {
      v1::ReportRequest req;
      req.set_member_id(*id);
      req.set_version(1);
      req.set_ok(true);
      req.set_member_secret(absl::StrCat("guess", i));
      v1::ReportResponse resp;
      st = thief->stub()->Report(ctx.get(), req, &resp);
    } else if (i % 3 == 1) {
      v1::LeaveRequest req;
      req.set_member_id(*id);
      v1::LeaveResponse resp;
      st = thief->stub()->Leave(ctx.get(), req, &resp);
    } else {
      v1::KvSetRequest req;
      req.set_member_id(*id);
      req.set_key("k");
      req.set_value("forged");
      v1::KvSetResponse resp;
      st = thief->stub()->KvSet(ctx.get(), req, &resp);
    }
    ++r->tried;
    if (st.error_code() != grpc::StatusCode::PERMISSION_DENIED) {
      r->error = absl::StrCat("forged call ", i % 3, " answered ", st.error_code());
    }
  }
  (void)victim->Leave(In(absl::Seconds(5)));
}

void KvFlooding(int port, int n, ClassResult* r) {
  auto c = Connect(port);
  if (!c->Register(ValidReg(true, "megatron:tp=1", 0, "flood")).ok()) return;
  const std::string value(1 << 20, 'v');
  bool refused = false;
  for (int i = 0; i < n; ++i) {
    ++r->tried;
    absl::Status s = c->KvSet(absl::StrCat("flood/", i), value, In(absl::Seconds(10)));
    if (absl::IsResourceExhausted(s)) refused = true;
  }
  if (!refused) r->error = "the key-value store took every 1 MiB value";
  (void)c->Leave(In(absl::Seconds(5)));
}

void OversizedReasons(int port, int n, ClassResult* r) {
  auto t = Connect(port), e = Connect(port);
  if (!t->Register(ValidReg(true, "megatron:tp=1", 0, "reason")).ok() ||
      !e->Register(ValidReg(false, "vllm:tp=1", 0, "reason", "e")).ok() ||
      !t->AwaitPlan(In(absl::Seconds(20))).ok() || !e->AwaitPlan(In(absl::Seconds(20))).ok()) {
    r->error = "reasons: no plan";
    return;
  }
  const std::string reason(3 << 20, 'r');
  for (int v = 1; v <= n; ++v) {
    absl::Status s = t->StartRound(v, In(absl::Seconds(10)));
    while (absl::IsUnavailable(s)) {
      absl::SleepFor(absl::Milliseconds(10));
      s = t->StartRound(v, In(absl::Seconds(10)));
    }
    if (!s.ok()) {
      r->error = s.ToString();
      return;
    }
    const absl::Time fault = absl::Now();
    ++r->tried;
    (void)e->ReportFailed(v, reason, In(absl::Seconds(10)));
    absl::Status outcome = t->AwaitOutcome(v, In(absl::Seconds(10)));
    r->fail_after_s = std::max(r->fail_after_s, absl::ToDoubleSeconds(absl::Now() - fault));
    if (!absl::IsAborted(outcome) || outcome.message().size() > 8192) {
      r->error = absl::StrCat("reason: ", outcome.code(), " of ", outcome.message().size(), " bytes");
    }
  }
  (void)t->Leave(In(absl::Seconds(5)));
  (void)e->Leave(In(absl::Seconds(5)));
}

void FrozenRefitd(RefitdProcess& refitd, ClassResult* r) {
  auto c = Connect(refitd.port());
  if (!c->Register(ValidReg(true, "megatron:tp=1", 0, "frozen")).ok()) return;
  kill(refitd.pid(), SIGSTOP);
  const absl::Time fault = absl::Now();
  ++r->tried;
  absl::StatusOr<int64_t> round = c->WaitForRound(In(absl::Seconds(60)));
  r->fail_after_s = absl::ToDoubleSeconds(absl::Now() - fault);
  kill(refitd.pid(), SIGCONT);
  if (round.ok() || !absl::StrContains(round.status().message(), "did not answer heartbeats")) {
    r->error = absl::StrCat("frozen: ", round.status().ToString());
  }
}

// A trainer rank leaves before the first plan: the other rank's plan wait
// ends at once, naming it.
void MemberLeavesBeforePlan(int port, int n, ClassResult* r) {
  for (int i = 0; i < n; ++i) {
    auto t0 = Connect(port), t1 = Connect(port);
    v1::Registration r0 = ValidReg(true, "megatron:dp=2", 0, "leave");
    v1::Registration r1 = ValidReg(true, "megatron:dp=2", 1, "leave");
    r0.mutable_identity()->set_world_size(2);
    r1.mutable_identity()->set_world_size(2);
    if (!t0->Register(r0).ok() || !t1->Register(r1).ok()) {
      r->error = "leave: registration refused";
      return;
    }
    absl::StatusOr<v1::AwaitPlanResponse> plan = absl::UnknownError("not answered");
    std::thread waiter([&] { plan = t0->AwaitPlan(In(absl::Seconds(30))); });
    absl::SleepFor(absl::Milliseconds(100));
    ++r->tried;
    const absl::Time fault = absl::Now();
    (void)t1->Leave(In(absl::Seconds(5)));
    waiter.join();
    r->fail_after_s = std::max(r->fail_after_s, absl::ToDoubleSeconds(absl::Now() - fault));
    if (!absl::IsUnavailable(plan.status()) ||
        !absl::StrContains(plan.status().message(), "trainer rank 1 left at")) {
      r->error = absl::StrCat("leave: ", plan.status().ToString());
    }
    (void)t0->Leave(In(absl::Seconds(5)));
  }
}

// Counts the lines of refitd's log.
int64_t LogLines(const std::string& log) {
  absl::StatusOr<std::string> text = ReadFileToString(log, int64_t{256} << 20);
  return text.ok() ? std::count(text->begin(), text->end(), '\n') : -1;
}

// KvSet requests whose key and member id are not UTF-8 (bytes on the
// wire): each answered INVALID_ARGUMENT naming the field, and refitd logs no
// line per call.
void InvalidText(int port, const std::string& log, int n, ClassResult* r) {
  auto c = Connect(port);
  const int64_t before = LogLines(log);
  for (int i = 0; i < n; ++i) {
    v1::KvSetRequest req;
    req.set_key("k\xff\xfe\xc0");
    req.set_member_id("m\xc0\xaf");
    v1::KvSetResponse resp;
    auto ctx = c->MakeContext(In(absl::Seconds(10)));
    grpc::Status st = c->stub()->KvSet(ctx.get(), req, &resp);
    ++r->tried;
    if (st.error_code() != grpc::StatusCode::INVALID_ARGUMENT ||
        !absl::StrContains(st.error_message(), "key: not UTF-8")) {
      r->error = absl::StrCat("invalid text answered ", st.error_code(), " ", st.error_message());
      return;
    }
  }
  const int64_t lines = LogLines(log) - before;
  if (lines > 5) r->error = absl::StrCat("refitd logged ", lines, " lines for ", n, " calls");
}

// A refitd of its own with RLIMIT_NOFILE=256 meets 456 idle connections,
// `n` times: each time, once they close, a new connection is answered
// within 5 s ("others fail" is that time). Its peak RSS is this refitd's.
void FdExhaustion(const std::string& binary, const std::string& log, int n, ClassResult* r) {
  RefitdProcess refitd;
  if (absl::Status s = refitd.Start(binary, {}, log, absl::Seconds(30), /*fd_limit=*/256);
      !s.ok()) {
    r->error = s.ToString();
    return;
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(refitd.port());
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (int i = 0; i < n; ++i) {
    std::vector<int> idle;
    for (int c = 0; c < 456; ++c) {
      int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) break;
      (void)connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
      idle.push_back(fd);
    }
    r->tried += static_cast<int64_t>(idle.size());
    absl::SleepFor(absl::Milliseconds(500));
    for (int fd : idle) close(fd);
    const absl::Time closed = absl::Now();
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection of its own
    auto stub = v1::RefitService::NewStub(grpc::CreateCustomChannel(
        absl::StrCat("127.0.0.1:", refitd.port()), grpc::InsecureChannelCredentials(), args));
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(closed + absl::Seconds(5)));
    ctx.set_wait_for_ready(true);
    v1::StatusRequest req;
    v1::StatusResponse resp;
    grpc::Status st = stub->GetStatus(&ctx, req, &resp);
    r->fail_after_s = std::max(r->fail_after_s, absl::ToDoubleSeconds(absl::Now() - closed));
    if (!st.ok()) r->error = absl::StrCat("after the fd limit: ", st.error_message());
  }
  r->peak_rss_kib = refitd.PeakRssKib();
  if (!refitd.Alive()) r->crashes = 1;
}

int Main(int argc, char** argv) {
  std::string binary;
  bool soak = false;
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    if (absl::ConsumePrefix(&a, "--refitd=")) {
      binary = std::string(a);
    } else if (a == "--soak") {
      soak = true;
    } else {
      std::fprintf(stderr, "usage: adversarial_suite --refitd=PATH [--soak]\n");
      return 2;
    }
  }
  const int k = soak ? 20 : 1;
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string log = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/adversarial_refitd.log");
  RefitdProcess refitd;
  absl::Status started = refitd.Start(
      binary, {"--plan_settle_ms=5", "--plan_settle_max_ms=50", "--heartbeat_timeout_ms=5000"},
      log, absl::Seconds(30));
  if (!started.ok()) {
    std::fprintf(stderr, "%s\n", started.ToString().c_str());
    return 1;
  }
  const int port = refitd.port();
  std::vector<std::pair<std::string, std::function<void(ClassResult*)>>> classes = {
      {"malformed registrations", [&](ClassResult* r) { MalformedRegistrations(port, 400 * k, r); }},
      {"huge specs (dp=2^20)", [&](ClassResult* r) { HugeSpecs(port, 2 * k, r); }},
      {"forged member calls", [&](ClassResult* r) { ForgedMemberCalls(port, 300 * k, r); }},
      {"key-value flooding (1 MiB)", [&](ClassResult* r) { KvFlooding(port, 40 * k, r); }},
      {"oversized reasons (3 MiB)", [&](ClassResult* r) { OversizedReasons(port, 10 * k, r); }},
      {"member leaves before plan", [&](ClassResult* r) { MemberLeavesBeforePlan(port, 5 * k, r); }},
      {"invalid UTF-8 text", [&](ClassResult* r) { InvalidText(port, log, 1000 * k, r); }},
      {"frozen refitd (SIGSTOP)", [&](ClassResult* r) { FrozenRefitd(refitd, r); }},
      {"fd exhaustion (nofile=256)",
       [&](ClassResult* r) { FdExhaustion(binary, log + ".fd", 2 * k, r); }},
  };
  bool failed = false;
  std::printf("%-28s %8s %8s %14s %14s\n", "class", "tried", "crashes", "peak RSS MiB",
              "others fail s");
  for (auto& [name, run] : classes) {
    ClassResult r;
    r.name = name;
    run(&r);
    if (!refitd.Alive()) r.crashes = 1;
    if (r.peak_rss_kib == 0) r.peak_rss_kib = refitd.PeakRssKib();
    std::printf("%-28s %8lld %8d %14.1f %14s\n", r.name.c_str(),
                static_cast<long long>(r.tried), r.crashes, r.peak_rss_kib / 1024.0,
                r.fail_after_s < 0 ? "-" : absl::StrFormat("%.2f", r.fail_after_s).c_str());
    if (!r.error.empty()) std::printf("  unexpected: %s\n", r.error.c_str());
    failed = failed || r.crashes > 0 || !r.error.empty();
    if (r.crashes > 0) break;
  }
  std::fflush(stdout);
  return failed ? 1 : 0;
}

}  // namespace
}  // namespace refit

int main(int argc, char** argv) { return refit::Main(argc, argv); }

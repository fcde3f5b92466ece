// refitd's security on a real listener (127.0.0.1:0): TLS with the right and
// a wrong CA, mutual TLS (no client certificate, one from a wrong CA, the
// right one), the bearer token on every RPC kind (unary, waiting unary, the
// round stream), and the insecure non-loopback guard. Certificates are made
// at test time with the `openssl` command line into TEST_TMPDIR.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "client/refit_client.h"
#include "common/grpc_status.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/refit_server.h"
#include "testing/health_check.h"
#include "testing/name_matching_plan.h"

namespace refit {
namespace {

using ::testing::HasSubstr;

absl::Time In(absl::Duration d) { return absl::Now() + d; }

std::string TmpDir() {
  const char* d = std::getenv("TEST_TMPDIR");
  return d != nullptr ? d : "/tmp";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs a shell command; returns its exit status and (in `out`) its output.
int Sh(const std::string& cmd, std::string* out) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return -1;
  char buf[512];
  while (fgets(buf, sizeof(buf), p) != nullptr) out->append(buf);
  return pclose(p);
}

struct Pki {
  std::string ca, other_ca;                // CA certificates (PEM)
  std::string server_cert, server_key;     // signed by ca; SAN 127.0.0.1, localhost
  std::string client_cert, client_key;     // signed by ca, clientAuth
  std::string rogue_cert, rogue_key;       // a client cert signed by other_ca
};

// Makes two CAs and the leaf certificates with openssl (EC P-256, 1 day).
// Fails (does not skip) with openssl's output when it is missing or fails.
absl::StatusOr<Pki> MakePki() {
  const std::string d = absl::StrCat(TmpDir(), "/pki");
  std::string log;
  if (Sh("command -v openssl", &log) != 0) {
    return absl::FailedPreconditionError(
        "the openssl command line is required to make test certificates "
        "(Debian package `openssl`) but was not found in PATH");
  }
  const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  auto ca = [&](const std::string& name) {
    return absl::StrCat("openssl req -x509 ", key, " -days 1 -subj /CN=", name,
                        " -addext basicConstraints=critical,CA:TRUE",
                        " -addext keyUsage=critical,keyCertSign,cRLSign",
                        " -keyout ", d, "/", name, ".key -out ", d, "/", name, ".pem");
  };
  auto leaf = [&](const std::string& name, const std::string& ca_name,
                  const std::string& ext) {
    return absl::StrCat(
        "printf '", ext, "\\n' > ", d, "/", name, ".ext && openssl req ", key,
        " -subj /CN=", name, " -keyout ", d, "/", name, ".key -out ", d, "/", name,
        ".csr && openssl x509 -req -days 1 -in ", d, "/", name, ".csr -CA ", d, "/",
        ca_name, ".pem -CAkey ", d, "/", ca_name, ".key -CAcreateserial -extfile ",
        d, "/", name, ".ext -out ", d, "/", name, ".pem");
  };
  const std::vector<std::string> steps = {
      absl::StrCat("rm -rf ", d, " && mkdir -p ", d),
      ca("ca"),
      ca("other_ca"),
      leaf("server", "ca",
           "subjectAltName=IP:127.0.0.1,DNS:localhost\\nextendedKeyUsage=serverAuth"),
      leaf("client", "ca", "extendedKeyUsage=clientAuth"),
      leaf("rogue", "other_ca", "extendedKeyUsage=clientAuth"),
  };
  for (const auto& step : steps) {
    if (Sh(step, &log) != 0) {
      return absl::InternalError(absl::StrCat("openssl failed: ", step, "\n", log));
    }
  }
  Pki p;
  p.ca = ReadFile(d + "/ca.pem");
  p.other_ca = ReadFile(d + "/other_ca.pem");
  p.server_cert = ReadFile(d + "/server.pem");
  p.server_key = ReadFile(d + "/server.key");
  p.client_cert = ReadFile(d + "/client.pem");
  p.client_key = ReadFile(d + "/client.key");
  p.rogue_cert = ReadFile(d + "/rogue.pem");
  p.rogue_key = ReadFile(d + "/rogue.key");
  for (const std::string* s : {&p.ca, &p.server_cert, &p.client_key, &p.rogue_key}) {
    if (s->find("-----BEGIN") == std::string::npos) {
      return absl::InternalError(absl::StrCat("openssl wrote no PEM into ", d, "\n", log));
    }
  }
  return p;
}

class SecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto p = MakePki();
    pki_status_ = new absl::Status(p.status());
    if (p.ok()) pki_ = new Pki(std::move(*p));
  }
  void SetUp() override {
    ASSERT_TRUE(pki_status_->ok()) << *pki_status_;  // fail loudly, never skip
  }

  static RefitServer::Options BaseOptions() {
    RefitServer::Options o;
    o.coordinator.plan_function = NameMatchingPlan;
    o.coordinator.heartbeat_timeout = absl::Seconds(30);
    return o;
  }
  std::unique_ptr<RefitServer> StartTls(bool mutual) {
    auto o = BaseOptions();
    o.tls = std::make_unique<TlsOptions>();
    o.tls->cert_chain_pem = pki_->server_cert;
    o.tls->private_key_pem = pki_->server_key;
    if (mutual) o.tls->client_ca_pem = pki_->ca;
    auto s = RefitServer::Start(std::move(o));
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : nullptr;
  }
  static RefitClient::Options TlsClient(int port, const std::string& ca) {
    RefitClient::Options o;
    o.target = absl::StrCat("127.0.0.1:", port);
    o.use_tls = true;
    o.root_ca_pem = ca;
    o.connect_timeout = absl::Seconds(3);
    o.rpc_timeout = absl::Seconds(5);
    return o;
  }

  static Pki* pki_;
  static absl::Status* pki_status_;
};
Pki* SecurityTest::pki_ = nullptr;
absl::Status* SecurityTest::pki_status_ = nullptr;

// Connects and makes one unary call; returns the first failure.
absl::Status ConnectAndCall(RefitClient::Options o) {
  auto c = RefitClient::Connect(std::move(o));
  if (!c.ok()) return c.status();
  return (*c)->GetStatus(In(absl::Seconds(5))).status();
}

v1::Registration TrainerReg() {
  v1::Registration r;
  r.mutable_identity()->set_job("job");
  r.mutable_identity()->set_side(v1::SIDE_TRAINER);
  r.mutable_identity()->set_world_size(1);
  auto* b = r.add_buffers();
  b->set_name("w0");
  b->add_shape(4);
  b->set_dtype(3);
  b->set_byte_size(16);
  return r;
}

TEST_F(SecurityTest, TlsWithTheRightCaWorksByIpAndByName) {
  auto server = StartTls(/*mutual=*/false);
  ASSERT_NE(server, nullptr);
  auto o = TlsClient(server->port(), pki_->ca);
  EXPECT_TRUE(ConnectAndCall(o).ok());
  o.target = absl::StrCat("localhost:", server->port());
  EXPECT_TRUE(ConnectAndCall(o).ok());
  // The whole member flow runs over TLS.
  auto c = RefitClient::Connect(TlsClient(server->port(), pki_->ca));
  ASSERT_TRUE(c.ok()) << c.status();
  auto id = (*c)->Register(TrainerReg());
  EXPECT_TRUE(id.ok()) << id.status();
}

TEST_F(SecurityTest, ClientTrustingAnotherCaIsRefused) {
  auto server = StartTls(/*mutual=*/false);
  ASSERT_NE(server, nullptr);
  absl::Status s = ConnectAndCall(TlsClient(server->port(), pki_->other_ca));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  // A plaintext client does not get through a TLS listener either.
  RefitClient::Options plain;
  plain.target = absl::StrCat("127.0.0.1:", server->port());
  plain.connect_timeout = absl::Seconds(2);
  EXPECT_FALSE(ConnectAndCall(plain).ok());
}

TEST_F(SecurityTest, MutualTlsNeedsAClientCertificateFromTheRightCa) {
  auto server = StartTls(/*mutual=*/true);
  ASSERT_NE(server, nullptr);
  auto none = TlsClient(server->port(), pki_->ca);
  absl::Status s = ConnectAndCall(none);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << "no client cert: " << s;

  auto rogue = TlsClient(server->port(), pki_->ca);
  rogue.client_cert_pem = pki_->rogue_cert;
  rogue.client_key_pem = pki_->rogue_key;
  s = ConnectAndCall(rogue);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << "wrong-CA client cert: " << s;

  auto good = TlsClient(server->port(), pki_->ca);
  good.client_cert_pem = pki_->client_cert;
  good.client_key_pem = pki_->client_key;
  EXPECT_TRUE(ConnectAndCall(good).ok());
  auto c = RefitClient::Connect(good);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE((*c)->Register(TrainerReg()).ok());
}

// Every RPC of the service, called with the client's credentials; returns
// (name, status) pairs. The stream is opened directly on the stub.
std::vector<std::pair<std::string, absl::Status>> CallEveryRpc(RefitClient& c) {
  std::vector<std::pair<std::string, absl::Status>> out;
  const absl::Time d = In(absl::Seconds(5));
  out.emplace_back("Register", c.Register(TrainerReg()).status());
  out.emplace_back("AwaitPlan", c.AwaitPlan(In(absl::Milliseconds(500))).status());
  out.emplace_back("StartRound", c.StartRound(1, d));
  out.emplace_back("ReportDone", c.ReportDone(1, {}, d));
  out.emplace_back("GetEngineState", c.GetEngineState("A", d).status());
  out.emplace_back("KvSet", c.KvSet("k", "v", d));
  out.emplace_back("KvGet", c.KvGet("k", In(absl::Milliseconds(500))).status());
  out.emplace_back("GetStatus", c.GetStatus(d).status());
  {
    v1::HeartbeatRequest req;
    req.set_member_id("trainer/job/0");
    req.set_member_secret(c.member_secret());
    v1::HeartbeatResponse resp;
    auto ctx = c.MakeContext(d);
    grpc::Status st = c.stub()->Heartbeat(ctx.get(), req, &resp);
    out.emplace_back("Heartbeat", FromGrpcStatus(st));
  }
  {
    v1::WatchRequest req;
    req.set_member_id("trainer/job/0");
    req.set_member_secret(c.member_secret());
    auto ctx = c.MakeContext(In(absl::Seconds(1)));
    auto reader = c.stub()->WatchRounds(ctx.get(), req);
    v1::RoundEvent e;
    const bool got_event = reader->Read(&e);
    if (got_event) {  // the stream is open: close it from this side
      ctx->TryCancel();
      while (reader->Read(&e)) {
      }
    }
    grpc::Status st = reader->Finish();
    out.emplace_back("WatchRounds", got_event ? absl::OkStatus() : FromGrpcStatus(st));
  }
  out.emplace_back("Leave", c.Leave(d));
  return out;
}

TEST_F(SecurityTest, BearerTokenIsCheckedOnEveryRpcKind) {
  auto o = BaseOptions();
  o.bearer_token = "s3cret-token";
  auto server = RefitServer::Start(std::move(o));
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  for (const std::string token : {"", "s3cret-tokeN", "s3cret-token-longer", "s3cret"}) {
    RefitClient::Options co;
    co.target = absl::StrCat("127.0.0.1:", port);
    co.bearer_token = token;
    auto c = RefitClient::Connect(co);
    ASSERT_TRUE(c.ok()) << c.status();
    for (const auto& [rpc, s] : CallEveryRpc(**c)) {
      EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated)
          << rpc << " with token '" << token << "': " << s;
    }
  }
  // Nothing got in: no member, no key.
  RefitClient::Options co;
  co.target = absl::StrCat("127.0.0.1:", port);
  co.bearer_token = "s3cret-token";
  auto c = RefitClient::Connect(co);
  ASSERT_TRUE(c.ok()) << c.status();
  auto st = (*c)->GetStatus(In(absl::Seconds(5)));
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->members_size(), 0);
  // With the right token every RPC gets past authentication (AwaitPlan and
  // KvGet end by their deadline or with the plan state, never UNAUTHENTICATED).
  // Before it registered, the client is no member: it sets no key.
  EXPECT_EQ((*c)->KvSet("k0", "v", In(absl::Seconds(5))).code(),
            absl::StatusCode::kPermissionDenied);
  for (const auto& [rpc, s] : CallEveryRpc(**c)) {
    EXPECT_NE(s.code(), absl::StatusCode::kUnauthenticated) << rpc << ": " << s;
    if (rpc == "Register" || rpc == "GetStatus" || rpc == "KvSet" ||
        rpc == "KvGet" || rpc == "Heartbeat" || rpc == "WatchRounds" ||
        rpc == "GetEngineState" || rpc == "Leave") {
      EXPECT_TRUE(s.ok()) << rpc << ": " << s;
    }
  }
}


// Member identity: with the token (or none), another client still cannot
// act for a member: its Report, Leave, Heartbeat, WatchRounds and
// re-registration are refused, naming the member.
TEST_F(SecurityTest, AnotherClientCannotActForAMember) {
  auto server = RefitServer::Start(BaseOptions());
  ASSERT_TRUE(server.ok()) << server.status();
  RefitClient::Options co;
  co.target = absl::StrCat("127.0.0.1:", (*server)->port());
  auto owner = RefitClient::Connect(co);
  auto thief = RefitClient::Connect(co);
  ASSERT_TRUE(owner.ok() && thief.ok());
  auto id = (*owner)->Register(TrainerReg());
  ASSERT_TRUE(id.ok()) << id.status();
  const absl::Time d = In(absl::Seconds(5));
  {
    v1::ReportRequest req;
    req.set_member_id(*id);
    req.set_version(1);
    req.set_ok(true);
    req.set_member_secret((*thief)->member_secret());
    v1::ReportResponse resp;
    auto ctx = (*thief)->MakeContext(d);
    absl::Status s = FromGrpcStatus((*thief)->stub()->Report(ctx.get(), req, &resp));
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(*id));
  }
  {
    v1::LeaveRequest req;
    req.set_member_id(*id);
    v1::LeaveResponse resp;
    auto ctx = (*thief)->MakeContext(d);
    absl::Status s = FromGrpcStatus((*thief)->stub()->Leave(ctx.get(), req, &resp));
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  }
  EXPECT_EQ((*thief)->Register(TrainerReg()).status().code(),
            absl::StatusCode::kPermissionDenied);
  auto st = (*owner)->GetStatus(d);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->members_size(), 1);
  EXPECT_TRUE((*owner)->Leave(d).ok());
}

TEST_F(SecurityTest, HealthNeedsNoTokenButTheServiceDoes) {
  auto o = BaseOptions();
  o.bearer_token = "tok";
  auto server = RefitServer::Start(std::move(o));
  ASSERT_TRUE(server.ok()) << server.status();
  bool serving = false;
  absl::Status s = testing::CheckHealth((*server)->port(), &serving);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_TRUE(serving);
  RefitClient::Options co;
  co.target = absl::StrCat("127.0.0.1:", (*server)->port());
  s = ConnectAndCall(co);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
}

TEST_F(SecurityTest, TokenOverMutualTls) {
  auto o = BaseOptions();
  o.bearer_token = "tok";
  o.tls = std::make_unique<TlsOptions>();
  o.tls->cert_chain_pem = pki_->server_cert;
  o.tls->private_key_pem = pki_->server_key;
  o.tls->client_ca_pem = pki_->ca;
  auto server = RefitServer::Start(std::move(o));
  ASSERT_TRUE(server.ok()) << server.status();
  auto co = TlsClient((*server)->port(), pki_->ca);
  co.client_cert_pem = pki_->client_cert;
  co.client_key_pem = pki_->client_key;
  absl::Status s = ConnectAndCall(co);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("bearer token"));
  co.bearer_token = "tok";
  EXPECT_TRUE(ConnectAndCall(co).ok());
}

TEST_F(SecurityTest, InsecureNonLoopbackNeedsTheOverride) {
  auto o = BaseOptions();
  o.address = "0.0.0.0:0";
  auto s = RefitServer::Start(std::move(o));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("allow_insecure_non_loopback"));
  auto o2 = BaseOptions();
  o2.address = "0.0.0.0:0";
  o2.allow_insecure_non_loopback = true;
  auto s2 = RefitServer::Start(std::move(o2));
  EXPECT_TRUE(s2.ok()) << s2.status();
  // TLS on a non-loopback address needs no override.
  auto o3 = BaseOptions();
  o3.address = "0.0.0.0:0";
  o3.tls = std::make_unique<TlsOptions>();
  o3.tls->cert_chain_pem = pki_->server_cert;
  o3.tls->private_key_pem = pki_->server_key;
  auto s3 = RefitServer::Start(std::move(o3));
  EXPECT_TRUE(s3.ok()) << s3.status();
  // TLS options without a key are refused, naming the option.
  auto o4 = BaseOptions();
  o4.tls = std::make_unique<TlsOptions>();
  o4.tls->cert_chain_pem = pki_->server_cert;
  auto s4 = RefitServer::Start(std::move(o4));
  EXPECT_EQ(s4.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s4.status().message()), HasSubstr("options.tls"));
}

}  // namespace
}  // namespace refit

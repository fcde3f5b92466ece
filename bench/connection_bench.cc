// connection_bench: what refitd's connection path costs an honest client on
// loopback (refitd in this process, RefitServer with NameMatchingPlan):
//   (a) GetStatus on a new connection (a channel of its own), --calls times:
//       connect + first call, median and slowest;
//   (b) KvGet of a --value_mib MiB value (the size of a large plan slice,
//       one unary response) --gets times on one connection: GB/s (1e9 B/s)
//       of the value bytes.
// Flags: --calls=N --gets=N --value_mib=M --tls=1 (a TLS listener with a
// self-signed certificate made by the openssl command; clients trust it).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "client/refit_client.h"
#include "common/file.h"
#include "grpcpp/grpcpp.h"
#include "proto/protocol_version.h"
#include "proto/refit_service.grpc.pb.h"
#include "server/refit_server.h"
#include "testing/name_matching_plan.h"

namespace refit {
namespace {

double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

// Connect + GetStatus on a channel with a connection of its own.
// `cert`: the TLS certificate to trust (empty: plaintext).
double NewConnectionStatusMs(int port, const std::string& cert) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (!cert.empty()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = cert;
    creds = grpc::SslCredentials(ssl);
    args.SetSslTargetNameOverride("refitd");
  }
  const absl::Time start = absl::Now();
  auto channel =
      grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port), creds, args);
  auto service = v1::RefitService::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  ctx.set_wait_for_ready(true);
  v1::StatusRequest req;
  v1::StatusResponse resp;
  const grpc::Status s = service->GetStatus(&ctx, req, &resp);
  if (!s.ok()) std::fprintf(stderr, "GetStatus: %s\n", s.error_message().c_str());
  return s.ok() ? Ms(absl::Now() - start) : -1;
}

int Main(int argc, char** argv) {
  int calls = 200, gets = 20, value_mib = 15, tls = 0;
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    int* target = absl::ConsumePrefix(&a, "--calls=")       ? &calls
                  : absl::ConsumePrefix(&a, "--gets=")      ? &gets
                  : absl::ConsumePrefix(&a, "--value_mib=") ? &value_mib
                  : absl::ConsumePrefix(&a, "--tls=")       ? &tls
                                                            : nullptr;
    if (target == nullptr || !absl::SimpleAtoi(a, target) || *target < (target == &tls ? 0 : 1)) {
      std::fprintf(stderr,
                   "usage: connection_bench [--calls=N] [--gets=N] [--value_mib=M] [--tls=1]\n");
      return 2;
    }
  }
  RefitServer::Options o;
  o.coordinator.plan_function = NameMatchingPlan;
  std::string cert;
  if (tls != 0) {
    const std::string cmd =
        "mkdir -p /tmp/connection_bench && openssl req -x509 -newkey ec -pkeyopt "
        "ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=refitd -addext "
        "subjectAltName=DNS:refitd -keyout /tmp/connection_bench/key.pem -out "
        "/tmp/connection_bench/cert.pem > /dev/null 2>&1";
    absl::StatusOr<std::string> key;
    absl::StatusOr<std::string> made;
    if (std::system(cmd.c_str()) == 0) {
      made = ReadFileToString("/tmp/connection_bench/cert.pem", 1 << 20);
      key = ReadFileToString("/tmp/connection_bench/key.pem", 1 << 20);
    }
    if (!made.ok() || !key.ok()) {
      std::fprintf(stderr, "--tls needs the openssl command: %s\n", cmd.c_str());
      return 1;
    }
    cert = *made;
    o.tls = std::make_unique<TlsOptions>(TlsOptions{cert, *key, ""});
  }
  auto server = RefitServer::Start(std::move(o));
  if (!server.ok()) {
    std::fprintf(stderr, "refitd: %s\n", server.status().ToString().c_str());
    return 1;
  }
  const int port = (*server)->port();
  std::vector<double> ms;
  for (int i = 0; i < calls; ++i) ms.push_back(NewConnectionStatusMs(port, cert));
  std::sort(ms.begin(), ms.end());
  if (ms.front() < 0) return 1;

  RefitClient::Options co;
  co.target = absl::StrCat("127.0.0.1:", port);
  co.use_tls = !cert.empty();
  co.root_ca_pem = cert;
  co.tls_server_name = "refitd";
  auto member = RefitClient::Connect(co);
  if (!member.ok()) return 1;
  v1::Registration reg;
  reg.set_protocol_version(kProtocolVersion);
  reg.mutable_identity()->set_job("bench");
  reg.mutable_identity()->set_side(v1::SIDE_TRAINER);
  reg.mutable_identity()->set_world_size(1);
  reg.set_model_config("tiny-qwen3");
  reg.set_convention("fsdp:dp=1");
  if (!(*member)->Register(reg).ok()) return 1;
  const std::string value(static_cast<size_t>(value_mib) << 20, 'v');
  if (absl::Status s = (*member)->KvSet("slice", value, absl::Now() + absl::Seconds(30)); !s.ok()) {
    std::fprintf(stderr, "KvSet: %s\n", s.ToString().c_str());
    return 1;
  }
  (void)(*member)->KvGet("slice", absl::Now() + absl::Seconds(30));  // warm up
  const absl::Time start = absl::Now();
  for (int i = 0; i < gets; ++i) {
    auto got = (*member)->KvGet("slice", absl::Now() + absl::Seconds(30));
    if (!got.ok() || got->size() != value.size()) return 1;
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  std::printf("%s: ", cert.empty() ? "plaintext" : "TLS");
  std::printf("GetStatus on a new connection, %d calls: median %.2f ms, p90 %.2f ms, "
              "slowest %.2f ms\n",
              calls, ms[ms.size() / 2], ms[ms.size() * 9 / 10], ms.back());
  std::printf("KvGet of %d MiB, %d times on one connection: %.2f GB/s\n", value_mib, gets,
              static_cast<double>(value.size()) * gets / seconds / 1e9);
  (*server)->Shutdown();
  return 0;
}

}  // namespace
}  // namespace refit

int main(int argc, char** argv) { return refit::Main(argc, argv); }

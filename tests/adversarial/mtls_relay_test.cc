// Mutual TLS against a refitd child (--tls_client_ca, --token_file): refitd
// terminates TLS in its connection relay and gRPC serves plaintext behind
// it, so the client certificate is checked by the relay's handshake alone.
// A client without a certificate, or with one another CA signed, is refused
// there (no HTTP/2 byte reaches it, over TLS 1.2 and 1.3); the right one
// works from the C++ client, `refit status` and `refit health`, and still
// needs the bearer token (health needs none); a flood of refused handshakes
// from one address keeps no member with the right certificate out.
#include <openssl/ssl.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/file.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "testing/refitd_process.h"
#include "testing/test_paths.h"
#include "tests/adversarial/h2_wire.h"
#include "tests/adversarial/refitd_peers.h"
#include "tests/adversarial/tls_wire.h"

namespace refit {
namespace {

using ::refit::testing::Frame;
using ::refit::testing::GrpcHeaders;
using ::refit::testing::kPreface;
using ::refit::testing::Runfile;
using ::refit::testing::StatusWith;
using ::refit::testing::TlsWire;
using ::refit::testing::TlsWireOptions;
using ::refit::testing::TmpFile;

constexpr char kToken[] = "mtls-relay-token";

// PEM files made with the openssl command line: "ca" signs "server" (for
// 127.0.0.1 and "refitd") and "client"; "other_ca" signs "rogue".
struct Pki {
  std::string dir;
  std::string Path(const std::string& name) const { return dir + "/" + name + ".pem"; }
  std::string Key(const std::string& name) const { return dir + "/" + name + ".key"; }
  std::string Read(const std::string& file) const {
    absl::StatusOr<std::string> text = ReadFileToString(file, 1 << 20);
    EXPECT_TRUE(text.ok()) << text.status();
    return text.ok() ? *text : "";
  }
};

void MakePki(const std::string& name, Pki* pki) {
  pki->dir = TmpFile(name + "-pki");
  const std::string d = pki->dir;
  const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes";
  std::string script = absl::StrCat("set -e; rm -rf ", d, "; mkdir -p ", d, "; cd ", d, "; ");
  for (const char* ca : {"ca", "other_ca"}) {
    absl::StrAppend(&script, "openssl req -x509 ", key, " -days 1 -subj /CN=", ca,
                    " -addext basicConstraints=critical,CA:TRUE",
                    " -addext keyUsage=critical,keyCertSign -keyout ", ca, ".key -out ", ca,
                    ".pem; ");
  }
  const std::vector<std::vector<std::string>> leaves = {
      {"server", "ca", "subjectAltName=IP:127.0.0.1,DNS:refitd\\nextendedKeyUsage=serverAuth"},
      {"client", "ca", "extendedKeyUsage=clientAuth"},
      {"rogue", "other_ca", "extendedKeyUsage=clientAuth"}};
  for (const auto& leaf : leaves) {
    const std::string& n = leaf[0];
    absl::StrAppend(&script, "printf '", leaf[2], "\\n' > ", n, ".ext; openssl req ", key,
                    " -subj /CN=", n, " -keyout ", n, ".key -out ", n, ".csr; ",
                    "openssl x509 -req -days 1 -in ", n, ".csr -CA ", leaf[1], ".pem -CAkey ",
                    leaf[1], ".key -CAcreateserial -extfile ", n, ".ext -out ", n, ".pem; ");
  }
  const std::string cmd = absl::StrCat("(", script, ") > ", d, ".log 2>&1");
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

// A refitd child with mutual TLS (certificates made into `pki`) and a
// bearer token.
void StartMutualRefitd(const std::string& name, Pki* pki, RefitdProcess* refitd) {
  MakePki(name, pki);
  if (::testing::Test::HasFatalFailure()) return;
  signal(SIGPIPE, SIG_IGN);  // SSL_write to a connection refitd closed
  const std::string token_file = TmpFile(name + "-token");
  std::FILE* f = std::fopen(token_file.c_str(), "w");
  ASSERT_NE(f, nullptr) << token_file;
  std::fputs(kToken, f);
  std::fclose(f);
  ASSERT_TRUE(refitd
                  ->Start(Runfile("server/refitd"),
                          {"--tls_cert=" + pki->Path("server"), "--tls_key=" + pki->Key("server"),
                           "--tls_client_ca=" + pki->Path("ca"), "--token_file=" + token_file,
                           "--first_request_timeout_ms=2000"},
                          TmpFile(name + ".log"), absl::Seconds(20))
                  .ok());
}

// GetStatus over a new gRPC connection trusting "ca", presenting `cert`
// (empty: no certificate), with the bearer token when `token`; waits for
// the connection until `deadline`.
grpc::Status MutualStatus(int port, const Pki& pki, const std::string& cert, bool token,
                          absl::Time deadline) {
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = pki.Read(pki.Path("ca"));
  if (!cert.empty()) {
    ssl.pem_cert_chain = pki.Read(pki.Path(cert));
    ssl.pem_private_key = pki.Read(pki.Key(cert));
  }
  return StatusWith(port, deadline, grpc::SslCredentials(ssl), "refitd", token ? kToken : "",
                    /*wait_for_ready=*/false);
}

// A raw TLS client that trusts "ca", checks the name "refitd" and presents
// `cert` (empty: none), at most TLS `max_version`.
TlsWireOptions Mutual(const Pki& pki, const std::string& cert, int max_version,
                      const std::string& source = "") {
  TlsWireOptions o;
  o.ca = pki.Path("ca");
  o.host = "refitd";
  if (!cert.empty()) {
    o.cert = pki.Path(cert);
    o.key = pki.Key(cert);
  }
  o.max_version = max_version;
  o.source = source;
  return o;
}

// Sends a first GetStatus request and reads until refitd closes the
// connection or `limit` passes; returns the HTTP/2 bytes received and sets
// `closed`.
size_t RequestAndRead(TlsWire& wire, absl::Duration limit, bool* closed) {
  const std::string request = std::string(kPreface) + Frame(4, 0, 0, "") +
                              Frame(1, 4, 1, GrpcHeaders("GetStatus", "")) +
                              Frame(0, 1, 1, std::string(5, '\0'));
  *closed = !wire.Send(request);
  return *closed ? 0 : wire.ReadUntilClosed(limit, closed).size();
}

TEST(MutualTlsRelayTest, OnlyTheRightClientCertificateGetsPastTheHandshake) {
  Pki pki;
  RefitdProcess refitd;
  StartMutualRefitd("mtls-handshake", &pki, &refitd);
  const int port = refitd.port();

  // TLS 1.2: the server checks the certificate before the client's
  // handshake ends, so the refusal is the handshake's.
  for (const char* cert : {"", "rogue"}) {
    TlsWire tls12(port, Mutual(pki, cert, TLS1_2_VERSION));
    EXPECT_FALSE(tls12.Handshake()) << "TLS 1.2 client certificate '" << cert << "'";
  }
  // TLS 1.3: the client's side ends first; refitd then answers its request
  // with an alert and closes, sending no HTTP/2 byte.
  for (const char* cert : {"", "rogue"}) {
    TlsWire tls13(port, Mutual(pki, cert, TLS1_3_VERSION));
    bool closed = true;
    const size_t got = tls13.Handshake() ? RequestAndRead(tls13, absl::Seconds(3), &closed) : 0;
    EXPECT_EQ(got, 0u) << "TLS 1.3 client certificate '" << cert << "'";
    EXPECT_TRUE(closed) << "TLS 1.3 client certificate '" << cert << "'";
  }
  // The right certificate: the handshake and HTTP/2 behind it.
  for (int version : {TLS1_2_VERSION, TLS1_3_VERSION}) {
    TlsWire good(port, Mutual(pki, "client", version));
    ASSERT_TRUE(good.Handshake()) << "version " << version;
    bool closed = false;
    EXPECT_GT(RequestAndRead(good, absl::Milliseconds(500), &closed), 0u) << version;
  }

  // gRPC clients: the certificate is needed, then the token as well.
  const auto in = [] { return absl::Now() + absl::Seconds(5); };
  EXPECT_EQ(MutualStatus(port, pki, "", true, in()).error_code(), grpc::UNAVAILABLE);
  EXPECT_EQ(MutualStatus(port, pki, "rogue", true, in()).error_code(), grpc::UNAVAILABLE);
  EXPECT_EQ(MutualStatus(port, pki, "client", false, in()).error_code(),
            grpc::UNAUTHENTICATED);
  const grpc::Status right = MutualStatus(port, pki, "client", true, in());
  EXPECT_TRUE(right.ok()) << right.error_message();

  // `refit status` with the right certificate, and without one.
  const std::string token_file = TmpFile("mtls-handshake-token");
  const std::string cli =
      absl::StrCat(Runfile("cli/refit"), " status --server=127.0.0.1:", port,
                   " --token_file=", token_file, " --tls_ca_file=", pki.Path("ca"),
                   " --tls_server_name=refitd --timeout_s=5");
  const std::string out = TmpFile("mtls-cli.out");
  const std::string with_cert = absl::StrCat(cli, " --tls_cert_file=", pki.Path("client"),
                                             " --tls_key_file=", pki.Key("client"), " > ",
                                             out, " 2>&1");
  EXPECT_EQ(std::system(with_cert.c_str()), 0) << pki.Read(out);
  const std::string without = absl::StrCat(cli, " > ", out, " 2>&1");
  EXPECT_NE(std::system(without.c_str()), 0) << pki.Read(out);
  // `refit health` speaks TLS too.
  const std::string health = absl::StrCat(
      Runfile("cli/refit"), " health --server=127.0.0.1:", port, " --tls_ca_file=",
      pki.Path("ca"), " --tls_server_name=refitd --timeout_s=5 --tls_cert_file=",
      pki.Path("client"), " --tls_key_file=", pki.Key("client"), " > ", out, " 2>&1");
  EXPECT_EQ(std::system(health.c_str()), 0) << pki.Read(out);
  EXPECT_NE(pki.Read(out).find("SERVING"), std::string::npos) << pki.Read(out);
  EXPECT_TRUE(refitd.Alive());
}

TEST(MutualTlsRelayTest, RefusedHandshakesFromOneAddressKeepNoRightClientOut) {
  Pki pki;
  RefitdProcess refitd;
  StartMutualRefitd("mtls-flood", &pki, &refitd);
  std::atomic<bool> stop{false};
  std::atomic<int64_t> refused{0}, admitted{0};
  std::thread attacker([&] {
    for (int i = 0; !stop.load(); ++i) {
      // Alternately no certificate and one another CA signed, TLS 1.2 (the
      // handshake itself fails) and 1.3 (the first read does).
      TlsWire c(refitd.port(), Mutual(pki, i % 2 == 0 ? "" : "rogue",
                                      i % 4 < 2 ? TLS1_2_VERSION : TLS1_3_VERSION, "127.0.0.2"));
      bool closed = false;
      const size_t got = c.Handshake() ? RequestAndRead(c, absl::Seconds(1), &closed) : 0;
      (got == 0 ? refused : admitted).fetch_add(1);
    }
  });
  const absl::Time until = absl::Now() + absl::Seconds(30);
  while (refused.load() < 300 && absl::Now() < until) absl::SleepFor(absl::Milliseconds(50));
  int ok = 0;
  double slowest_ms = 0;
  for (int i = 0; i < 20; ++i) {
    const absl::Time t = absl::Now();
    if (MutualStatus(refitd.port(), pki, "client", true, t + absl::Seconds(3)).ok()) ++ok;
    slowest_ms = std::max(slowest_ms, absl::ToDoubleMilliseconds(absl::Now() - t));
  }
  stop.store(true);
  attacker.join();
  std::printf("mutual TLS: %lld handshakes without the right client certificate from "
              "127.0.0.2 refused (%lld got HTTP/2 bytes); %d of 20 GetStatus calls with it on "
              "new connections answered, slowest %.0f ms\n",
              static_cast<long long>(refused.load()), static_cast<long long>(admitted.load()),
              ok, slowest_ms);
  EXPECT_GE(refused.load(), 300);
  EXPECT_EQ(admitted.load(), 0);
  EXPECT_EQ(ok, 20);
  EXPECT_TRUE(refitd.Alive());
}

}  // namespace
}  // namespace refit

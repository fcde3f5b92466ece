// TlsServerContext: PEM texts refused by field, and a handshake that
// settles on HTTP/2 (what gRPC clients require) or fails without it.
#include "server/tls_server_context.h"

#include <openssl/ssl.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/file.h"
#include "gtest/gtest.h"
#include "testing/test_paths.h"

namespace refit {
namespace {

using ::refit::testing::TmpFile;

// A self-signed certificate and its key made by the openssl command (as
// refitd's operators make theirs), and a second key that does not match.
struct Pems {
  std::string cert, key, other_key;
};

Pems MakePems() {
  const std::string dir = TmpFile("tls_ctx");
  const std::string cmd = absl::StrCat(
      "mkdir -p ", dir, " && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 ",
      "-nodes -days 1 -subj /CN=refitd -keyout ", dir, "/key.pem -out ", dir,
      "/cert.pem > /dev/null 2>&1 && openssl genpkey -algorithm EC -pkeyopt ",
      "ec_paramgen_curve:P-256 -out ", dir, "/other.pem > /dev/null 2>&1");
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  Pems p;
  p.cert = ReadFileToString(dir + "/cert.pem", 1 << 20).value_or("");
  p.key = ReadFileToString(dir + "/key.pem", 1 << 20).value_or("");
  p.other_key = ReadFileToString(dir + "/other.pem", 1 << 20).value_or("");
  return p;
}

TEST(TlsServerContextTest, BadPemTextsAreRefusedNamingTheField) {
  const Pems p = MakePems();
  ASSERT_FALSE(p.cert.empty());
  EXPECT_TRUE(TlsServerContext::Create({p.cert, p.key, ""}).ok());
  absl::StatusOr<std::unique_ptr<TlsServerContext>> c =
      TlsServerContext::Create({"not a certificate", p.key, ""});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("options.tls: certificate chain"), std::string::npos)
      << c.status();
  c = TlsServerContext::Create({p.cert, p.other_key, ""});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("private key: does not match the certificate"),
            std::string::npos)
      << c.status();
  c = TlsServerContext::Create({p.cert, p.key, "no CA here"});
  EXPECT_NE(c.status().message().find("options.tls: client CA"), std::string::npos)
      << c.status();
}

// Runs a client handshake offering `alpn` (wire format) against a session
// of `ctx` over a socket pair; returns the server's result (1: done) and
// sets the protocol both settled on.
int Handshake(const TlsServerContext& ctx, const std::string& alpn, std::string* chosen) {
  signal(SIGPIPE, SIG_IGN);  // a side writing after the other gave up
  int fds[2];
  EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  SSL* server = ctx.NewSession(fds[0]);
  EXPECT_NE(server, nullptr);
  std::thread client([&] {
    SSL_CTX* cctx = SSL_CTX_new(TLS_client_method());
    SSL* ssl = SSL_new(cctx);
    SSL_set_fd(ssl, fds[1]);
    SSL_set_alpn_protos(ssl, reinterpret_cast<const unsigned char*>(alpn.data()),
                        static_cast<unsigned>(alpn.size()));
    SSL_connect(ssl);  // the server's verdict is what the test reads
    SSL_free(ssl);
    SSL_CTX_free(cctx);
    shutdown(fds[1], SHUT_RDWR);
  });
  const int r = SSL_do_handshake(server);
  const unsigned char* proto = nullptr;
  unsigned len = 0;
  SSL_get0_alpn_selected(server, &proto, &len);
  chosen->assign(reinterpret_cast<const char*>(proto), len);
  client.join();
  SSL_free(server);
  close(fds[0]);
  close(fds[1]);
  return r;
}

TEST(TlsServerContextTest, AHandshakeSettlesOnHttp2AndFailsWithoutIt) {
  const Pems p = MakePems();
  absl::StatusOr<std::unique_ptr<TlsServerContext>> ctx =
      TlsServerContext::Create({p.cert, p.key, ""});
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  std::string chosen;
  EXPECT_EQ(Handshake(**ctx, std::string("\x08http/1.1\x02h2", 12), &chosen), 1);
  EXPECT_EQ(chosen, "h2");
  EXPECT_NE(Handshake(**ctx, std::string("\x08http/1.1", 9), &chosen), 1);
}

}  // namespace
}  // namespace refit

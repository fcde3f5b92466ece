// HTTP/2 floods over TLS, against a TLS refitd child: refitd terminates TLS
// in its connection relay, so a CONTINUATION flood or a rapid reset inside
// a TLS connection meets the bounds a plaintext one does (gRPC 1.51 alone
// holds the first whole and serves the second at full speed), a connection
// that completes its handshake and then sends nothing, or that stops in
// the middle of its handshake, is closed, and a plaintext client on the TLS
// port gets nothing.
#include <openssl/bio.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/file.h"
#include "gtest/gtest.h"
#include "testing/refitd_process.h"
#include "testing/test_paths.h"
#include "tests/adversarial/h2_wire.h"
#include "tests/adversarial/refitd_peers.h"
#include "tests/adversarial/tls_wire.h"

namespace refit {
namespace {

using ::refit::testing::Dial;
using ::refit::testing::Frame;
using ::refit::testing::GrpcHeaders;
using ::refit::testing::Header;
using ::refit::testing::kPreface;
using ::refit::testing::RaiseOwnFdLimit;
using ::refit::testing::Runfile;
using ::refit::testing::SendAll;
using ::refit::testing::StatusOverANewConnection;
using ::refit::testing::LastGoAwayCode;
using ::refit::testing::TlsWire;
using ::refit::testing::TlsWireOptions;
using ::refit::testing::TmpFile;

// A TLS refitd (self-signed certificate for "refitd") with
// --first_request_timeout_ms=1000, and the certificate clients trust.
struct TlsRefitd {
  RefitdProcess process;
  std::string cert;
};

void StartTlsRefitd(TlsRefitd* r, const std::string& name, int64_t fd_limit = 0,
                    const std::string& first_request_ms = "1000") {
  signal(SIGPIPE, SIG_IGN);  // SSL_write to a connection refitd closed
  const std::string dir = TmpFile(name + "-pki");
  const std::string make_cert = absl::StrCat(
      "mkdir -p ", dir, " && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 ",
      "-nodes -days 1 -subj /CN=refitd -addext subjectAltName=DNS:refitd -keyout ", dir,
      "/key.pem -out ", dir, "/cert.pem > ", dir, "/openssl.log 2>&1");
  ASSERT_EQ(std::system(make_cert.c_str()), 0) << make_cert;
  absl::StatusOr<std::string> cert = ReadFileToString(dir + "/cert.pem", 1 << 20);
  ASSERT_TRUE(cert.ok()) << cert.status();
  r->cert = *cert;
  ASSERT_TRUE(r->process
                  .Start(Runfile("server/refitd"),
                         {absl::StrCat("--tls_cert=", dir, "/cert.pem"),
                          absl::StrCat("--tls_key=", dir, "/key.pem"),
                          "--first_request_timeout_ms=" + first_request_ms},
                         TmpFile(name + ".log"), absl::Seconds(20), fd_limit)
                  .ok());
  ASSERT_TRUE(StatusOverANewConnection(r->process.port(), absl::Now() + absl::Seconds(10),
                                       r->cert, "refitd")
                  .ok());
}

// A raw TLS client that checks no certificate: it plays the attacker.
TlsWireOptions Attacker(const std::string& source = "") {
  TlsWireOptions o;
  o.source = source;
  return o;
}

// Reads until refitd closes the connection (within `limit`); returns the
// last GOAWAY code it sent (-1: none) and sets `closed`.
int64_t GoAwayUntilClosed(TlsWire& wire, absl::Duration limit, bool* closed) {
  return LastGoAwayCode(wire.ReadUntilClosed(limit, closed));
}

std::string FirstRequest() {
  return std::string(kPreface) + Frame(4, 0, 0, "") +
         Frame(1, 4, 1, GrpcHeaders("GetStatus", "")) + Frame(0, 1, 1, std::string(5, '\0'));
}

// A TLS client's first flight (its ClientHello, offering h2), made in
// memory: sent alone, it starts a handshake that never finishes.
std::string ClientHello() {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL* ssl = SSL_new(ctx);
  BIO* to_server = BIO_new(BIO_s_mem());
  SSL_set_bio(ssl, BIO_new(BIO_s_mem()), to_server);
  static constexpr unsigned char kH2[] = {2, 'h', '2'};
  SSL_set_alpn_protos(ssl, kH2, sizeof(kH2));
  SSL_connect(ssl);  // wants to read the server's answer
  char* data = nullptr;
  const long n = BIO_get_mem_data(to_server, &data);
  std::string hello(data, static_cast<size_t>(n));
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  return hello;
}

// Whether refitd closes `fd` within `limit` (a read sees its end).
bool PlainClosedWithin(int fd, absl::Duration limit) {
  const absl::Time until = absl::Now() + limit;
  while (absl::Now() < until) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    char buf[4096];
    const ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) return true;
  }
  return false;
}

TEST(TlsFloodTest, AContinuationFloodInsideTlsIsClosedAndMemoryStays) {
  TlsRefitd refitd;
  StartTlsRefitd(&refitd, "tls-continuation");
  const int64_t rss_before = refitd.process.PeakRssKib();
  TlsWire wire(refitd.process.port(), Attacker());
  ASSERT_TRUE(wire.Handshake());
  ASSERT_TRUE(wire.Send(FirstRequest() + Frame(1, 0, 3, Header("x-pad", std::string(100, 'p')))));
  const std::string continuation = Frame(9, 0, 3, Header("x-pad", std::string(16000, 'p')));
  const absl::Time start = absl::Now();
  int64_t sent = 0;
  while (sent < (int64_t{1} << 30) && absl::Now() - start < absl::Seconds(20) &&
         wire.Send(continuation)) {
    sent += static_cast<int64_t>(continuation.size());
  }
  bool closed = false;
  const int64_t code = GoAwayUntilClosed(wire, absl::Seconds(5), &closed);
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  std::printf("TLS: CONTINUATION flood after a first request: closed=%d (GOAWAY code %lld) "
              "after %.2f s and %.1f MiB sent; peak RSS %.1f MiB (%.1f before)\n",
              closed, static_cast<long long>(code), seconds, sent / 1048576.0,
              refitd.process.PeakRssKib() / 1024.0, rss_before / 1024.0);
  EXPECT_TRUE(closed);
  EXPECT_EQ(code, 0xb);  // ENHANCE_YOUR_CALM, through TLS
  EXPECT_LT(seconds, 5.0);
  EXPECT_LT(sent, int64_t{64} << 20);
  EXPECT_LT(refitd.process.PeakRssKib() - rss_before, 32 * 1024);
  EXPECT_TRUE(StatusOverANewConnection(refitd.process.port(), absl::Now() + absl::Seconds(5),
                                       refitd.cert, "refitd")
                  .ok());
}

TEST(TlsFloodTest, ARapidResetInsideTlsIsClosedWithinASecond) {
  TlsRefitd refitd;
  StartTlsRefitd(&refitd, "tls-rapid-reset");
  TlsWire wire(refitd.process.port(), Attacker());
  ASSERT_TRUE(wire.Handshake());
  ASSERT_TRUE(wire.Send(FirstRequest()));
  const absl::Time start = absl::Now();
  int64_t streams = 0;
  bool ok = true;
  for (uint32_t s = 3; ok && s < (1u << 30) && absl::Now() - start < absl::Seconds(5);) {
    std::string batch;
    for (int i = 0; i < 100; ++i, s += 2) {
      batch += Frame(1, 4, s, GrpcHeaders("GetStatus", "")) +
               Frame(3, 0, s, std::string("\0\0\0\x08", 4));
    }
    ok = wire.Send(batch);
    if (ok) streams += 100;
  }
  bool closed = !ok;
  int64_t code = -1;  // -1: closed while sending, or no GOAWAY read
  if (!closed) code = GoAwayUntilClosed(wire, absl::Seconds(2), &closed);
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  std::printf("TLS: rapid reset: %lld streams opened and reset, closed=%d (GOAWAY code %lld) "
              "after %.3f s\n",
              static_cast<long long>(streams), closed, static_cast<long long>(code), seconds);
  EXPECT_TRUE(closed);
  EXPECT_LT(seconds, 1.5);
  EXPECT_TRUE(StatusOverANewConnection(refitd.process.port(), absl::Now() + absl::Seconds(5),
                                       refitd.cert, "refitd")
                  .ok());
  EXPECT_TRUE(refitd.process.Alive());
}

TEST(TlsFloodTest, SilentAndHalfHandshakenConnectionsAreClosedAndPlaintextGetsNothing) {
  TlsRefitd refitd;
  StartTlsRefitd(&refitd, "tls-silent");
  const int port = refitd.process.port();
  // 50 connections that complete the handshake and then send nothing.
  std::vector<std::unique_ptr<TlsWire>> silent;
  for (int i = 0; i < 50; ++i) {
    silent.push_back(std::make_unique<TlsWire>(port, Attacker()));
    ASSERT_TRUE(silent.back()->Handshake());
  }
  // One that sends its ClientHello and stops there.
  const int half_fd = Dial(port);
  ASSERT_GE(half_fd, 0);
  ASSERT_TRUE(SendAll(half_fd, ClientHello()));
  // A plaintext client on the TLS port.
  const int plain = Dial(port);
  ASSERT_GE(plain, 0);
  ASSERT_TRUE(SendAll(plain, FirstRequest()));
  const absl::Time start = absl::Now();
  EXPECT_TRUE(PlainClosedWithin(plain, absl::Seconds(3)));
  close(plain);
  int closed = 0;
  for (auto& w : silent) {
    bool c = false;
    GoAwayUntilClosed(*w, absl::Seconds(4) - (absl::Now() - start), &c);
    closed += c ? 1 : 0;
  }
  const bool half_closed = PlainClosedWithin(half_fd, absl::Seconds(3));
  std::printf("TLS, --first_request_timeout_ms=1000: %d of 50 handshaken silent connections "
              "closed within %.2f s; a half handshake closed: %d\n",
              closed, absl::ToDoubleSeconds(absl::Now() - start), half_closed);
  EXPECT_EQ(closed, 50);
  EXPECT_TRUE(half_closed);
  EXPECT_TRUE(StatusOverANewConnection(port, absl::Now() + absl::Seconds(5), refitd.cert,
                                       "refitd")
                  .ok());
}

// Frames that are no request (an unknown type) after the preface, endlessly:
// refitd holds at most the first-request bound of them and closes the
// connection, as the gate does for plaintext.
TEST(TlsFloodTest, FramesThatAreNoRequestAreClosedAtTheFirstRequestBound) {
  TlsRefitd refitd;
  StartTlsRefitd(&refitd, "tls-no-request", 0, "10000");
  const int64_t rss_before = refitd.process.PeakRssKib();
  TlsWire wire(refitd.process.port(), Attacker());
  ASSERT_TRUE(wire.Handshake());
  ASSERT_TRUE(wire.Send(std::string(kPreface) + Frame(4, 0, 0, "")));
  std::string junk;
  for (int i = 0; i < 16; ++i) junk += Frame(0x20, 0, 0, std::string(16000, 'j'));
  const absl::Time start = absl::Now();
  int64_t sent = 0;
  while (sent < (int64_t{1} << 30) && absl::Now() - start < absl::Seconds(15) &&
         wire.Send(junk)) {
    sent += static_cast<int64_t>(junk.size());
  }
  bool closed = false;
  GoAwayUntilClosed(wire, absl::Seconds(3), &closed);
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  std::printf("TLS: unknown frames before the first request: closed=%d after %.2f s, %.1f MiB "
              "sent; peak RSS %.1f MiB (%.1f before)\n",
              closed, seconds, sent / 1048576.0, refitd.process.PeakRssKib() / 1024.0,
              rss_before / 1024.0);
  EXPECT_TRUE(closed);
  EXPECT_LT(seconds, 3.0);
  EXPECT_LT(sent, int64_t{16} << 20);  // socket buffers, not what refitd held
  EXPECT_LT(refitd.process.PeakRssKib() - rss_before, 16 * 1024);
}

// Finished handshakes that then send the HTTP/2 preface and SETTINGS and
// nothing more are held like plaintext ones before their first request (at
// most 256, a flood's own oldest closed first), so 1,000 of them against a
// refitd with nofile=1024 keep no new TLS client out.
TEST(TlsFloodTest, AThousandSilentHandshakesKeepNoTlsClientOut) {
  RaiseOwnFdLimit();
  TlsRefitd refitd;
  StartTlsRefitd(&refitd, "tls-preface-flood", /*fd_limit=*/1024, "10000");
  const int port = refitd.process.port();
  std::atomic<bool> stop{false};
  std::atomic<int64_t> opened{0};
  std::thread attacker([&] {
    std::deque<std::unique_ptr<TlsWire>> held;
    while (!stop.load()) {
      auto w = std::make_unique<TlsWire>(port, Attacker("127.0.0.2"));
      if (w->Handshake() && w->Send(std::string(kPreface) + Frame(4, 0, 0, ""))) {
        ++opened;
        held.push_back(std::move(w));
        if (held.size() > 2000) held.pop_front();
      }
    }
  });
  const absl::Time until = absl::Now() + absl::Seconds(30);
  while (opened.load() < 1500 && absl::Now() < until) absl::SleepFor(absl::Milliseconds(50));
  int ok = 0;
  double slowest_ms = 0;
  for (int i = 0; i < 20; ++i) {
    const absl::Time t = absl::Now();
    if (StatusOverANewConnection(port, t + absl::Seconds(3), refitd.cert, "refitd").ok()) ++ok;
    slowest_ms = std::max(slowest_ms, absl::ToDoubleMilliseconds(absl::Now() - t));
    absl::SleepFor(absl::Milliseconds(50));
  }
  stop.store(true);
  attacker.join();
  std::printf("TLS, refitd nofile=1024: %lld handshakes from 127.0.0.2 each followed by the "
              "preface and SETTINGS, then nothing: %d of 20 new TLS clients answered, slowest "
              "%.0f ms\n",
              static_cast<long long>(opened.load()), ok, slowest_ms);
  EXPECT_GE(opened.load(), 1500);
  EXPECT_EQ(ok, 20);
  EXPECT_TRUE(refitd.process.Alive());
}

}  // namespace
}  // namespace refit

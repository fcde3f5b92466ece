// Admission of new connections to a refitd child, without a token: a new
// channel's first call is answered within a round trip, over plaintext or
// TLS (no fixed delay at the connection gate or the relay's handshake), and
// one connected but idle past the gate's timeout still calls; a flood of
// thousands of new connections a second from one address keeps no client
// out, neither one from another address nor one from the flood's own, over
// plaintext or TLS (silent connections, or ones replaying a ClientHello
// that costs refitd a handshake each); a first header block that never
// ends (HEADERS, then CONTINUATION frames without END_HEADERS) is closed
// once it passes 64 KiB, before gRPC buffers it.
#include <fcntl.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/refit_client.h"
#include "common/file.h"
#include "gtest/gtest.h"
#include "testing/refitd_process.h"
#include "testing/test_paths.h"
#include "tests/adversarial/h2_wire.h"
#include "tests/adversarial/refitd_peers.h"

namespace refit {
namespace {

using ::refit::testing::Runfile;
using ::refit::testing::TmpFile;

using ::refit::testing::CpuSeconds;
using ::refit::testing::Dial;
using ::refit::testing::Frame;
using ::refit::testing::Header;
using ::refit::testing::kPreface;
using ::refit::testing::RaiseOwnFdLimit;
using ::refit::testing::SendAll;
using ::refit::testing::StatusOverANewConnection;


// A TLS refitd child (self-signed certificate for "refitd", open-file limit
// 1,024) answering over TLS; `cert` is the certificate clients trust.
void StartTlsRefitd(const std::string& name, RefitdProcess* refitd, std::string* cert) {
  const std::string dir = TmpFile(name + "-pki");
  const std::string make_cert = absl::StrCat(
      "mkdir -p ", dir, " && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 ",
      "-nodes -days 1 -subj /CN=refitd -addext subjectAltName=DNS:refitd -keyout ", dir,
      "/key.pem -out ", dir, "/cert.pem > ", dir, "/openssl.log 2>&1");
  ASSERT_EQ(std::system(make_cert.c_str()), 0)
      << "openssl (Debian package openssl) must make the test certificate: " << make_cert;
  absl::StatusOr<std::string> text = ReadFileToString(dir + "/cert.pem", 1 << 20);
  ASSERT_TRUE(text.ok()) << text.status();
  *cert = *text;
  ASSERT_TRUE(refitd
                  ->Start(Runfile("server/refitd"),
                          {absl::StrCat("--tls_cert=", dir, "/cert.pem"),
                           absl::StrCat("--tls_key=", dir, "/key.pem")},
                          TmpFile(name + ".log"), absl::Seconds(20),
                          /*fd_limit=*/1024)
                  .ok());
  ASSERT_TRUE(StatusOverANewConnection(refitd->port(), absl::Now() + absl::Seconds(10), *cert,
                                       "refitd")
                  .ok());
}

// GetStatus on 15 new connections to `port` (over TLS trusting `cert` when
// set); returns the median milliseconds, and prints them as `what`.
double MedianNewChannelMs(int port, const std::string& cert, const char* what) {
  std::vector<double> ms;
  for (int i = 0; i < 15; ++i) {
    const absl::Time start = absl::Now();
    grpc::Status st = StatusOverANewConnection(port, start + absl::Seconds(5), cert, "refitd");
    EXPECT_TRUE(st.ok()) << what << ": " << st.error_message();
    ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - start));
  }
  std::sort(ms.begin(), ms.end());
  std::printf("GetStatus on a new %s channel: median %.1f ms, fastest %.1f ms, slowest %.1f ms "
              "(15 channels)\n",
              what, ms[7], ms[0], ms.back());
  return ms[7];
}

TEST(AdmissionTest, ANewChannelsFirstCallIsNotDelayed) {
  RefitdProcess refitd;
  ASSERT_TRUE(
      refitd.Start(Runfile("server/refitd"), {}, TmpFile("latency.log"), absl::Seconds(20)).ok());
  ASSERT_TRUE(StatusOverANewConnection(refitd.port(), absl::Now() + absl::Seconds(10)).ok());
  // The gate held every plaintext connection 200 ms before it learned to
  // greet clients that wait for the server's SETTINGS.
  EXPECT_LT(MedianNewChannelMs(refitd.port(), "", "plaintext"), 50.0);
  // Over TLS the relay greets the client after its handshake, as the gate
  // does a plaintext one.
  RefitdProcess tls_refitd;
  std::string cert;
  StartTlsRefitd("tls-latency", &tls_refitd, &cert);
  EXPECT_LT(MedianNewChannelMs(tls_refitd.port(), cert, "TLS"), 50.0);
}

// A client that connected (the gate greeted it) and then made no call is
// closed by the gate after --first_request_timeout_ms; its next call
// reconnects and is answered, with no wait-for-ready.
TEST(AdmissionTest, AConnectedChannelIdlePastTheTimeoutStillCalls) {
  RefitdProcess refitd;
  ASSERT_TRUE(refitd.Start(Runfile("server/refitd"), {"--first_request_timeout_ms=500"},
                           TmpFile("idle.log"), absl::Seconds(20))
                  .ok());
  RefitClient::Options o;
  o.target = absl::StrCat("127.0.0.1:", refitd.port());
  absl::StatusOr<std::unique_ptr<RefitClient>> c = RefitClient::Connect(o);
  ASSERT_TRUE(c.ok()) << c.status();
  absl::SleepFor(absl::Milliseconds(1500));
  for (int i = 0; i < 3; ++i) {
    const absl::Time start = absl::Now();
    absl::StatusOr<v1::StatusResponse> st = (*c)->GetStatus(start + absl::Seconds(5));
    std::printf("GetStatus %d on a channel idle past the gate's timeout: %s in %.1f ms\n", i,
                st.status().ToString().c_str(), absl::ToDoubleMilliseconds(absl::Now() - start));
    EXPECT_TRUE(st.ok()) << st.status();
    absl::SleepFor(absl::Milliseconds(1500));  // idle again: gRPC's idle close this time
  }
}

// Opens connections from `source` at about `per_second` on a thread of its
// own until destroyed; each sends `hello` and is then held, at most `keep`
// at a time (the oldest closed first).
class ConnectFlood {
 public:
  ConnectFlood(int port, std::string source, int per_second, std::string hello, size_t keep)
      : thread_([=] { Run(port, source, per_second, hello, keep); }) {}
  ~ConnectFlood() {
    stop_.store(true);
    thread_.join();
  }
  int64_t opened() const { return opened_.load(); }

 private:
  void Run(int port, const std::string& source, int per_second, const std::string& hello,
           size_t keep) {
    std::deque<int> held;
    const absl::Time start = absl::Now();
    while (!stop_.load()) {
      // Catch up with the rate in batches of a millisecond or more.
      const int64_t due =
          static_cast<int64_t>(absl::ToDoubleSeconds(absl::Now() - start) * per_second);
      if (opened_.load() >= due) {
        absl::SleepFor(absl::Milliseconds(1));
        continue;
      }
      const int fd = Dial(port, source);
      if (fd < 0) continue;
      if (!hello.empty()) SendAll(fd, hello);
      opened_.fetch_add(1);
      held.push_back(fd);
      if (held.size() > keep) {
        close(held.front());
        held.pop_front();
      }
    }
    for (int fd : held) close(fd);
  }

  std::atomic<bool> stop_{false};
  std::atomic<int64_t> opened_{0};
  std::thread thread_;
};

struct FloodOutcome {
  int ok = 0;
  double slowest_ms = 0;
  double flood_per_second = 0;
  double refitd_cpu = 0;  // share of one core
};

// Floods refitd from `flood_source` with connections that send `hello`
// (2,500 a second), and meanwhile makes 20 new connections from the
// kernel's choice of address (127.0.0.1), each calling GetStatus within
// 3 s (over TLS trusting `cert` when set).
FloodOutcome LegitimateCallsUnderFlood(RefitdProcess& refitd, const std::string& flood_source,
                                       const std::string& hello, const std::string& cert = "") {
  FloodOutcome r;
  const double cpu_before = CpuSeconds(refitd.pid());
  const absl::Time start = absl::Now();
  int64_t opened = 0;
  {
    ConnectFlood flood(refitd.port(), flood_source, 2500, hello, 1000);
    absl::SleepFor(absl::Seconds(1));
    for (int i = 0; i < 20; ++i) {
      const absl::Time t = absl::Now();
      if (StatusOverANewConnection(refitd.port(), t + absl::Seconds(3), cert, "refitd").ok()) {
        ++r.ok;
      }
      r.slowest_ms = std::max(r.slowest_ms, absl::ToDoubleMilliseconds(absl::Now() - t));
      absl::SleepFor(absl::Milliseconds(50));
    }
    opened = flood.opened();
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  r.flood_per_second = opened / seconds;
  r.refitd_cpu = (CpuSeconds(refitd.pid()) - cpu_before) / seconds;
  return r;
}

TEST(AdmissionTest, AConnectionFloodKeepsNoClientOut) {
  RaiseOwnFdLimit();
  RefitdProcess refitd;
  ASSERT_TRUE(
      refitd.Start(Runfile("server/refitd"), {}, TmpFile("flood.log"), absl::Seconds(20)).ok());
  const std::string settings = std::string(kPreface) + Frame(4, 0, 0, "");
  struct Case {
    const char* what;
    std::string source, hello;
  };
  for (const Case& c : {Case{"silent, from 127.0.0.2", "127.0.0.2", ""},
                        Case{"preface and SETTINGS, from 127.0.0.2", "127.0.0.2", settings},
                        Case{"preface and SETTINGS, from the client's own 127.0.0.1",
                             "127.0.0.1", settings}}) {
    FloodOutcome r = LegitimateCallsUnderFlood(refitd, c.source, c.hello);
    std::printf("flood of %.0f connections/s (%s): %d of 20 new clients answered, slowest "
                "%.0f ms; refitd at %.0f%% of a core\n",
                r.flood_per_second, c.what, r.ok, r.slowest_ms, 100 * r.refitd_cpu);
    EXPECT_EQ(r.ok, 20) << c.what;
    EXPECT_GT(r.flood_per_second, 1000) << c.what;  // a flood it was
  }
  EXPECT_TRUE(refitd.Alive());
}

// Over TLS the gate holds connections until their first TLS record: a
// flood of silent connections is held and closed like a plaintext one, and
// never fills refitd's descriptors (the common limit of 1,024 here).
TEST(AdmissionTest, ASilentFloodKeepsNoTlsClientOut) {
  RaiseOwnFdLimit();
  RefitdProcess refitd;
  std::string cert;
  StartTlsRefitd("tls-flood", &refitd, &cert);
  const FloodOutcome r = LegitimateCallsUnderFlood(refitd, "127.0.0.2", "", cert);
  std::printf("TLS, refitd nofile=1024: flood of %.0f silent connections/s from 127.0.0.2: "
              "%d of 20 new TLS clients answered, slowest %.0f ms\n",
              r.flood_per_second, r.ok, r.slowest_ms);
  EXPECT_EQ(r.ok, 20);
  EXPECT_GT(r.flood_per_second, 1000);
  EXPECT_TRUE(refitd.Alive());
}

// A client's first TLS flight (its ClientHello, offering h2), captured from
// an OpenSSL client on one end of a socket pair. Replayed, it costs the
// sender nothing and refitd a key exchange and a signature each time.
std::string CannedClientHello() {
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, pair) != 0) return "";
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL* ssl = SSL_new(ctx);
  static constexpr unsigned char kH2[] = {2, 'h', '2'};
  SSL_set_alpn_protos(ssl, kH2, sizeof(kH2));
  SSL_set_fd(ssl, pair[0]);
  fcntl(pair[0], F_SETFL, O_NONBLOCK);
  SSL_connect(ssl);  // sends the ClientHello, then wants the answer
  std::string hello(16384, '\0');
  const ssize_t n = recv(pair[1], hello.data(), hello.size(), MSG_DONTWAIT);
  hello.resize(n > 0 ? static_cast<size_t>(n) : 0);
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  close(pair[0]);
  close(pair[1]);
  return hello;
}

// Each replayed ClientHello makes refitd's relay answer with a full server
// flight (key exchange, certificate, signature) and hold the connection
// until its handshake timeout: 2,500 a second from one address keep no new
// TLS client out.
TEST(AdmissionTest, AReplayedClientHelloFloodKeepsNoTlsClientOut) {
  RaiseOwnFdLimit();
  RefitdProcess refitd;
  std::string cert;
  StartTlsRefitd("tls-hello-flood", &refitd, &cert);
  const std::string hello = CannedClientHello();
  ASSERT_GT(hello.size(), 5u);
  const FloodOutcome r = LegitimateCallsUnderFlood(refitd, "127.0.0.2", hello, cert);
  std::printf("TLS, refitd nofile=1024: flood of %.0f connections/s from 127.0.0.2 each "
              "replaying one ClientHello: %d of 20 new TLS clients answered, slowest %.0f ms; "
              "refitd at %.0f%% of a core\n",
              r.flood_per_second, r.ok, r.slowest_ms, 100 * r.refitd_cpu);
  EXPECT_EQ(r.ok, 20);
  EXPECT_GT(r.flood_per_second, 1000);
  EXPECT_TRUE(refitd.Alive());
}

TEST(AdmissionTest, AFirstHeaderBlockThatNeverEndsIsClosed) {
  RefitdProcess refitd;
  ASSERT_TRUE(refitd.Start(Runfile("server/refitd"), {}, TmpFile("continuation.log"),
                           absl::Seconds(20))
                  .ok());
  const int64_t rss_before = refitd.PeakRssKib();
  const int fd = Dial(refitd.port());
  ASSERT_GE(fd, 0);
  timeval t{1, 0};  // a send blocked for 1 s ends the flood
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &t, sizeof(t));
  ASSERT_TRUE(SendAll(fd, std::string(kPreface) + Frame(4, 0, 0, "") +
                              Frame(1, 0, 1, Header("x-pad", std::string(100, 'p')))));
  const std::string continuation = Frame(9, 0, 1, Header("x-pad", std::string(16000, 'p')));
  const absl::Time start = absl::Now();
  int64_t sent = 0;
  bool refused = false;
  while (sent < (int64_t{256} << 20) && absl::Now() - start < absl::Seconds(20)) {
    const ssize_t n = send(fd, continuation.data(), continuation.size(), MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) continue;  // refitd not reading
    if (n <= 0) {
      refused = true;  // refitd closed the connection
      break;
    }
    sent += n;
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  close(fd);
  std::printf("CONTINUATION flood on a first request: refused=%d after %.2f s and %.1f MiB "
              "sent; peak RSS %.1f MiB (%.1f before)\n",
              refused, seconds, sent / 1048576.0, refitd.PeakRssKib() / 1024.0,
              rss_before / 1024.0);
  EXPECT_TRUE(refused);
  EXPECT_LT(seconds, 5.0);
  EXPECT_LT(refitd.PeakRssKib() - rss_before, 32 * 1024);
  EXPECT_TRUE(refitd.Alive());
}

}  // namespace
}  // namespace refit

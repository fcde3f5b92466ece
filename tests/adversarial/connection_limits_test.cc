// Hostile connections against a refitd child process, without a token:
// ~1,000 HTTP/2 connections stalled mid-frame at a low open-file limit, or
// 1,013 sending the preface and SETTINGS and then nothing at nofile=1024, do
// not keep a member out (it registers within seconds) and are closed;
// connections that send only the HTTP/2 preface and SETTINGS are closed
// after --first_request_timeout_ms; a 1 MiB gzip of 1 GiB of zeros
// is refused before it is inflated (refitd's peak RSS measured); /metrics answers under 8 slow clients (a byte every
// 2 s) and 224 idle connections.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/refit_client.h"
#include "common/file.h"
#include "gtest/gtest.h"
#include "proto/protocol_version.h"
#include "testing/refitd_process.h"
#include "testing/test_paths.h"
#include "tests/adversarial/h2_wire.h"
#include "tests/adversarial/metrics_scrape.h"

namespace refit {
namespace {

using ::refit::testing::Runfile;
using ::refit::testing::TmpFile;

using ::refit::testing::CpuSeconds;
using ::refit::testing::Dial;
using ::refit::testing::Frame;
using ::refit::testing::GrpcHeaders;
using ::refit::testing::kPreface;
using ::refit::testing::MetricsPort;
using ::refit::testing::RaiseOwnFdLimit;
using ::refit::testing::ScrapeMetrics;
using ::refit::testing::SendAll;


// The gzip of a KvSetRequest {key: "k", value: `zeros` zero bytes}.
std::string GzipOfZeroValue(int64_t zeros) {
  std::string head = "\x0a\x01k\x12";
  for (uint64_t v = static_cast<uint64_t>(zeros); ; v >>= 7) {
    if (v < 128) {
      head.push_back(static_cast<char>(v));
      break;
    }
    head.push_back(static_cast<char>((v & 127) | 128));
  }
  z_stream z{};
  deflateInit2(&z, Z_BEST_COMPRESSION, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY);
  std::string out;
  std::vector<unsigned char> chunk(1 << 20, 0), buf(1 << 16);
  auto pump = [&](const unsigned char* in, size_t n, int flush) {
    z.next_in = const_cast<unsigned char*>(in);
    z.avail_in = static_cast<uInt>(n);
    do {
      z.next_out = buf.data();
      z.avail_out = static_cast<uInt>(buf.size());
      deflate(&z, flush);
      out.append(reinterpret_cast<char*>(buf.data()), buf.size() - z.avail_out);
    } while (z.avail_out == 0 || (flush == Z_FINISH && z.avail_in > 0));
  };
  pump(reinterpret_cast<const unsigned char*>(head.data()), head.size(), Z_NO_FLUSH);
  for (int64_t left = zeros; left > 0; left -= static_cast<int64_t>(chunk.size())) {
    pump(chunk.data(), static_cast<size_t>(std::min<int64_t>(left, chunk.size())), Z_NO_FLUSH);
  }
  pump(nullptr, 0, Z_FINISH);
  deflateEnd(&z);
  return out;
}

struct H2Outcome {
  bool answered = false;    // the server ended the stream (or the connection)
  size_t sent = 0;          // message bytes sent before that
  double seconds = 0;
};

// Sends one gRPC call with a compressed message `body` on a new
// connection, honouring the server's flow control, until the server ends
// the stream or `timeout` passes.
H2Outcome SendCompressedCall(int port, const std::string& body, absl::Duration timeout) {
  H2Outcome r;
  const int fd = Dial(port);
  if (fd < 0) return r;
  std::string msg = {1, static_cast<char>(body.size() >> 24), static_cast<char>(body.size() >> 16),
                     static_cast<char>(body.size() >> 8), static_cast<char>(body.size())};
  msg += body;
  SendAll(fd, std::string(kPreface) + Frame(4, 0, 0, "") +
                  Frame(1, 4, 1, GrpcHeaders("KvSet", "gzip")));
  int64_t conn_window = 65535, stream_window = 65535;
  std::string in;
  const absl::Time start = absl::Now(), until = start + timeout;
  while (!r.answered && absl::Now() < until) {
    // Send what the windows allow, in 16 KiB DATA frames.
    while (r.sent < msg.size() && conn_window > 0 && stream_window > 0) {
      const size_t n = std::min<size_t>({16384, msg.size() - r.sent,
                                         static_cast<size_t>(conn_window),
                                         static_cast<size_t>(stream_window)});
      const bool last = r.sent + n == msg.size();
      if (!SendAll(fd, Frame(0, last ? 1 : 0, 1, msg.substr(r.sent, n)))) {
        r.answered = true;  // the server closed the connection
        break;
      }
      r.sent += n;
      conn_window -= static_cast<int64_t>(n);
      stream_window -= static_cast<int64_t>(n);
    }
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    char buf[65536];
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      r.answered = true;
      break;
    }
    in.append(buf, static_cast<size_t>(n));
    while (in.size() >= 9) {
      const auto* h = reinterpret_cast<const unsigned char*>(in.data());
      const size_t len = (size_t{h[0]} << 16) | (size_t{h[1]} << 8) | h[2];
      if (in.size() < 9 + len) break;
      const unsigned char type = h[3], flags = h[4];
      const uint32_t stream = ((h[5] & 0x7fu) << 24) | (h[6] << 16) | (h[7] << 8) | h[8];
      const auto* p8 = h + 9;
      if (type == 4 && (flags & 1) == 0) {  // SETTINGS: note the window, ACK
        for (size_t i = 0; i + 6 <= len; i += 6) {
          const int id = (p8[i] << 8) | p8[i + 1];
          const int64_t v = (int64_t{p8[i + 2]} << 24) | (p8[i + 3] << 16) | (p8[i + 4] << 8) |
                            p8[i + 5];
          if (id == 4) stream_window += v - 65535;
        }
        SendAll(fd, Frame(4, 1, 0, ""));
      } else if (type == 8 && len == 4) {  // WINDOW_UPDATE
        const int64_t inc = (int64_t{p8[0] & 0x7fu} << 24) | (p8[1] << 16) | (p8[2] << 8) | p8[3];
        (stream == 0 ? conn_window : stream_window) += inc;
      } else if ((type == 1 && stream == 1 && (flags & 1) != 0) || type == 3 || type == 7) {
        r.answered = true;  // trailers, RST_STREAM or GOAWAY
      }
      in.erase(0, 9 + len);
    }
  }
  r.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  close(fd);
  return r;
}

// Connections that send the HTTP/2 preface and SETTINGS and then nothing
// (no request even after the server's SETTINGS) are closed by the gate
// after --first_request_timeout_ms.
TEST(ConnectionLimitsTest, APrefaceAndSettingsThenSilenceIsClosed) {
  RefitdProcess refitd;
  ASSERT_TRUE(refitd
                  .Start(Runfile("server/refitd"), {"--first_request_timeout_ms=1000"},
                         TmpFile("silent.log"), absl::Seconds(20))
                  .ok());
  constexpr int kConnections = 50;
  std::vector<int> fds;
  for (int i = 0; i < kConnections; ++i) {
    const int fd = Dial(refitd.port());
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(SendAll(fd, std::string(kPreface) + Frame(4, 0, 0, "")));
    fds.push_back(fd);
  }
  const absl::Time start = absl::Now(), until = start + absl::Seconds(30);
  int closed = 0;
  double last = 0;
  for (int fd : fds) {
    // Drop what the server sends until it closes the connection.
    while (absl::Now() < until) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 200) <= 0) continue;
      char buf[4096];
      if (recv(fd, buf, sizeof(buf), 0) <= 0) {
        ++closed;
        last = absl::ToDoubleSeconds(absl::Now() - start);
        break;
      }
    }
    close(fd);
  }
  std::printf("%d of %d silent connections closed by refitd, the last after %.2f s\n", closed,
              kConnections, last);
  EXPECT_EQ(closed, kConnections);
  EXPECT_TRUE(refitd.Alive());
}

TEST(ConnectionLimitsTest, ACompressedBombIsRefusedBeforeItIsInflated) {
  const std::string gzip = GzipOfZeroValue(int64_t{1} << 30);
  std::printf("gzip of 1 GiB of zeros: %zu bytes\n", gzip.size());
  RefitdProcess refitd;
  ASSERT_TRUE(
      refitd.Start(Runfile("server/refitd"), {}, TmpFile("gzip.log"), absl::Seconds(20)).ok());
  const int64_t before = refitd.PeakRssKib();
  H2Outcome r = SendCompressedCall(refitd.port(), gzip, absl::Seconds(30));
  std::printf("refitd answered=%d after %.2f s having taken %zu of %zu bytes; peak RSS "
              "%.1f MiB (%.1f before)\n",
              r.answered, r.seconds, r.sent, gzip.size() + 5, refitd.PeakRssKib() / 1024.0,
              before / 1024.0);
  EXPECT_TRUE(r.answered);
  EXPECT_LT(refitd.PeakRssKib() - before, 128 * 1024);
  EXPECT_TRUE(refitd.Alive());
}

// Opens `count` connections to a refitd child whose open-file limit is
// `fd_limit`, each sending `hello` and then held; meanwhile a member
// registers within 5 s, and refitd closes every connection it took within
// 12 s (--first_request_timeout_ms, 10 s by default) using little CPU.
void HeldConnectionsKeepNoMemberOut(const std::string& name, const std::string& hello,
                                    int64_t fd_limit, int count) {
  RaiseOwnFdLimit();
  RefitdProcess refitd;
  ASSERT_TRUE(refitd
                  .Start(Runfile("server/refitd"), {}, TmpFile(name + ".log"),
                         absl::Seconds(20), fd_limit)
                  .ok());
  std::vector<int> held;
  const absl::Time opened = absl::Now();
  const double cpu_before = CpuSeconds(refitd.pid());
  for (int i = 0; i < count; ++i) {
    const int fd = Dial(refitd.port());
    if (fd < 0) continue;
    SendAll(fd, hello);
    held.push_back(fd);
  }
  ASSERT_GT(held.size(), count * 9u / 10);
  const absl::Time start = absl::Now();
  RefitClient::Options o;
  o.target = absl::StrCat("127.0.0.1:", refitd.port());
  o.refitd_timeout = absl::Seconds(5);
  auto member = RefitClient::Connect(o);
  ASSERT_TRUE(member.ok()) << member.status();
  v1::Registration reg;
  reg.set_protocol_version(kProtocolVersion);
  reg.mutable_identity()->set_job("slow");
  reg.mutable_identity()->set_side(v1::SIDE_TRAINER);
  reg.mutable_identity()->set_world_size(1);
  reg.set_model_config("tiny-qwen3");
  reg.set_convention("fsdp:dp=1");
  absl::StatusOr<std::string> id = (*member)->Register(reg);
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  EXPECT_TRUE(id.ok()) << id.status();
  EXPECT_LT(seconds, 5.0);
  // The held connections refitd took are closed by it.
  absl::SleepFor(opened + absl::Seconds(12) - absl::Now());
  const double cpu = CpuSeconds(refitd.pid()) - cpu_before;
  int closed = 0;
  for (int fd : held) {
    // Past what refitd sent (its SETTINGS), the end of the connection.
    char buf[256];
    ssize_t n;
    while ((n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT)) > 0) {
    }
    if (n == 0 || errno != EAGAIN) ++closed;
    close(fd);
  }
  std::printf("%s, refitd nofile=%lld: %zu connections held; member registered in %.2f s; "
              "%d of them closed by refitd within 12 s; refitd used %.2f s of CPU in those "
              "12 s; peak RSS %.1f MiB\n",
              name.c_str(), static_cast<long long>(fd_limit), held.size(), seconds, closed,
              cpu, refitd.PeakRssKib() / 1024.0);
  EXPECT_EQ(closed, static_cast<int>(held.size()));
  EXPECT_LT(cpu, 3.0);  // the held connections are not polled in a loop
  EXPECT_TRUE(refitd.Alive());
}

TEST(ConnectionLimitsTest, StalledHttp2ConnectionsDoNotKeepAMemberOut) {
  // Preface, SETTINGS, and the first byte of a HEADERS frame announcing
  // 16 KiB: never completed.
  HeldConnectionsKeepNoMemberOut("slowloris",
                                 std::string(kPreface) + Frame(4, 0, 0, "") +
                                     Frame(1, 4, 1, "x", /*announced=*/16384),
                                 /*fd_limit=*/512, 1000);
}

// The outsider's 1,013 connections that send the HTTP/2 preface and
// SETTINGS and then nothing, against refitd's open-file limit of 1,024.
TEST(ConnectionLimitsTest, PrefaceAndSettingsConnectionsAtTheFdLimitKeepNoMemberOut) {
  HeldConnectionsKeepNoMemberOut("preface-settings", std::string(kPreface) + Frame(4, 0, 0, ""),
                                 /*fd_limit=*/1024, 1013);
}

TEST(ConnectionLimitsTest, MetricsAnswersUnderSlowAndIdleClients) {
  RefitdProcess refitd;
  const std::string log = TmpFile("metrics.log");
  ASSERT_TRUE(refitd.Start(Runfile("server/refitd"), {"--metrics_port=0"}, log,
                           absl::Seconds(20))
                  .ok());
  const int port = MetricsPort(log);
  ASSERT_GT(port, 0);
  std::atomic<bool> stop{false};
  std::vector<std::thread> slow;
  for (int i = 0; i < 8; ++i) {
    slow.emplace_back([&] {
      const std::string req = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
      int fd = Dial(port);
      for (size_t k = 0; fd >= 0 && k < req.size() && !stop.load(); ++k) {
        if (!SendAll(fd, req.substr(k, 1))) break;
        for (int t = 0; t < 20 && !stop.load(); ++t) absl::SleepFor(absl::Milliseconds(100));
      }
      if (fd >= 0) close(fd);
    });
  }
  absl::SleepFor(absl::Milliseconds(200));
  std::vector<int> idle;
  for (int i = 0; i < 224; ++i) idle.push_back(Dial(port));
  double worst = 0;
  for (int scrape = 0; scrape < 3; ++scrape) {
    const absl::Time start = absl::Now();
    const std::string page = ScrapeMetrics(port);
    const double s = absl::ToDoubleSeconds(absl::Now() - start);
    worst = std::max(worst, s);
    EXPECT_TRUE(absl::StartsWith(page, "HTTP/1.1 200")) << page.substr(0, 200);
    EXPECT_TRUE(absl::StrContains(page, "refit_")) << page.substr(0, 200);
    EXPECT_LT(s, 2.0);
    absl::SleepFor(absl::Seconds(1));
  }
  std::printf("/metrics under 8 slow and 224 idle clients: slowest of 3 scrapes %.3f s\n", worst);
  stop.store(true);
  for (auto& t : slow) t.join();
  for (int fd : idle) {
    if (fd >= 0) close(fd);
  }
  EXPECT_TRUE(refitd.Alive());
}

}  // namespace
}  // namespace refit

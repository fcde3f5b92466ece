// ConnectionRelay: bytes move both ways unchanged, a client past the bounds
// gets a GOAWAY and both ends close, gRPC's peer maps back to the client's.
#include "server/connection_relay.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "server/h2_test_frames.h"

namespace refit {
namespace {

using ::refit::h2_test::Frame;
using ::refit::h2_test::kPreface;

bool SendAll(int fd, const std::string& s) {
  for (size_t off = 0; off < s.size();) {
    pollfd p{fd, POLLOUT, 0};
    if (poll(&p, 1, 5000) <= 0) return false;
    const ssize_t n = send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno != EAGAIN) return false;
    if (n > 0) off += static_cast<size_t>(n);
  }
  return true;
}

// Reads until `want` bytes arrived or the peer closed (then `*closed`), 5 s at most.
std::string Receive(int fd, size_t want, bool* closed = nullptr) {
  std::string got;
  while (got.size() < want) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 5000) <= 0) break;
    char buf[65536];
    const ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n <= 0) {
      if (closed != nullptr && (n == 0 || errno != EAGAIN)) *closed = true;
      if (n == 0 || errno != EAGAIN) break;
      continue;
    }
    got.append(buf, static_cast<size_t>(n));
  }
  return got;
}

struct Pair {
  int ours = -1, relayed = -1;
};
Pair ClientPair() {
  int fds[2];
  EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), 0);
  return {fds[0], fds[1]};
}

TEST(ConnectionRelayTest, BytesMoveBothWaysAndThePeerMapsBack) {
  auto relay = ConnectionRelay::Start(H2ClientLimits());
  ASSERT_TRUE(relay.ok()) << relay.status();
  Pair client = ClientPair();
  auto grpc_end = (*relay)->Relay(client.relayed, "ipv4:10.1.2.3:4567", "10.1.2.3");
  ASSERT_TRUE(grpc_end.ok()) << grpc_end.status();
  // gRPC's view of its peer (unix-abstract:refitd-relay-... in gRPC's words).
  sockaddr_un addr{};
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getpeername(*grpc_end, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string name(addr.sun_path + 1, len - offsetof(sockaddr_un, sun_path) - 1);
  EXPECT_TRUE(absl::StartsWith(name, "refitd-relay-")) << name;
  EXPECT_EQ((*relay)->RealPeer("unix-abstract:" + name), "ipv4:10.1.2.3:4567");
  EXPECT_EQ((*relay)->RealPeer("ipv4:1.1.1.1:1"), "ipv4:1.1.1.1:1");

  // 4 MiB of DATA frames up, 4 MiB down, unchanged.
  std::string up = std::string(kPreface) + Frame(1, 4, 1, "h");
  for (int i = 0; i < 256; ++i) up += Frame(0, 0, 1, std::string(16384, static_cast<char>(i)));
  std::string down(4 << 20, 'x');
  for (size_t i = 0; i < down.size(); i += 4097) down[i] = static_cast<char>(i);
  std::string got_up, got_down;
  std::thread writer([&] {
    SendAll(client.ours, up);
    SendAll(*grpc_end, down);
  });
  got_up = Receive(*grpc_end, up.size());
  got_down = Receive(client.ours, down.size());
  writer.join();
  EXPECT_TRUE(got_up == up);
  EXPECT_TRUE(got_down == down);

  // gRPC closes its end: what it sent last still reaches the client.
  ASSERT_TRUE(SendAll(*grpc_end, Frame(7, 0, 0, "goodbye!")));
  close(*grpc_end);
  bool closed = false;
  EXPECT_EQ(Receive(client.ours, 1 << 20, &closed), Frame(7, 0, 0, "goodbye!"));
  EXPECT_TRUE(closed);
  close(client.ours);
  EXPECT_EQ((*relay)->closed_for_abuse(), 0);
}

TEST(ConnectionRelayTest, AContinuationFloodGetsAGoAwayAndBothEndsClose) {
  auto relay = ConnectionRelay::Start(H2ClientLimits());
  ASSERT_TRUE(relay.ok()) << relay.status();
  Pair client = ClientPair();
  auto grpc_end = (*relay)->Relay(client.relayed, "ipv4:10.1.2.3:4567", "10.1.2.3");
  ASSERT_TRUE(grpc_end.ok());
  std::string flood = std::string(kPreface) + Frame(1, 4, 1, "h") + Frame(1, 0, 3, "x");
  for (int i = 0; i < 200; ++i) flood += Frame(9, 0, 3, std::string(1000, 'c'));
  SendAll(client.ours, flood);  // may fail once the relay closed it
  bool client_closed = false, grpc_closed = false;
  const std::string to_client = Receive(client.ours, 1 << 20, &client_closed);
  Receive(*grpc_end, 1 << 20, &grpc_closed);
  EXPECT_TRUE(client_closed);
  EXPECT_TRUE(grpc_closed);
  ASSERT_GE(to_client.size(), 17u);
  EXPECT_EQ(to_client[3], 7);                 // GOAWAY
  EXPECT_EQ(to_client.substr(9, 8), std::string("\0\0\0\x03\0\0\0\x0b", 8));  // stream 3, calm
  EXPECT_TRUE(absl::StrContains(to_client, "header block of more than"));
  EXPECT_EQ((*relay)->closed_for_abuse(), 1);
  close(client.ours);
  close(*grpc_end);
}

TEST(ConnectionRelayTest, AClientThatEndsLetsGrpcFinish) {
  auto relay = ConnectionRelay::Start(H2ClientLimits());
  ASSERT_TRUE(relay.ok());
  Pair client = ClientPair();
  auto grpc_end = (*relay)->Relay(client.relayed, "ipv4:10.1.2.3:4567", "10.1.2.3");
  ASSERT_TRUE(grpc_end.ok());
  ASSERT_TRUE(SendAll(client.ours, std::string(kPreface) + Frame(1, 5, 1, "h")));
  shutdown(client.ours, SHUT_WR);
  bool closed = false;
  EXPECT_EQ(Receive(*grpc_end, 1 << 20, &closed).size(), 24u + 10u);
  EXPECT_TRUE(closed);  // gRPC sees the end of what the client sends
  ASSERT_TRUE(SendAll(*grpc_end, Frame(1, 5, 1, "answer")));
  close(*grpc_end);
  closed = false;
  EXPECT_EQ(Receive(client.ours, 1 << 20, &closed), Frame(1, 5, 1, "answer"));
  EXPECT_TRUE(closed);
  close(client.ours);
}

}  // namespace
}  // namespace refit

// Every transport checks lane and peer arguments by one rule
// (CheckWaveArguments, transport.h): the in-process and Gloo transports
// here, NCCL through the same function. A rejected call names the rank and
// the bad lane or peer, and leaves the transport usable.
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "exec/transport/gloo_transport.h"
#include "exec/transport/inproc_transport.h"
#include "exec/transport/kv_store.h"
#include "exec/transport/transport.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace refit {
namespace {

using ::testing::HasSubstr;

struct BadCall {
  const char* what;
  int32_t lane;
  int32_t send_peer;  // -2: no send
  int32_t recv_peer;  // -2: no receive
  const char* names;  // in the message
};

// For rank 0 of a 2-rank, 2-lane world.
const BadCall kBad[] = {
    {"negative lane", -1, -2, -2, "lane -1"},
    {"lane past the last", 2, -2, -2, "lane 2"},
    {"negative send peer", 0, -1, -2, "send peer -1"},
    {"send peer outside the world", 0, 2, -2, "send peer 2"},
    {"send to itself", 0, 0, -2, "send peer 0"},
    {"receive peer outside the world", 0, -2, 5, "recv peer 5"},
    {"receive from itself", 0, -2, 0, "recv peer 0"},
};

absl::Status Call(Transport& t, const BadCall& c, char* buf) {
  std::vector<SendOp> s;
  std::vector<RecvOp> r;
  if (c.send_peer != -2) s.push_back({c.send_peer, buf, 4});
  if (c.recv_peer != -2) r.push_back({c.recv_peer, buf + 4, 4});
  return t.StartWave(c.lane, s, r, absl::Now() + absl::Seconds(5));
}

void ExpectRejected(Transport& t) {
  char buf[8] = {};
  for (const BadCall& c : kBad) {
    absl::Status s = Call(t, c, buf);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.what << ": " << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("rank 0")) << c.what;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.names)) << c.what;
  }
  absl::Status w = t.WaitWave(7, absl::Now() + absl::Seconds(5));
  EXPECT_EQ(w.code(), absl::StatusCode::kInvalidArgument) << w;
  EXPECT_THAT(std::string(w.message()), HasSubstr("lane 7"));
}

// Rank 0 sends 4 bytes to rank 1 on lane 1 (after the rejected calls).
void ExpectExchange(Transport& t0, Transport& t1) {
  const char src[4] = {1, 2, 3, 4};
  char dst[4] = {};
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  absl::Status s0, s1;
  std::thread a([&] {
    SendOp op{1, src, 4};
    s0 = t0.StartWave(1, {&op, 1}, {}, deadline);
    if (s0.ok()) s0 = t0.WaitWave(1, deadline);
  });
  RecvOp op{0, dst, 4};
  s1 = t1.StartWave(1, {}, {&op, 1}, deadline);
  if (s1.ok()) s1 = t1.WaitWave(1, deadline);
  a.join();
  EXPECT_TRUE(s0.ok()) << s0;
  EXPECT_TRUE(s1.ok()) << s1;
  EXPECT_EQ(std::string(dst, 4), std::string(src, 4));
}

TEST(TransportArgumentsTest, TheRuleItself) {
  EXPECT_TRUE(CheckWaveArguments(0, 2, 2, 1, {}, {}).ok());
  char buf[4];
  SendOp ok{1, buf, 4};
  EXPECT_TRUE(CheckWaveArguments(0, 2, 2, 0, {&ok, 1}, {}).ok());
  EXPECT_EQ(CheckLane(3, 2, 2).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(CheckLane(3, 2, 2).message()), HasSubstr("rank 3: lane 2"));
}

TEST(TransportArgumentsTest, InProcessTransportRejectsByTheRule) {
  auto fabric = InProcFabric::Create(2, 2);
  ASSERT_TRUE(fabric.ok()) << fabric.status();
  auto t0 = InProcTransport::Create(*fabric, 0);
  auto t1 = InProcTransport::Create(*fabric, 1);
  ASSERT_TRUE(t0.ok() && t1.ok());
  ExpectRejected(**t0);
  ExpectExchange(**t0, **t1);
}

TEST(TransportArgumentsTest, GlooTransportRejectsByTheRule) {
  InMemoryKvStore store;
  std::vector<std::unique_ptr<GlooTransport>> t(2);
  std::vector<std::thread> th;
  for (int r = 0; r < 2; ++r) {
    th.emplace_back([&, r] {
      GlooTransportOptions o;
      o.num_lanes = 2;
      o.connect_timeout = absl::Seconds(30);
      auto g = GlooTransport::Create(&store, r, 2, o);
      if (g.ok()) t[r] = std::move(*g);
    });
  }
  for (auto& x : th) x.join();
  ASSERT_TRUE(t[0] && t[1]);
  ExpectRejected(*t[0]);
  ExpectExchange(*t[0], *t[1]);
}

}  // namespace
}  // namespace refit

// GlooTransport in one process (two ranks, two threads, an in-memory key
// store): bytes move; Cancel from another thread ends a wait that no peer
// would ever end, with the reason given, long before the deadline; and
// once a wave failed or was cancelled, a late send from a live peer never
// lands in the receive buffer (its owner may have freed it).
#include "exec/transport/gloo_transport.h"

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "exec/transport/kv_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace refit {
namespace {

using ::testing::HasSubstr;

// Both ranks of a 2-rank world, connected concurrently.
std::vector<std::unique_ptr<GlooTransport>> Connect(KvStore* store, int lanes) {
  std::vector<std::unique_ptr<GlooTransport>> t(2);
  std::vector<absl::Status> s(2);
  std::vector<std::thread> th;
  for (int r = 0; r < 2; ++r) {
    th.emplace_back([&, r] {
      GlooTransportOptions o;
      o.num_lanes = lanes;
      o.connect_timeout = absl::Seconds(30);
      auto g = GlooTransport::Create(store, r, 2, o);
      s[r] = g.status();
      if (g.ok()) t[r] = std::move(*g);
    });
  }
  for (auto& x : th) x.join();
  EXPECT_TRUE(s[0].ok()) << s[0];
  EXPECT_TRUE(s[1].ok()) << s[1];
  return t;
}

TEST(GlooTransport, MovesBytesOnEveryLane) {
  InMemoryKvStore store;
  auto t = Connect(&store, 2);
  ASSERT_TRUE(t[0] && t[1]);
  for (int lane = 0; lane < 2; ++lane) {
    std::string src(1 << 20, '\0'), dst(1 << 20, '\0');
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<char>(i * 7 + lane);
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    SendOp send{1, src.data(), static_cast<int64_t>(src.size())};
    RecvOp recv{0, dst.data(), static_cast<int64_t>(dst.size())};
    ASSERT_TRUE(t[1]->StartWave(lane, {}, {&recv, 1}, deadline).ok());
    ASSERT_TRUE(t[0]->StartWave(lane, {&send, 1}, {}, deadline).ok());
    ASSERT_TRUE(t[0]->WaitWave(lane, deadline).ok());
    ASSERT_TRUE(t[1]->WaitWave(lane, deadline).ok());
    EXPECT_EQ(src, dst);
  }
}

TEST(GlooTransport, CancelEndsAWaitNoPeerWouldEnd) {
  InMemoryKvStore store;
  auto t = Connect(&store, 2);
  ASSERT_TRUE(t[0] && t[1]);
  // Rank 0 waits on lane 1 for a message rank 1 never sends.
  std::string dst(4096, '\0');
  RecvOp recv{1, dst.data(), static_cast<int64_t>(dst.size())};
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  ASSERT_TRUE(t[0]->StartWave(1, {}, {&recv, 1}, deadline).ok());
  std::thread canceller([&] {
    absl::SleepFor(absl::Milliseconds(200));
    t[0]->Cancel(absl::AbortedError("wave 7 aborted: member trainer rank 1 died"));
  });
  const absl::Time t0 = absl::Now();
  absl::Status s = t[0]->WaitWave(1, deadline);
  canceller.join();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
  EXPECT_TRUE(absl::IsAborted(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("trainer rank 1 died"));
  // Every later use of the transport fails with the same reason.
  absl::Status again = t[0]->StartWave(0, {}, {}, deadline);
  EXPECT_TRUE(absl::IsAborted(again)) << again;
}

// Rank 0 posted a receive of 64 KiB that failed (`fail`); rank 1 then sends
// it. Returns rank 0's buffer once rank 1's send ended (either way).
std::string AfterALateSend(const std::function<absl::Status(GlooTransport&)>& fail) {
  InMemoryKvStore store;
  auto t = Connect(&store, 2);
  if (!t[0] || !t[1]) return "";
  std::string dst(64 << 10, 'x'), src(64 << 10, 'y');
  RecvOp recv{1, dst.data(), static_cast<int64_t>(dst.size())};
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  EXPECT_TRUE(t[0]->StartWave(0, {}, {&recv, 1}, deadline).ok());
  const absl::Status failed = fail(*t[0]);
  EXPECT_FALSE(failed.ok());
  SendOp send{0, src.data(), static_cast<int64_t>(src.size())};
  if (t[1]->StartWave(0, {&send, 1}, {}, deadline).ok()) {
    (void)t[1]->WaitWave(0, absl::Now() + absl::Seconds(2));
  }
  absl::SleepFor(absl::Milliseconds(200));  // room for bytes in flight to land
  return dst;
}

TEST(GlooTransport, ACancelledReceiveNeverWritesTheCallersMemory) {
  const std::string dst = AfterALateSend([](GlooTransport& t) {
    t.Cancel(absl::AbortedError("round 3 aborted"));
    return t.WaitWave(0, absl::Now() + absl::Seconds(5));
  });
  ASSERT_FALSE(dst.empty());
  EXPECT_EQ(dst, std::string(dst.size(), 'x')) << "bytes landed after Cancel";
}

TEST(GlooTransport, AReceiveThatTimedOutNeverWritesTheCallersMemory) {
  const std::string dst = AfterALateSend([](GlooTransport& t) {
    absl::Status s = t.WaitWave(0, absl::Now() + absl::Milliseconds(100));
    EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
    return s;
  });
  ASSERT_FALSE(dst.empty());
  EXPECT_EQ(dst, std::string(dst.size(), 'x')) << "bytes landed after the wave failed";
}

}  // namespace
}  // namespace refit

#include "client/live_bytes.h"

#include <cstring>
#include <thread>
#include <vector>

#include "exec/transport/inproc_transport.h"
#include "gtest/gtest.h"

namespace refit {
namespace {

// Two ranks over an in-process fabric, each made through CountingTransports.
struct Pair {
  std::shared_ptr<LiveBytes> sender = std::make_shared<LiveBytes>();
  std::shared_ptr<LiveBytes> receiver = std::make_shared<LiveBytes>();
  std::unique_ptr<Transport> t0, t1;
};

Pair MakePair() {
  Pair p;
  std::shared_ptr<InProcFabric> fabric = *InProcFabric::Create(2, 1);
  TransportFactory inproc = [fabric](KvStore*, int32_t rank, int32_t, int32_t)
      -> absl::StatusOr<std::unique_ptr<Transport>> {
    absl::StatusOr<std::unique_ptr<InProcTransport>> t = InProcTransport::Create(fabric, rank);
    if (!t.ok()) return t.status();
    return std::unique_ptr<Transport>(std::move(*t));
  };
  p.t0 = *CountingTransports(inproc, p.sender)(nullptr, 0, 2, 1);
  p.t1 = *CountingTransports(inproc, p.receiver)(nullptr, 1, 2, 1);
  return p;
}

TEST(LiveBytesTest, CountsEachCompletedWaveOnItsSide) {
  Pair p = MakePair();
  std::vector<char> src(1000, 'x'), dst(1000, 0);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  for (int wave = 0; wave < 3; ++wave) {
    const SendOp send{1, src.data() + wave * 300, 300};
    const RecvOp recv{0, dst.data() + wave * 300, 300};
    std::thread peer([&] {
      ASSERT_TRUE(p.t1->StartWave(0, {}, {&recv, 1}, deadline).ok());
      ASSERT_TRUE(p.t1->WaitWave(0, deadline).ok());
    });
    ASSERT_TRUE(p.t0->StartWave(0, {&send, 1}, {}, deadline).ok());
    ASSERT_TRUE(p.t0->WaitWave(0, deadline).ok());
    peer.join();
    EXPECT_EQ(p.sender->moved(), 300 * (wave + 1));
    EXPECT_EQ(p.receiver->moved(), 300 * (wave + 1));
  }
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), 900), 0);
  // A wait with no wave in flight adds nothing; Reset starts a round at 0.
  ASSERT_TRUE(p.t0->WaitWave(0, deadline).ok());
  EXPECT_EQ(p.sender->moved(), 900);
  p.sender->Reset();
  EXPECT_EQ(p.sender->moved(), 0);
}

TEST(LiveBytesTest, AWaveThatFailsCountsNothing) {
  Pair p = MakePair();
  std::vector<char> src(100, 'x');
  const SendOp send{1, src.data(), 100};
  ASSERT_TRUE(p.t0->StartWave(0, {&send, 1}, {}, absl::Now() + absl::Seconds(5)).ok());
  // Nobody receives: the wait ends at its deadline with an error.
  EXPECT_FALSE(p.t0->WaitWave(0, absl::Now() + absl::Milliseconds(100)).ok());
  EXPECT_EQ(p.sender->moved(), 0);
  // A bad lane is the inner transport's error, unchanged.
  EXPECT_EQ(p.t0->StartWave(5, {}, {}, absl::Now()).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace refit

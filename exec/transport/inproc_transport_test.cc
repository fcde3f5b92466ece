// InProcTransport: a rank whose wave failed, or whose transport is gone,
// leaves nothing posted, so a peer's later send never lands in memory the
// rank's owner may have freed.
#include "exec/transport/inproc_transport.h"

#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace refit {
namespace {

struct World {
  std::shared_ptr<InProcFabric> fabric;
  std::unique_ptr<InProcTransport> t0, t1;
};

World Connect() {
  World w;
  w.fabric = *InProcFabric::Create(2, 1);
  w.t0 = *InProcTransport::Create(w.fabric, 0);
  w.t1 = *InProcTransport::Create(w.fabric, 1);
  return w;
}

// Rank 1 sends 4 KiB of 'y' to rank 0; returns how its wave ended.
absl::Status LateSend(InProcTransport& t1) {
  static const std::string src(4096, 'y');
  SendOp send{0, src.data(), static_cast<int64_t>(src.size())};
  absl::Status s = t1.StartWave(0, {&send, 1}, {}, absl::Now() + absl::Seconds(5));
  if (!s.ok()) return s;
  return t1.WaitWave(0, absl::Now() + absl::Milliseconds(100));
}

TEST(InProcTransport, MovesBytes) {
  World w = Connect();
  std::string dst(4096, 'x');
  RecvOp recv{1, dst.data(), static_cast<int64_t>(dst.size())};
  ASSERT_TRUE(w.t0->StartWave(0, {}, {&recv, 1}, absl::Now() + absl::Seconds(5)).ok());
  EXPECT_TRUE(LateSend(*w.t1).ok());
  EXPECT_TRUE(w.t0->WaitWave(0, absl::Now() + absl::Seconds(5)).ok());
  EXPECT_EQ(dst, std::string(4096, 'y'));
}

TEST(InProcTransport, AReceiveThatTimedOutNeverWritesTheCallersMemory) {
  World w = Connect();
  std::string dst(4096, 'x');
  RecvOp recv{1, dst.data(), static_cast<int64_t>(dst.size())};
  ASSERT_TRUE(w.t0->StartWave(0, {}, {&recv, 1}, absl::Now() + absl::Seconds(5)).ok());
  absl::Status s = w.t0->WaitWave(0, absl::Now() + absl::Milliseconds(20));
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_TRUE(absl::IsDeadlineExceeded(LateSend(*w.t1)));  // nobody receives it
  EXPECT_EQ(dst, std::string(4096, 'x')) << "bytes landed after the wave failed";
}

TEST(InProcTransport, ADestroyedTransportsReceiveNeverWritesTheCallersMemory) {
  World w = Connect();
  std::string dst(4096, 'x');
  RecvOp recv{1, dst.data(), static_cast<int64_t>(dst.size())};
  ASSERT_TRUE(w.t0->StartWave(0, {}, {&recv, 1}, absl::Now() + absl::Seconds(5)).ok());
  w.t0.reset();
  EXPECT_TRUE(absl::IsDeadlineExceeded(LateSend(*w.t1)));
  EXPECT_EQ(dst, std::string(4096, 'x')) << "bytes landed after the transport was destroyed";
}

}  // namespace
}  // namespace refit

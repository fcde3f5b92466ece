// The in-process device transport on one GPU: matched sends and receives
// copy device bytes in posting order, ordered after the sender's earlier
// lane work and before the receiver's later lane work; a killed or
// cancelled rank fails its peers with ABORTED naming it, a peer that never
// posts ends in DEADLINE_EXCEEDED by the deadline (no hang), a byte count
// mismatch is INTERNAL. SKIP (REFIT_GPU_SKIP) without a GPU.
#include "testing/cuda_inproc_transport.h"

#include <cuda_runtime_api.h>

#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "testing/gpu_test.h"

namespace refit {
namespace testing {
namespace {

struct Pair {
  std::shared_ptr<CudaInProcFabric> fabric;
  std::unique_ptr<CudaInProcTransport> t[2];
};

// Two ranks on GPU 0.
Pair MakePair(int32_t lanes) {
  Pair p;
  p.fabric = *CudaInProcFabric::Create(2, lanes);
  for (int r = 0; r < 2; ++r) p.t[r] = *CudaInProcTransport::Create(p.fabric, r);
  return p;
}

cudaStream_t Stream(CudaInProcTransport* t, int32_t lane) {
  return static_cast<cudaStream_t>(t->stream(lane));
}

// Three waves from rank 0 to rank 1 on lane 1, each of two 1 MiB messages.
// The sender writes its buffer on its lane stream right before posting and
// overwrites it right after: the copy must see the first write only. The
// receiver posts first (its gate holds its stream until the copy is done).
void ExpectOrderedWaves() {
  Pair p = MakePair(2);
  constexpr int64_t kBytes = 1 << 20;
  char* src = nullptr;
  char* dst = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&src), 2 * kBytes), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dst), 2 * kBytes), cudaSuccess);
  // The memset's first use outside the rounds (nothing that may
  // synchronize the device while the receiver's gate waits on this thread).
  ASSERT_EQ(cudaMemsetAsync(src, 0, 2 * kBytes, Stream(p.t[0].get(), 1)), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(Stream(p.t[0].get(), 1)), cudaSuccess);
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  for (int round = 1; round <= 3; ++round) {
    absl::Status st[2];
    std::vector<uint8_t> got;
    std::thread recv([&] {
      RecvOp r[2] = {{0, dst, kBytes}, {0, dst + kBytes, kBytes}};
      st[1] = p.t[1]->StartWave(1, {}, r, deadline);
      if (st[1].ok()) st[1] = p.t[1]->WaitWave(1, deadline);
      got = FromDevice<uint8_t>(dst, 2 * kBytes);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_EQ(cudaMemsetAsync(src, round, 2 * kBytes, Stream(p.t[0].get(), 1)), cudaSuccess);
    SendOp s[2] = {{1, src, kBytes}, {1, src + kBytes, kBytes}};
    st[0] = p.t[0]->StartWave(1, s, {}, deadline);
    ASSERT_EQ(cudaMemsetAsync(src, 0xFF, 2 * kBytes, Stream(p.t[0].get(), 1)), cudaSuccess);
    if (st[0].ok()) st[0] = p.t[0]->WaitWave(1, deadline);
    recv.join();
    ASSERT_TRUE(st[0].ok()) << st[0];
    ASSERT_TRUE(st[1].ok()) << st[1];
    EXPECT_EQ(got, std::vector<uint8_t>(2 * kBytes, static_cast<uint8_t>(round))) << round;
  }
  p.t[1].reset();
  p.t[0].reset();
  cudaFree(dst);
  cudaFree(src);
}

TEST(CudaInProcTransportTest, MatchedWavesCopyInPostingOrderBehindLaneWork) {
  REFIT_SKIP_WITHOUT_GPU("cuda_inproc_transport_test");
  ExpectOrderedWaves();
}

TEST(CudaInProcTransportTest, KilledOrCancelledRankFailsItsPeerNamingIt) {
  REFIT_SKIP_WITHOUT_GPU("cuda_inproc_transport_test");
  for (bool cancel : {false, true}) {
    Pair p = MakePair(1);
    DeviceCopies mem;
    char* dst = mem.Add(nullptr, 64);
    const absl::Time start = absl::Now();
    RecvOp r = {0, dst, 64};
    ASSERT_TRUE(p.t[1]->StartWave(0, {}, {&r, 1}, start + absl::Seconds(30)).ok());
    std::thread killer([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (cancel) {
        p.t[0]->Cancel(absl::CancelledError("round aborted"));
      } else {
        p.fabric->Kill(0);
      }
    });
    absl::Status s = p.t[1]->WaitWave(0, start + absl::Seconds(30));
    killer.join();
    EXPECT_TRUE(absl::IsAborted(s)) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "peer rank 0 failed")) << s;
    EXPECT_LT(absl::Now() - start, absl::Seconds(5));
    // Later waves with the dead rank fail at once, naming it.
    SendOp back = {0, dst, 64};
    s = p.t[1]->StartWave(0, {&back, 1}, {}, absl::Now() + absl::Seconds(5));
    EXPECT_TRUE(absl::IsAborted(s)) << s;
    if (cancel) {
      EXPECT_TRUE(absl::IsCancelled(p.t[0]->CheckCancelled()));
    }
  }
}

TEST(CudaInProcTransportTest, PeerThatNeverPostsEndsByTheDeadline) {
  REFIT_SKIP_WITHOUT_GPU("cuda_inproc_transport_test");
  Pair p = MakePair(1);
  DeviceCopies mem;
  char* dst = mem.Add(nullptr, 64);
  RecvOp r = {0, dst, 64};
  const absl::Time start = absl::Now();
  ASSERT_TRUE(p.t[1]->StartWave(0, {}, {&r, 1}, start + absl::Seconds(1)).ok());
  absl::Status s = p.t[1]->WaitWave(0, start + absl::Milliseconds(300));
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "rank 1 lane 0 (peers 0)")) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  // The rank that gave up fails its peer's later post, naming it.
  SendOp send = {1, dst, 64};
  s = p.t[0]->StartWave(0, {&send, 1}, {}, absl::Now() + absl::Seconds(1));
  EXPECT_TRUE(absl::IsAborted(s) && absl::StrContains(s.message(), "peer rank 1")) << s;
  // The lane stream drains (the gate opened): no hang in teardown.
  EXPECT_EQ(cudaStreamSynchronize(Stream(p.t[1].get(), 0)), cudaSuccess);
}

TEST(CudaInProcTransportTest, ByteCountMismatchIsInternal) {
  REFIT_SKIP_WITHOUT_GPU("cuda_inproc_transport_test");
  Pair p = MakePair(1);
  DeviceCopies mem;
  char* buf = mem.Add(nullptr, 64);
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  SendOp s = {1, buf, 64};
  RecvOp r = {0, buf + 32, 32};
  ASSERT_TRUE(p.t[0]->StartWave(0, {&s, 1}, {}, deadline).ok());
  absl::Status st = p.t[1]->StartWave(0, {}, {&r, 1}, deadline);
  EXPECT_TRUE(absl::IsInternal(st) && absl::StrContains(st.message(), "sends 64 bytes")) << st;
  st = p.t[0]->WaitWave(0, deadline);
  EXPECT_TRUE(absl::IsInternal(st)) << st;
}

}  // namespace
}  // namespace testing
}  // namespace refit

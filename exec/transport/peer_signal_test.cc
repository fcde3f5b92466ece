#include "exec/transport/peer_signal.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace refit {
namespace {

using ::testing::HasSubstr;

TEST(PeerSignalTest, WaiterSeesThePublishedValue) {
  auto owner = PeerSignal::Create();
  ASSERT_TRUE(owner.ok()) << owner.status();
  auto peer = PeerSignal::Open((*owner)->name(), getpid());
  ASSERT_TRUE(peer.ok()) << peer.status();
  Cancellation never;
  std::thread t([&] {
    absl::SleepFor(absl::Milliseconds(20));
    (*owner)->Publish(PeerSignal::Encode(3, false));
  });
  const absl::Time t0 = absl::Now();
  absl::StatusOr<uint64_t> v = (*peer)->WaitAtLeast(PeerSignal::Encode(3, false),
                                                    absl::Now() + absl::Seconds(10), never, "o");
  t.join();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, PeerSignal::Encode(3, false));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(2));
  // A value already there returns at once; a failed round is told apart.
  (*owner)->Publish(PeerSignal::Encode(4, true));
  v = (*peer)->WaitAtLeast(PeerSignal::Encode(4, false), absl::Now() + absl::Seconds(1), never,
                           "o");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v & 1, 1u);
}

TEST(PeerSignalTest, DeadlineAndCancelEndTheWait) {
  auto owner = PeerSignal::Create();
  ASSERT_TRUE(owner.ok());
  Cancellation never;
  const absl::Time t0 = absl::Now();
  absl::StatusOr<uint64_t> v = (*owner)->WaitAtLeast(2, absl::Now() + absl::Milliseconds(50),
                                                     never, "trainer rank 1");
  EXPECT_EQ(v.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(v.status().message(), HasSubstr("trainer rank 1"));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(1));

  Cancellation cancel;
  std::thread t([&] {
    absl::SleepFor(absl::Milliseconds(20));
    cancel.Cancel(absl::AbortedError("round 7 aborted"));
  });
  v = (*owner)->WaitAtLeast(2, absl::Now() + absl::Seconds(30), cancel, "x");
  t.join();
  EXPECT_EQ(v.status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(v.status().message(), HasSubstr("round 7 aborted"));
}

TEST(PeerSignalTest, BadNamesAndRemovedNamesAreRefused) {
  EXPECT_EQ(PeerSignal::Open("/etc-passwd", 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PeerSignal::Open("/refit-signal-../../x", 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto owner = PeerSignal::Create();
  ASSERT_TRUE(owner.ok());
  const std::string name = (*owner)->name();
  (*owner)->Unlink();
  EXPECT_EQ(PeerSignal::Open(name, getpid()).status().code(), absl::StatusCode::kUnavailable);
  owner->reset();
}

// Another process publishes, then is killed: the waiter learns of its
// death within a second (it stays a zombie until reaped below).
TEST(PeerSignalTest, AnOwnerThatDiesFailsItsWaitersFast) {
  int to_parent[2], to_child[2];
  ASSERT_EQ(pipe(to_parent), 0);
  ASSERT_EQ(pipe(to_child), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto s = PeerSignal::Create();
    if (!s.ok()) _exit(1);
    const std::string name = (*s)->name();
    if (write(to_parent[1], name.data(), name.size()) != static_cast<ssize_t>(name.size())) {
      _exit(1);
    }
    char c;
    if (read(to_child[0], &c, 1) != 1) _exit(1);
    (*s)->Publish(PeerSignal::Encode(1, false));
    pause();
    _exit(0);
  }
  char buf[128] = {};
  ASSERT_GT(read(to_parent[0], buf, sizeof(buf) - 1), 0);
  auto peer = PeerSignal::Open(buf, child);
  ASSERT_TRUE(peer.ok()) << peer.status();
  ASSERT_EQ(write(to_child[1], "g", 1), 1);
  Cancellation never;
  absl::StatusOr<uint64_t> v = (*peer)->WaitAtLeast(PeerSignal::Encode(1, false),
                                                    absl::Now() + absl::Seconds(10), never,
                                                    "trainer rank 0");
  EXPECT_TRUE(v.ok()) << v.status();
  kill(child, SIGKILL);
  const absl::Time t0 = absl::Now();
  v = (*peer)->WaitAtLeast(PeerSignal::Encode(2, false), absl::Now() + absl::Seconds(30), never,
                           "trainer rank 0");
  EXPECT_EQ(v.status().code(), absl::StatusCode::kUnavailable) << v.status();
  EXPECT_THAT(v.status().message(), HasSubstr("trainer rank 0"));
  EXPECT_THAT(v.status().message(), HasSubstr("exited"));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(1));
  waitpid(child, nullptr, 0);
  // The dead owner's name is left behind; its creator would have removed
  // it after prepare. Clean up here.
  shm_unlink(buf);
}

}  // namespace
}  // namespace refit

#include "exec/transport/kv_store.h"

#include <thread>

#include "gtest/gtest.h"

namespace refit {
namespace {

TEST(InMemoryKvStoreTest, GetWaitsForSetAndTimesOutNamingTheKey) {
  InMemoryKvStore store;
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_TRUE(store.Set("nccl/lane0", "id").ok());
  });
  auto v = store.Get("nccl/lane0", absl::Seconds(10));
  setter.join();
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, "id");
  auto missing = store.Get("nccl/lane1", absl::Milliseconds(20));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(missing.status().message().find("nccl/lane1"), std::string::npos);
}

}  // namespace
}  // namespace refit

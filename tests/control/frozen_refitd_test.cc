// A member notices a frozen refitd (a child refitd stopped with SIGSTOP)
// within about its refitd_timeout, with a reason that says so, instead of
// waiting out its own deadline.
#include <signal.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "client/refit_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/protocol_version.h"
#include "testing/refitd_process.h"

namespace refit {
namespace {

using ::testing::HasSubstr;

TEST(FrozenRefitdTest, AMemberNoticesAStoppedRefitdWithinItsTimeout) {
  RefitdProcess refitd;
  ASSERT_TRUE(refitd.Start(absl::StrCat(std::getenv("TEST_SRCDIR"), "/refit/server/refitd"), {},
                           absl::StrCat(std::getenv("TEST_TMPDIR"), "/refitd.out"),
                           absl::Seconds(20))
                  .ok());
  RefitClient::Options o;
  o.target = absl::StrCat("127.0.0.1:", refitd.port());
  o.heartbeat_interval = absl::Milliseconds(100);
  o.refitd_timeout = absl::Seconds(1);
  auto c = RefitClient::Connect(o);
  ASSERT_TRUE(c.ok()) << c.status();
  v1::Registration reg;
  reg.set_protocol_version(kProtocolVersion);
  auto* id = reg.mutable_identity();
  id->set_job("job");
  id->set_side(v1::SIDE_TRAINER);
  id->set_world_size(1);
  id->set_host_id("h");
  reg.set_model_config("tiny-qwen3");
  reg.set_convention("megatron:tp=1");
  ASSERT_TRUE((*c)->Register(reg).ok());

  ASSERT_EQ(kill(refitd.pid(), SIGSTOP), 0);
  const absl::Time stopped = absl::Now();
  absl::StatusOr<int64_t> round = (*c)->WaitForRound(stopped + absl::Seconds(30));
  const absl::Duration took = absl::Now() - stopped;
  EXPECT_EQ(round.status().code(), absl::StatusCode::kUnavailable) << round.status();
  EXPECT_THAT(std::string(round.status().message()),
              HasSubstr(absl::StrCat("refitd at ", o.target, " did not answer heartbeats")));
  EXPECT_LT(took, absl::Seconds(5));  // ~refitd_timeout + one heartbeat deadline
}

}  // namespace
}  // namespace refit

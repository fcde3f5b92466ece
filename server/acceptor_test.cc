// Acceptor::Listen: addresses it takes and the errors it names.
#include "server/acceptor.h"

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace refit {
namespace {

TEST(AcceptorTest, ListensOnAPortItPicksAndNamesWhatItCannotBind) {
  auto a = Acceptor::Listen("127.0.0.1:0");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_GT((*a)->port(), 0);
  auto taken = Acceptor::Listen(absl::StrCat("127.0.0.1:", (*a)->port()));
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kUnavailable) << taken.status();
  EXPECT_NE(taken.status().message().find("cannot listen on 127.0.0.1:"),
            absl::string_view::npos);
  EXPECT_EQ(Acceptor::Listen("localhost").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Acceptor::Listen("127.0.0.1:99999").status().code(),
            absl::StatusCode::kInvalidArgument);
  auto v6 = Acceptor::Listen("[::1]:0");
  if (v6.ok()) EXPECT_GT((*v6)->port(), 0);  // where the machine has IPv6
  (*a)->Stop();
  (*a)->Stop();  // idempotent
}

}  // namespace
}  // namespace refit

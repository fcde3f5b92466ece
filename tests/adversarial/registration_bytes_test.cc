// Registration bytes bounded in all, against a refitd child
// (--max_registration_mib=8): members padding their registrations with
// ~3 MiB of buffer names each are refused RESOURCE_EXHAUSTED naming the
// flag once the members' registrations would pass 8 MiB, refitd's memory
// stays bounded, and a member leaving makes room again.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/refit_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/refitd_process.h"
#include "testing/tiny_registration.h"

namespace refit {
namespace {

using ::testing::HasSubstr;

absl::Time In(absl::Duration d) { return absl::Now() + d; }

// Trainer rank `rank` of 4, its registration padded with ~3 MiB of buffer
// names (3,000 copies of its first buffer under 1,000-byte names).
v1::Registration Padded(int rank) {
  v1::Registration r = testing::TinyRegistration(true, "job");
  r.mutable_identity()->set_rank(rank);
  r.mutable_identity()->set_world_size(4);
  const v1::LocalBuffer first = r.buffers(0);
  for (int i = 0; i < 3000; ++i) {
    v1::LocalBuffer* b = r.add_buffers();
    *b = first;
    b->set_name(absl::StrCat("pad/", i, "/", std::string(990, 'p')));
  }
  return r;
}

TEST(RegistrationBytesTest, TheMembersRegistrationsAreBoundedInAll) {
  RefitdProcess refitd;
  ASSERT_TRUE(refitd
                  .Start(absl::StrCat(std::getenv("TEST_SRCDIR"), "/refit/server/refitd"),
                         {"--max_registration_mib=8"},
                         absl::StrCat(std::getenv("TEST_TMPDIR"), "/refitd.out"),
                         absl::Seconds(20))
                  .ok());
  std::vector<std::unique_ptr<RefitClient>> members;
  std::vector<absl::Status> results;
  for (int rank = 0; rank < 4; ++rank) {
    RefitClient::Options o;
    o.target = absl::StrCat("127.0.0.1:", refitd.port());
    auto c = RefitClient::Connect(o);
    ASSERT_TRUE(c.ok()) << c.status();
    results.push_back((*c)->Register(Padded(rank)).status());
    members.push_back(std::move(*c));
  }
  EXPECT_TRUE(results[0].ok()) << results[0];
  EXPECT_TRUE(results[1].ok()) << results[1];
  for (int rank : {2, 3}) {
    EXPECT_TRUE(absl::IsResourceExhausted(results[rank])) << results[rank];
    EXPECT_THAT(std::string(results[rank].message()), HasSubstr("--max_registration_mib"));
  }
  std::printf("refitd peak RSS %.1f MiB\n", refitd.PeakRssKib() / 1024.0);
  EXPECT_LT(refitd.PeakRssKib(), 256 * 1024);
  // A member leaving makes room for another.
  ASSERT_TRUE(members[0]->Leave(In(absl::Seconds(10))).ok());
  EXPECT_TRUE(members[2]->Register(Padded(2)).ok());
  EXPECT_TRUE(refitd.Alive());
}

}  // namespace
}  // namespace refit

// Registration bytes bounded per member and in all (refitd holds one job at
// a time: also per job), against a refitd child: members padding their
// registrations with buffer names are refused RESOURCE_EXHAUSTED naming
// --max_registration_mib once the members' registrations would pass it,
// one registration over --max_metadata_bytes is refused naming that flag,
// refitd's memory stays bounded, a member leaving makes room again, and
// the job's own members still join and get their plan.
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
#include "tests/adversarial/refitd_peers.h"

namespace refit {
namespace {

using ::testing::HasSubstr;

absl::Time In(absl::Duration d) { return absl::Now() + d; }

// `r` padded with `count` copies of its first buffer under 1,000-byte
// names (~`count` KB more).
v1::Registration Pad(v1::Registration r, int count) {
  const v1::LocalBuffer first = r.buffers(0);
  for (int i = 0; i < count; ++i) {
    v1::LocalBuffer* b = r.add_buffers();
    *b = first;
    b->set_name(absl::StrCat("pad/", i, "/", std::string(990, 'p')));
  }
  return r;
}

// Trainer rank `rank` of 4, its registration padded with ~3 MiB of buffer
// names.
v1::Registration Padded(int rank) {
  v1::Registration r = testing::TinyRegistration(true, "job");
  r.mutable_identity()->set_rank(rank);
  r.mutable_identity()->set_world_size(4);
  return Pad(r, 3000);
}

// Rank 0 of engine "X<i>", a 2-rank replica of job "job" that is never
// complete (never planned), padded with `count` KB of buffer names.
v1::Registration PaddedEngine(int i, int count) {
  v1::Registration r = testing::TinyRegistration(false, "job", absl::StrCat("X", i));
  r.mutable_identity()->set_world_size(2);
  return Pad(r, count);
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
    members.push_back(testing::ConnectRefitd(refitd.port()));
    ASSERT_TRUE(members.back());
    results.push_back(members.back()->Register(Padded(rank)).status());
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

// The outsider's 46 members with 60 MiB of buffer names each (6.2 GiB held
// without a bound), scaled with the limits by the flags: 46 made-up engine
// members of the job with 6 MiB of names each against
// --max_registration_mib=64 (1,024 by default) and --max_metadata_bytes of
// 8 MiB (64 MiB). Ten are admitted, the rest refused naming the flag;
// refitd's memory grows by less than three times the bound; the job's own
// engine still joins and the job gets its plan.
TEST(RegistrationBytesTest, FortySixPaddedMembersAreBoundedAndTheJobStillJoins) {
  RefitdProcess refitd;
  ASSERT_TRUE(refitd
                  .Start(absl::StrCat(std::getenv("TEST_SRCDIR"), "/refit/server/refitd"),
                         {"--plan_settle_ms=5", "--max_registration_mib=64",
                          "--max_metadata_bytes=8388608"},
                         absl::StrCat(std::getenv("TEST_TMPDIR"), "/refitd46.out"),
                         absl::Seconds(20))
                  .ok());
  std::unique_ptr<RefitClient> t = testing::ConnectRefitd(refitd.port());
  ASSERT_TRUE(t);
  ASSERT_TRUE(t->Register(testing::TinyRegistration(true, "job")).ok());
  const int64_t before_kib = refitd.PeakRssKib();
  std::vector<std::unique_ptr<RefitClient>> crowd;
  int admitted = 0;
  const absl::Time start = absl::Now();
  for (int i = 0; i < 46; ++i) {
    crowd.push_back(testing::ConnectRefitd(refitd.port()));
    ASSERT_TRUE(crowd.back());
    const absl::Status s = crowd.back()->Register(PaddedEngine(i, 6 * 1024)).status();
    if (s.ok()) {
      ++admitted;
      continue;
    }
    EXPECT_TRUE(absl::IsResourceExhausted(s)) << i << ": " << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("--max_registration_mib")) << i;
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  EXPECT_EQ(admitted, 10);
  // One member's registration over --max_metadata_bytes: refused naming it.
  std::unique_ptr<RefitClient> big = testing::ConnectRefitd(refitd.port());
  ASSERT_TRUE(big);
  const absl::Status over = big->Register(PaddedEngine(46, 8 * 1024 + 256)).status();
  EXPECT_TRUE(absl::IsInvalidArgument(over)) << over;
  EXPECT_THAT(std::string(over.message()), HasSubstr("--max_metadata_bytes"));
  const int64_t peak_kib = refitd.PeakRssKib();
  std::printf("46 members x 6 MiB of buffer names, --max_registration_mib=64: %d admitted, "
              "%d refused in %.1f s; refitd peak RSS %.1f -> %.1f MiB\n",
              admitted, 46 - admitted, seconds, before_kib / 1024.0, peak_kib / 1024.0);
  EXPECT_LT(peak_kib - before_kib, 3 * 64 * 1024);
  // The job's own engine joins, and the job gets its plan.
  std::unique_ptr<RefitClient> a = testing::ConnectRefitd(refitd.port());
  ASSERT_TRUE(a);
  ASSERT_TRUE(a->Register(testing::TinyRegistration(false, "job", "A")).ok());
  EXPECT_TRUE(t->AwaitPlan(In(absl::Seconds(20))).ok());
  EXPECT_TRUE(a->AwaitPlan(In(absl::Seconds(20))).ok());
  EXPECT_TRUE(refitd.Alive());
}

}  // namespace
}  // namespace refit
